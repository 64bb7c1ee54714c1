//! Tests of the run's cgroup: the plan as data, the limits written, the hierarchy found.

use super::made::create_with;
use super::*;
use std::fs;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Instant;
use tempfile::TempDir;

const MIB: u64 = 1 << 20;

fn put(path: &Path, content: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

/// Stands in for the kernel: a new cgroup directory comes with these (empty) files.
fn kernel_files(files: &'static [&'static str]) -> impl Fn(&Path) -> io::Result<()> {
    move |dir: &Path| {
        for f in files {
            File::create(dir.join(f))?;
        }
        Ok(())
    }
}

const V1_FILES: &[&str] = &[
    "cgroup.procs",
    "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.oom_control",
    "pids.max",
    "pids.events",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "cpu.stat",
];
const V1_FILES_NO_SWAP: &[&str] = &[
    "cgroup.procs",
    "memory.limit_in_bytes",
    "memory.oom_control",
    "pids.max",
    "pids.events",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "cpu.stat",
];
const V2_FILES: &[&str] = &[
    "cgroup.procs",
    "memory.max",
    "memory.swap.max",
    "memory.events",
    "pids.max",
    "pids.events",
    "cpu.max",
    "cpu.stat",
];

/// Empties a fake cgroup directory the way the kernel's rmdir does on cgroupfs.
fn clear(dir: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        fs::remove_file(e.unwrap().path()).unwrap();
    }
}

fn limits() -> CgroupLimits {
    CgroupLimits {
        memory: Some(64 * MIB),
        pids: Some(64),
        cpu_percent: Some(200),
    }
}

const NAME: &str = "stepproof-4242-1a2b";

/// Like this machine: v1 memory at /process_api/abc, pids and cpu at the root, cpu
/// co-mounted with cpuacct, a v2 hierarchy at unified that has only hugetlb.
fn v1_hybrid(t: &Path) -> CgroupHost {
    fs::create_dir_all(t.join("memory/process_api/abc")).unwrap();
    fs::create_dir_all(t.join("pids")).unwrap();
    fs::create_dir_all(t.join("cpu,cpuacct")).unwrap();
    put(&t.join("unified/cgroup.controllers"), "hugetlb\n");
    put(&t.join("unified/cgroup.subtree_control"), "");
    let t = t.display();
    let mountinfo = format!(
        "25 1 0:23 / /proc rw,nosuid - proc proc rw\n\
             31 23 0:28 / {t} rw,relatime - tmpfs tmpfs rw,mode=755\n\
             32 31 0:29 / {t}/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n\
             35 31 0:32 / {t}/memory rw,relatime - cgroup cgroup rw,memory\n\
             39 31 0:36 / {t}/pids rw,relatime - cgroup cgroup rw,pids\n\
             40 31 0:37 / {t}/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
             41 31 0:38 / {t}/unified rw,relatime - cgroup2 cgroup2 rw\n"
    );
    let self_cgroup = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/abc\n\
                           2:cpu,cpuacct:/\n0::/\n";
    CgroupHost::from_texts(self_cgroup, &mountinfo, 4242)
}

/// A pure v2 host whose own cgroup is /user.slice/run.scope.
fn v2_host(t: &Path, controllers: &str, subtree: &str, procs: &str, own_pid: u32) -> CgroupHost {
    let own = t.join("user.slice/run.scope");
    put(&own.join("cgroup.controllers"), controllers);
    put(&own.join("cgroup.subtree_control"), subtree);
    put(&own.join("cgroup.procs"), procs);
    let mountinfo = format!(
        "30 23 0:26 / {} rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n",
        t.display()
    );
    CgroupHost::from_texts("0::/user.slice/run.scope\n", &mountinfo, own_pid)
}

#[test]
fn discovers_this_machines_layout() {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let host = v1_hybrid(t);
    let h = |mount: &str, own: &str| Hierarchy {
        mount: t.join(mount),
        own_dir: t.join(own),
    };
    let expected = CgroupHost {
        v1: BTreeMap::from([
            ("cpu".to_string(), h("cpu,cpuacct", "cpu,cpuacct")),
            ("memory".to_string(), h("memory", "memory/process_api/abc")),
            ("pids".to_string(), h("pids", "pids")),
        ]),
        v2: Some(h("unified", "unified")),
        own_pid: 4242,
    };
    assert_eq!(host, expected);
}

#[test]
fn discover_reads_the_proc_files() {
    let tmp = TempDir::new().unwrap();
    let mountinfo = format!(
        "35 31 0:32 / {}/memory rw - cgroup cgroup rw,memory\n",
        tmp.path().display()
    );
    put(&tmp.path().join("proc/self/cgroup"), "4:memory:/a\n");
    put(&tmp.path().join("proc/self/mountinfo"), &mountinfo);
    let host = CgroupHost::discover(&tmp.path().join("proc"));
    let expected = CgroupHost::from_texts("4:memory:/a\n", &mountinfo, std::process::id());
    assert_eq!(host, expected);
    assert_eq!(host.v1["memory"].own_dir, tmp.path().join("memory/a"));
    let nothing = CgroupHost::discover(&tmp.path().join("missing"));
    assert_eq!(
        nothing,
        CgroupHost {
            v1: BTreeMap::new(),
            v2: None,
            own_pid: std::process::id()
        }
    );
}

#[test]
fn mount_roots_escapes_and_dotdot() {
    // A container that bind-mounts its own subtree: mountinfo's root is /docker/c1.
    let mountinfo = "35 31 0:32 /docker/c1 /sys/fs/cgroup/mem\\040ory rw - cgroup cgroup \
                         rw,memory\n\
                         39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n\
                         41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
    let cgroup = "4:memory:/docker/c1/inner\n8:pids:/../outside\n0::/a/stepproof-7-supervisor\n";
    let host = CgroupHost::from_texts(cgroup, mountinfo, 7);
    assert_eq!(
        host.v1["memory"].own_dir,
        PathBuf::from("/sys/fs/cgroup/mem ory/inner")
    );
    // A path out of the namespace's root is not the own cgroup: absent, not joined.
    assert!(!host.v1.contains_key("pids"));
    // After moving into its v2 leaf, the supervisor still creates runs beside it.
    assert_eq!(
        host.v2.unwrap().own_dir,
        PathBuf::from("/sys/fs/cgroup/unified/a")
    );
    // A cgroup outside the mount's root is not visible through it.
    let host = CgroupHost::from_texts("4:memory:/elsewhere\n", mountinfo, 7);
    assert!(host.v1.is_empty());
}

#[test]
fn plan_v1_hybrid_puts_each_limit_under_the_own_cgroup() {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let host = v1_hybrid(t);
    assert_eq!(host.run_name("1a2b"), NAME);
    let plan = plan(&host, &limits(), NAME);
    let expected = CgroupPlan {
        limits: limits(),
        name: NAME.to_string(),
        entries: vec![
            PlannedLimit {
                limit: LimitKind::Memory,
                value: 64 * MIB,
                place: Place::V1 {
                    dir: t.join("memory/process_api/abc").join(NAME),
                },
            },
            PlannedLimit {
                limit: LimitKind::Pids,
                value: 64,
                place: Place::V1 {
                    dir: t.join("pids").join(NAME),
                },
            },
            PlannedLimit {
                limit: LimitKind::Cpu,
                value: 200,
                place: Place::V1 {
                    dir: t.join("cpu,cpuacct").join(NAME),
                },
            },
        ],
    };
    assert_eq!(plan, expected);
    assert!(plan.unavailable().is_empty());
}

#[test]
fn plan_lists_only_the_limits_asked_for() {
    let tmp = TempDir::new().unwrap();
    let host = v1_hybrid(tmp.path());
    let only_pids = CgroupLimits {
        pids: Some(10),
        ..CgroupLimits::default()
    };
    let p = plan(&host, &only_pids, NAME);
    assert_eq!(p.entries.len(), 1);
    assert_eq!(p.entries[0].limit, LimitKind::Pids);
    assert!(
        plan(&host, &CgroupLimits::default(), NAME)
            .entries
            .is_empty()
    );
}

#[test]
fn plan_refuses_bad_names_and_zero_limits() {
    let tmp = TempDir::new().unwrap();
    let host = v1_hybrid(tmp.path());
    for name in [
        "../escape",
        "stepproof-1-..",
        "stepproof-1-a/b",
        "other-1-a",
        "stepproof-x-a",
        "stepproof-1-",
        "stepproof-0-a",
        "stepproof-1-supervisor",
    ] {
        let p = plan(&host, &limits(), name);
        assert_eq!(p.unavailable().len(), 3, "{name}");
        assert!(p.unavailable()[0].1.contains("not valid"), "{name}");
    }
    let zero = CgroupLimits {
        memory: Some(0),
        ..CgroupLimits::default()
    };
    let p = plan(&host, &zero, NAME);
    assert_eq!(
        p.unavailable(),
        vec![(
            LimitKind::Memory,
            "a memory limit of 0 cannot be enforced: nothing could run under it"
        )]
    );
}

#[test]
fn plan_missing_own_dir_is_unavailable() {
    // Also what an unwritable dir looks like to root: checked even when tests run as root.
    let tmp = TempDir::new().unwrap();
    let host = v1_hybrid(tmp.path());
    fs::remove_dir_all(tmp.path().join("pids")).unwrap();
    let p = plan(&host, &limits(), NAME);
    let reasons = p.unavailable();
    assert_eq!(reasons.len(), 1);
    assert_eq!(reasons[0].0, LimitKind::Pids);
    assert!(reasons[0].1.starts_with(&format!(
        "cannot create a cgroup in {} (the supervisor's own pids cgroup): ENOENT",
        tmp.path().join("pids").display()
    )));
}

#[test]
fn plan_unwritable_own_dir_is_unavailable() {
    let tmp = TempDir::new().unwrap();
    let host = v1_hybrid(tmp.path());
    let own = tmp.path().join("memory/process_api/abc");
    fs::set_permissions(&own, fs::Permissions::from_mode(0o555)).unwrap();
    let p = plan(&host, &limits(), NAME);
    fs::set_permissions(&own, fs::Permissions::from_mode(0o755)).unwrap();
    if nix::unistd::geteuid().is_root() {
        crate::say!("skipped: root may write a 0555 directory, so access(W_OK) succeeds");
        return;
    }
    let reasons = p.unavailable();
    assert_eq!(reasons.len(), 1);
    assert_eq!(reasons[0].0, LimitKind::Memory);
    assert!(reasons[0].1.contains("EACCES"), "{}", reasons[0].1);
}

#[test]
fn create_v1_writes_the_limits_with_memsw() {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let p = plan(&v1_hybrid(t), &limits(), NAME);
    let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
    let mem = t.join("memory/process_api/abc").join(NAME);
    let pids = t.join("pids").join(NAME);
    let cpu = t.join("cpu,cpuacct").join(NAME);
    assert_eq!(run.dirs(), vec![mem.clone(), pids.clone(), cpu.clone()]);
    assert_eq!(read(&mem.join("memory.limit_in_bytes")), "67108864");
    assert_eq!(read(&mem.join("memory.memsw.limit_in_bytes")), "67108864");
    assert_eq!(read(&pids.join("pids.max")), "64");
    assert_eq!(read(&cpu.join("cpu.cfs_period_us")), "100000");
    assert_eq!(read(&cpu.join("cpu.cfs_quota_us")), "200000");
    // Each directory carries only its own controller's limit.
    assert_eq!(read(&pids.join("memory.limit_in_bytes")), "");
    assert_eq!(read(&mem.join("pids.max")), "");
    assert!(run.supervisor_leaf().is_none());
}

#[test]
fn create_v1_skips_memsw_when_absent() {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let p = plan(&v1_hybrid(t), &limits(), NAME);
    let _run = create_with(&p, &kernel_files(V1_FILES_NO_SWAP)).unwrap();
    let mem = t.join("memory/process_api/abc").join(NAME);
    assert_eq!(read(&mem.join("memory.limit_in_bytes")), "67108864");
    assert!(!mem.join("memory.memsw.limit_in_bytes").exists());
}

#[test]
fn create_failure_removes_what_it_made() {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let p = plan(&v1_hybrid(t), &limits(), NAME);
    // No interface files at all: the first write fails, naming the file.
    let err = create_with(&p, &|_| Ok(())).unwrap_err();
    let file = t
        .join("memory/process_api/abc")
        .join(NAME)
        .join("memory.limit_in_bytes");
    assert!(
        matches!(&err, CgroupError::Write { path, value, .. }
            if *path == file && value == "67108864"),
        "{err}"
    );
    assert!(err.to_string().contains(&file.display().to_string()));
    assert!(!t.join("memory/process_api/abc").join(NAME).exists());
    assert!(!t.join("pids").join(NAME).exists());
}

#[test]
fn create_refuses_an_existing_dir_and_leaves_it() {
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    let p = plan(&v1_hybrid(t), &limits(), NAME);
    let theirs = t.join("pids").join(NAME);
    put(&theirs.join("cgroup.procs"), "99\n");
    let err = create_with(&p, &kernel_files(V1_FILES)).unwrap_err();
    assert!(
        matches!(&err, CgroupError::AlreadyExists { path } if *path == theirs),
        "{err}"
    );
    assert_eq!(read(&theirs.join("cgroup.procs")), "99\n");
    // The memory cgroup made before it is gone again (its fake files stop the rmdir
    // here, which the kernel would not).
    let ours = t.join("memory/process_api/abc").join(NAME);
    assert!(!ours.exists() || ours.join("memory.limit_in_bytes").exists());
}

#[test]
fn create_refuses_a_plan_pointing_elsewhere() {
    let tmp = TempDir::new().unwrap();
    let mut p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
    p.entries[1].place = Place::V1 {
        dir: tmp.path().join("pids/other"),
    };
    let err = create_with(&p, &kernel_files(V1_FILES)).unwrap_err();
    assert!(matches!(err, CgroupError::OutsideOwn { .. }), "{err}");
    assert!(
        !tmp.path()
            .join("memory/process_api/abc")
            .join(NAME)
            .exists()
    );
}

#[test]
fn create_skips_unavailable_entries() {
    let tmp = TempDir::new().unwrap();
    let host = v1_hybrid(tmp.path());
    fs::remove_dir_all(tmp.path().join("pids")).unwrap();
    let p = plan(&host, &limits(), NAME);
    let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
    assert_eq!(run.dirs().len(), 2);
}

#[test]
fn attach_writes_the_pid_into_each_dir() {
    let tmp = TempDir::new().unwrap();
    let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
    let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
    run.attach(31337).unwrap();
    for dir in run.dirs() {
        assert_eq!(read(&dir.join("cgroup.procs")), "31337");
    }
}

#[test]
fn events_v1_count_kills_refusals_and_throttling() {
    let tmp = TempDir::new().unwrap();
    let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
    let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
    assert_eq!(run.events(), LimitEvents::default());
    let dirs = run.dirs();
    put(
        &dirs[0].join("memory.oom_control"),
        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    );
    put(&dirs[0].join("memory.failcnt"), "1234\n");
    put(&dirs[1].join("pids.events"), "max 37\n");
    put(
        &dirs[2].join("cpu.stat"),
        "nr_periods 50\nnr_throttled 12\nthrottled_time 9000\n",
    );
    let events = run.events();
    assert_eq!(
        events,
        LimitEvents {
            oom_kills: 2,
            forks_refused: 37,
            cpu_throttled: 12
        }
    );
    // Missing files count nothing.
    fs::remove_file(dirs[1].join("pids.events")).unwrap();
    assert_eq!(run.events().forks_refused, 0);
}

#[test]
fn events_v2_count_kills_refusals_and_throttling() {
    let tmp = TempDir::new().unwrap();
    let host = v2_host(
        tmp.path(),
        "cpu memory pids",
        "cpu memory pids",
        "1\n2\n",
        4242,
    );
    let run = create_with(&plan(&host, &limits(), NAME), &kernel_files(V2_FILES)).unwrap();
    let dir = &run.dirs()[0];
    put(
        &dir.join("memory.events"),
        "low 0\nhigh 0\nmax 40\noom 3\noom_kill 3\noom_group_kill 0\n",
    );
    put(&dir.join("pids.events"), "max 5\n");
    put(
        &dir.join("cpu.stat"),
        "usage_usec 100\nnr_periods 9\nnr_throttled 4\nthrottled_usec 7\n",
    );
    assert_eq!(
        run.events(),
        LimitEvents {
            oom_kills: 3,
            forks_refused: 5,
            cpu_throttled: 4
        }
    );
}

#[test]
fn sentences_word_the_events() {
    let limits = CgroupLimits {
        memory: Some(8 << 30),
        pids: Some(4096),
        cpu_percent: Some(200),
    };
    let events = LimitEvents {
        oom_kills: 2,
        forks_refused: 37,
        cpu_throttled: 12,
    };
    assert_eq!(
        events.sentences(&limits),
        vec![
            "2 processes killed by the memory limit (8 GiB)",
            "37 forks refused by the process limit (4096 processes)",
            "CPU throttled 12 times by the CPU limit (200% CPU (2 CPUs))",
        ]
    );
    let once = LimitEvents {
        oom_kills: 1,
        forks_refused: 0,
        cpu_throttled: 1,
    };
    assert_eq!(
        once.sentences(&limits),
        vec![
            "1 process killed by the memory limit (8 GiB)",
            "CPU throttled 1 time by the CPU limit (200% CPU (2 CPUs))",
        ]
    );
    assert!(LimitEvents::default().sentences(&limits).is_empty());
}

#[test]
fn describe_words_values() {
    assert_eq!(describe(LimitKind::Memory, 8 << 30), "8 GiB");
    assert_eq!(describe(LimitKind::Memory, 512 * MIB), "512 MiB");
    assert_eq!(describe(LimitKind::Memory, 1536 * MIB), "1536 MiB");
    assert_eq!(describe(LimitKind::Memory, 64 << 10), "64 KiB");
    assert_eq!(describe(LimitKind::Memory, 2 << 40), "2 TiB");
    assert_eq!(describe(LimitKind::Memory, 1000), "1000 bytes");
    assert_eq!(describe(LimitKind::Pids, 4096), "4096 processes");
    assert_eq!(describe(LimitKind::Pids, 1), "1 process");
    assert_eq!(describe(LimitKind::Cpu, 200), "200% CPU (2 CPUs)");
    assert_eq!(describe(LimitKind::Cpu, 100), "100% CPU (1 CPU)");
    assert_eq!(describe(LimitKind::Cpu, 150), "150% CPU (1.5 CPUs)");
    assert_eq!(describe(LimitKind::Cpu, 125), "125% CPU (1.25 CPUs)");
    assert_eq!(describe(LimitKind::Cpu, 50), "50% CPU (0.5 CPUs)");
    assert_eq!(LimitKind::Memory.to_string(), "memory");
    assert_eq!(LimitKind::Pids.to_string(), "pids");
    assert_eq!(LimitKind::Cpu.to_string(), "cpu");
}

#[test]
fn remove_deletes_the_dirs() {
    let tmp = TempDir::new().unwrap();
    let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
    let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
    let dirs = run.dirs();
    for d in &dirs {
        clear(d);
    }
    run.remove(Duration::from_millis(50)).unwrap();
    for d in &dirs {
        assert!(!d.exists(), "{}", d.display());
    }
}

#[test]
fn remove_names_a_dir_it_cannot_remove() {
    let tmp = TempDir::new().unwrap();
    let p = plan(&v1_hybrid(tmp.path()), &limits(), NAME);
    let run = create_with(&p, &kernel_files(V1_FILES)).unwrap();
    let dirs = run.dirs();
    clear(&dirs[0]);
    clear(&dirs[2]);
    // The pids dir still holds (fake) files: ENOTEMPTY is no reason to wait.
    let started = Instant::now();
    let err = run.remove(Duration::from_secs(5)).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(
        matches!(&err, CgroupError::Remove { path, .. } if *path == dirs[1]),
        "{err}"
    );
    assert!(!dirs[0].exists());
    assert!(!dirs[2].exists());
}

#[test]
fn plan_v2_uses_enabled_controllers_directly() {
    let tmp = TempDir::new().unwrap();
    let own = tmp.path().join("user.slice/run.scope");
    let host = v2_host(
        tmp.path(),
        "cpuset cpu io memory pids",
        "cpu memory pids",
        "1\n2\n",
        4242,
    );
    let p = plan(&host, &limits(), NAME);
    let place = Place::V2 {
        dir: own.join(NAME),
        delegate_self: false,
    };
    let expected = CgroupPlan {
        limits: limits(),
        name: NAME.to_string(),
        entries: vec![
            PlannedLimit {
                limit: LimitKind::Memory,
                value: 64 * MIB,
                place: place.clone(),
            },
            PlannedLimit {
                limit: LimitKind::Pids,
                value: 64,
                place: place.clone(),
            },
            PlannedLimit {
                limit: LimitKind::Cpu,
                value: 200,
                place,
            },
        ],
    };
    assert_eq!(p, expected);
    let run = create_with(&p, &kernel_files(V2_FILES)).unwrap();
    let dir = own.join(NAME);
    assert_eq!(run.dirs(), vec![dir.clone()]);
    assert_eq!(read(&dir.join("memory.max")), "67108864");
    assert_eq!(read(&dir.join("memory.swap.max")), "0");
    assert_eq!(read(&dir.join("pids.max")), "64");
    assert_eq!(read(&dir.join("cpu.max")), "200000 100000");
    // Nothing was enabled or moved.
    assert_eq!(read(&own.join("cgroup.subtree_control")), "cpu memory pids");
    assert!(run.supervisor_leaf().is_none());
}

#[test]
fn create_v2_without_swap_file_leaves_swap_alone() {
    const NO_SWAP: &[&str] = &["cgroup.procs", "memory.max", "pids.max", "cpu.max"];
    let tmp = TempDir::new().unwrap();
    let host = v2_host(tmp.path(), "cpu memory pids", "cpu memory pids", "", 4242);
    let run = create_with(&plan(&host, &limits(), NAME), &kernel_files(NO_SWAP)).unwrap();
    let dir = &run.dirs()[0];
    assert_eq!(read(&dir.join("memory.max")), "67108864");
    assert!(!dir.join("memory.swap.max").exists());
}

#[test]
fn plan_v2_delegates_self_when_alone_in_the_own_cgroup() {
    let tmp = TempDir::new().unwrap();
    let own = tmp.path().join("user.slice/run.scope");
    // create() moves the calling process: in production the supervisor, here the test.
    let me = std::process::id();
    let host = v2_host(tmp.path(), "cpu memory pids", "", &format!("{me}\n"), me);
    let name = host.run_name("c0ffee");
    let only = CgroupLimits {
        memory: Some(MIB),
        pids: Some(8),
        cpu_percent: None,
    };
    let p = plan(&host, &only, &name);
    let place = Place::V2 {
        dir: own.join(&name),
        delegate_self: true,
    };
    assert_eq!(
        p.entries,
        vec![
            PlannedLimit {
                limit: LimitKind::Memory,
                value: MIB,
                place: place.clone(),
            },
            PlannedLimit {
                limit: LimitKind::Pids,
                value: 8,
                place,
            },
        ]
    );
    let run = create_with(&p, &kernel_files(V2_FILES)).unwrap();
    let leaf = own.join(format!("stepproof-{me}-supervisor"));
    assert_eq!(run.supervisor_leaf(), Some(leaf.as_path()));
    assert_eq!(read(&leaf.join("cgroup.procs")), me.to_string());
    assert_eq!(read(&own.join("cgroup.subtree_control")), "+memory +pids");
    assert_eq!(read(&own.join(&name).join("pids.max")), "8");
    // remove leaves the leaf (the supervisor is in it) and takes the run's dir.
    clear(&own.join(&name));
    run.remove(Duration::from_millis(50)).unwrap();
    assert!(!own.join(&name).exists());
    assert!(leaf.is_dir());
    // Discovered again from inside the leaf, the own cgroup is still the scope.
    let again = CgroupHost::from_texts(
        &format!("0::/user.slice/run.scope/stepproof-{me}-supervisor\n"),
        &format!(
            "30 23 0:26 / {} rw - cgroup2 cgroup2 rw\n",
            tmp.path().display()
        ),
        me,
    );
    assert_eq!(again.v2.unwrap().own_dir, own);
}

#[test]
fn plan_v2_other_processes_make_it_unavailable() {
    let tmp = TempDir::new().unwrap();
    let own = tmp.path().join("user.slice/run.scope");
    let host = v2_host(tmp.path(), "cpu memory pids", "pids", "4242\n999\n", 4242);
    let p = plan(&host, &limits(), NAME);
    let reason = format!(
        "the own cgroup {} holds other processes, so no controller can be enabled below it; \
             start stepproof-run in a delegated scope, e.g. `systemd-run --user --scope -p \
             Delegate=yes stepproof-run …`",
        own.display()
    );
    assert_eq!(
        p.unavailable(),
        vec![
            (LimitKind::Memory, reason.as_str()),
            (LimitKind::Cpu, reason.as_str())
        ]
    );
    // pids was already enabled below the own cgroup: it works without moving anything.
    assert_eq!(
        p.entries[1].place,
        Place::V2 {
            dir: own.join(NAME),
            delegate_self: false
        }
    );
}

#[test]
fn plan_v2_controller_not_offered_is_unavailable() {
    let tmp = TempDir::new().unwrap();
    let own = tmp.path().join("user.slice/run.scope");
    let host = v2_host(tmp.path(), "memory pids", "memory pids", "", 4242);
    let p = plan(&host, &limits(), NAME);
    let reason = format!(
        "no cgroup hierarchy offers the cpu controller: it is not mounted as cgroup v1 and \
             not listed in {}",
        own.join("cgroup.controllers").display()
    );
    assert_eq!(p.unavailable(), vec![(LimitKind::Cpu, reason.as_str())]);
    // And on a host with no cgroups at all:
    let none = CgroupHost::from_texts("", "", 1);
    let p = plan(&none, &limits(), NAME);
    assert_eq!(p.unavailable().len(), 3);
    assert!(
        p.unavailable()[0]
            .1
            .ends_with("there is no cgroup v2 hierarchy")
    );
}

#[test]
fn plan_v2_unwritable_own_dir_is_unavailable() {
    let tmp = TempDir::new().unwrap();
    let own = tmp.path().join("user.slice/run.scope");
    let host = v2_host(tmp.path(), "cpu memory pids", "cpu memory pids", "", 4242);
    fs::set_permissions(&own, fs::Permissions::from_mode(0o555)).unwrap();
    let p = plan(&host, &limits(), NAME);
    fs::set_permissions(&own, fs::Permissions::from_mode(0o755)).unwrap();
    if nix::unistd::geteuid().is_root() {
        crate::say!("skipped: root may write a 0555 directory, so access(W_OK) succeeds");
        return;
    }
    assert_eq!(p.unavailable().len(), 3);
    assert!(p.unavailable()[0].1.contains("EACCES"));
}

#[test]
fn v1_controller_is_used_where_v2_does_not_list_it() {
    // A hybrid host whose v2 side offers pids: pids goes to v2, the rest to v1.
    let tmp = TempDir::new().unwrap();
    let t = tmp.path();
    fs::create_dir_all(t.join("memory")).unwrap();
    put(&t.join("unified/cgroup.controllers"), "pids\n");
    put(&t.join("unified/cgroup.subtree_control"), "pids\n");
    let mountinfo = format!(
        "35 31 0:32 / {t}/memory rw - cgroup cgroup rw,memory\n\
             41 31 0:38 / {t}/unified rw - cgroup2 cgroup2 rw\n",
        t = t.display()
    );
    let host = CgroupHost::from_texts("4:memory:/\n0::/\n", &mountinfo, 4242);
    let p = plan(&host, &limits(), NAME);
    assert_eq!(
        p.entries
            .iter()
            .map(|e| e.place.clone())
            .collect::<Vec<_>>(),
        vec![
            Place::V1 {
                dir: t.join("memory").join(NAME)
            },
            Place::V2 {
                dir: t.join("unified").join(NAME),
                delegate_self: false
            },
            Place::Unavailable {
                reason: format!(
                    "no cgroup hierarchy offers the cpu controller: it is not mounted as \
                         cgroup v1 and not listed in {}",
                    t.join("unified/cgroup.controllers").display()
                )
            },
        ]
    );
}

#[test]
fn remove_stale_takes_only_dead_empty_runs() {
    let tmp = TempDir::new().unwrap();
    let host = v1_hybrid(tmp.path());
    let own = tmp.path().join("memory/process_api/abc");
    // A pid that is certainly gone: a child spawned and reaped.
    let mut child = Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let me = std::process::id();

    let stale = own.join(format!("stepproof-{dead}-ab12"));
    fs::create_dir(&stale).unwrap();
    let stale_leaf = tmp.path().join(format!("pids/stepproof-{dead}-supervisor"));
    put(&stale_leaf.join("cgroup.procs"), "");
    fs::remove_file(stale_leaf.join("cgroup.procs")).unwrap();
    let live = own.join(format!("stepproof-{me}-cd34"));
    fs::create_dir(&live).unwrap();
    let busy = own.join(format!("stepproof-{dead}-ef56"));
    put(&busy.join("cgroup.procs"), "123\n");
    // Killed while frozen for an evidence command: thawed, kept until it is empty.
    let frozen = own.join(format!("stepproof-{dead}-f7e2"));
    put(&frozen.join("cgroup.procs"), "124\n");
    put(&frozen.join("freezer.state"), "FROZEN\n");
    let frozen_v2 = own.join(format!("stepproof-{dead}-f7e3"));
    put(&frozen_v2.join("cgroup.procs"), "125\n");
    put(&frozen_v2.join("cgroup.freeze"), "1\n");
    let unrelated = [
        own.join("stepproof-junk"),
        own.join(format!("stepproof-{dead}-")),
        own.join(format!("other-{dead}-ab")),
        own.join(format!("stepproof-+{dead}-ab")),
    ];
    for u in &unrelated {
        fs::create_dir(u).unwrap();
    }
    let target = tmp.path().join("target");
    fs::create_dir(&target).unwrap();
    let link = own.join(format!("stepproof-{dead}-1ink"));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let file = own.join(format!("stepproof-{dead}-f11e"));
    put(&file, "");

    let mut removed = remove_stale(&host);
    removed.sort();
    let mut expected = vec![stale.clone(), stale_leaf.clone()];
    expected.sort();
    assert_eq!(removed, expected);
    assert!(!stale.exists() && !stale_leaf.exists());
    assert!(live.is_dir());
    assert!(busy.is_dir());
    assert_eq!(
        fs::read_to_string(frozen.join("freezer.state")).unwrap(),
        "THAWED"
    );
    assert_eq!(
        fs::read_to_string(frozen_v2.join("cgroup.freeze")).unwrap(),
        "0"
    );
    assert!(!busy.join("freezer.state").exists());
    for u in &unrelated {
        assert!(u.is_dir(), "{}", u.display());
    }
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(target.is_dir());
    assert!(file.is_file());
}

/// The real thing, on a host like this one (root, cgroup v1 memory).
#[test]
fn real_host_limits_a_child() {
    let skip = |reason: &str| {
        // CI runs as root on a host like this one: there a skip is a failure.
        let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        assert!(!ci, "required in CI but unavailable: {reason}");
        crate::say!("skipped: {reason}");
    };
    if !nix::unistd::geteuid().is_root() {
        return skip("creating cgroups on this host needs root");
    }
    if !Path::new("/sys/fs/cgroup/memory").is_dir() {
        return skip("no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory");
    }
    let host = CgroupHost::discover(Path::new("/proc"));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let name = host.run_name(&format!("t{nanos:x}"));
    let limits = CgroupLimits {
        memory: Some(64 * MIB),
        pids: Some(64),
        cpu_percent: Some(50),
    };
    let p = plan(&host, &limits, &name);
    if !p.unavailable().is_empty() {
        return skip(&format!("this host cannot enforce {:?}", p.unavailable()));
    }
    let run = create(&p).unwrap();
    let dirs = run.dirs();
    let mut child = Command::new("sleep").arg("5").spawn().unwrap();
    let pid = child.id();
    let attached = run.attach(pid);
    let listed: Vec<(PathBuf, bool)> = dirs
        .iter()
        .map(|d| {
            let procs = read(&d.join("cgroup.procs"));
            (d.clone(), procs.lines().any(|l| l == pid.to_string()))
        })
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    attached.unwrap();
    for (dir, found) in listed {
        assert!(found, "{pid} not in {}", dir.display());
    }
    for e in &p.entries {
        let (Place::V1 { dir } | Place::V2 { dir, .. }) = &e.place else {
            unreachable!()
        };
        let (file, want) = match e.limit {
            LimitKind::Memory if dir.join("memory.max").exists() => ("memory.max", "67108864"),
            LimitKind::Memory => ("memory.limit_in_bytes", "67108864"),
            LimitKind::Pids => ("pids.max", "64"),
            LimitKind::Cpu if dir.join("cpu.max").exists() => ("cpu.max", "50000 100000"),
            LimitKind::Cpu => ("cpu.cfs_quota_us", "50000"),
        };
        assert_eq!(read(&dir.join(file)).trim(), want, "{}", dir.display());
    }
    assert_eq!(run.events(), LimitEvents::default());
    run.remove(Duration::from_secs(2)).unwrap();
    for d in &dirs {
        assert!(!d.exists(), "{} still there", d.display());
    }
}
