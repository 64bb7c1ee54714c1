//! Escape probes inside the real sandbox (every layer stacked, as a user gets it): each probe
//! tries one forbidden thing and must fail with the errno of the layer that owns the rule.
//! `tests/kernel_layers.rs` proves each layer alone with and without it; here the whole stack.
//! Also: ordinary work still runs.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use support::*;

fn install_probe_binary(w: &World) {
    let dst = w.workspace.join("stepproof");
    fs::copy(STEPPROOF, &dst).unwrap();
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(&dst, w.owner);
}

/// (probe, errno name wanted)
const SECCOMP_PROBES: &[(&str, &str)] = &[
    ("process_vm_readv", "EPERM"),
    ("mount", "EPERM"),
    ("unshare_user", "EPERM"),
    ("clone_newuser", "EPERM"),
    ("clone3", "ENOSYS"),
    ("io_uring", "EPERM"),
    ("tiocsti", "EPERM"),
    ("tiocsti_high", "EPERM"),
    ("tioclinux", "EPERM"),
    ("bpf", "EPERM"),
    ("keyctl", "EPERM"),
    ("add_key", "EPERM"),
    ("userfaultfd", "EPERM"),
    ("perf_event_open", "EPERM"),
    ("name_to_handle_at", "EPERM"),
    ("open_by_handle_at", "EPERM"),
    ("mptcp", "EPERM"),
    ("vsock", "EPERM"),
    ("raw_socket", "EPERM"),
    ("packet_socket", "EPERM"),
    ("inet_sock_packet", "EPERM"),
    ("netlink_uevent", "EPERM"),
    ("personality", "EPERM"),
    ("setuid_chmod", "EPERM"),
    ("setuid_fchmod", "EPERM"),
    ("setuid_fchmodat", "EPERM"),
    ("setuid_fchmodat2", "EPERM"),
    ("setuid_open", "EPERM"),
    ("setuid_openat", "EPERM"),
    ("setuid_creat", "EPERM"),
    ("setuid_mknodat", "EPERM"),
    ("setuid_tmpfile", "EPERM"),
    ("setuid_openat2", "ENOSYS"),
    ("setgid_open", "EPERM"),
];

fn errno_name(errno: i64) -> &'static str {
    match errno as i32 {
        libc::EPERM => "EPERM",
        libc::ENOSYS => "ENOSYS",
        libc::EACCES => "EACCES",
        libc::EROFS => "EROFS",
        libc::ENOENT => "ENOENT",
        libc::EINVAL => "EINVAL",
        _ => "other",
    }
}

both!(every_probe_is_stopped_with_the_right_errno, |w: &World| {
    install_probe_binary(w);
    let mut script = String::from("sleep 30 & sibling=$!\n");
    for (probe, _) in SECCOMP_PROBES {
        if probe.starts_with("tio") {
            // Terminal probes need a controlling terminal: a pty made inside, in a new session.
            script.push_str(&format!(
                "python3 -c 'import pty, subprocess, fcntl, termios; m, s = pty.openpty(); subprocess.run([\"./stepproof\", \"__probe\", \"{probe}\"], stdin=s, start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))'\n"
            ));
        } else {
            script.push_str(&format!("./stepproof __probe {probe}\n"));
        }
    }
    // ptrace a sibling; write the init's memory; signal the init (outside the Landlock domain).
    script.push_str("./stepproof __probe ptrace:$sibling\n./stepproof __probe proc_mem:1\n./stepproof __probe kill:1\nkill $sibling\n");
    let out = w.sh(&script);
    assert!(out.status.success(), "{}", describe(&out));
    let results: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad probe line {l:?}: {e}")))
        .collect();
    let get = |name: &str| {
        results
            .iter()
            .find(|r| r["name"].as_str().and_then(|n| n.split(':').next()) == Some(name))
            .unwrap_or_else(|| panic!("no result for {name}: {}", describe(&out)))
    };
    let mut wanted: Vec<(&str, &str)> = SECCOMP_PROBES.to_vec();
    // seccomp again; then the read-only /proc mount; then Landlock's signal scope.
    wanted.extend([
        ("ptrace", "EPERM"),
        ("proc_mem", "EROFS"),
        ("kill", "EPERM"),
    ]);
    for (name, errno) in wanted {
        let r = get(name);
        assert_eq!(r["escaped"], false, "{name} ESCAPED: {r}");
        let got = r["errno"].as_i64().map(errno_name);
        assert_eq!(got, Some(errno), "{name}: wanted {errno}, got {r}");
    }
});

both!(ordinary_work_still_runs, |w: &World| {
    let script = r#"set -e
git init -q repo && cd repo
git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m first
echo 'int main(void){return 0;}' > m.c && printf 'm: m.c\n\tcc -o m m.c\n' > Makefile && make -s && ./m
python3 - <<'PY'
import http.server, threading, urllib.request
srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
print("http", urllib.request.urlopen(f"http://127.0.0.1:{srv.server_port}/").status)
srv.shutdown()
PY
echo all-ok
"#;
    let out = w.sh(script);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("http 200") && text.contains("all-ok"),
        "{}",
        describe(&out)
    );
});

#[test]
fn cargo_builds_a_small_crate_as_root() {
    let Some(w) = World::new(Who::Root) else {
        return;
    };
    let rustup = std::path::Path::new("/root/.rustup");
    let cargo = std::path::Path::new("/root/.cargo/bin/cargo");
    if !rustup.is_dir() || !cargo.exists() {
        skip_or_fail("rustup's toolchain under /root is not installed");
        return;
    }
    let profile = w.base.join("cargo.toml");
    fs::write(&profile, "extends = \"default\"\n[filesystem]\nread_only = [\"/root/.rustup\", \"/root/.cargo/bin\"]\n").unwrap();
    let out = w
        .command(&["--profile", profile.to_str().unwrap()], &["/bin/sh", "-c", "cargo new -q --vcs none hello && cd hello && cargo build -q && ./target/debug/hello"])
        .env("PATH", "/root/.cargo/bin:/usr/bin:/bin")
        .env("RUSTUP_HOME", "/root/.rustup")
        .env("CARGO_HOME", w.workspace.join(".cargo-home"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Hello, world!"),
        "{}",
        describe(&out)
    );
}
