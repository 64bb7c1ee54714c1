//! How StepProof reaches a user: the crates as `cargo package` would publish them (each carries
//! the profiles it embeds), and the release tarball and Debian package built by
//! `scripts/build-tarball` and `scripts/build-deb` — from the binaries of this very build,
//! installed into a scratch root and used there.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use support::*;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The files `cargo package --list` would put in PACKAGE's crate (offline: no registry).
fn package_list(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "package",
            "--list",
            "--offline",
            "--allow-dirty",
            "-p",
            package,
        ])
        .current_dir(ROOT)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo package -p {package}: {}",
        describe(&out)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `cargo install stepproof` once published: each crate carries the profiles it compiles in
/// (the hook's `hooks/profiles` is a link to `profiles/`, which cargo follows).
#[test]
fn both_crates_package_with_the_profiles_they_embed() {
    for package in ["stepproof-hook", "stepproof"] {
        let files = package_list(package);
        for name in ["default", "ci", "strict"] {
            let profile = format!("profiles/{name}.toml");
            assert!(
                files.contains(&profile),
                "{package}'s package lacks {profile}: {files:?}"
            );
        }
    }
    // The root crate does not carry the hook crate's sources: it depends on it by version.
    let root = package_list("stepproof");
    assert!(!root.iter().any(|f| f.starts_with("hooks/")), "{root:?}");
    let manifest = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("stepproof-hook = { version = "),
        "the path dependency needs a version to publish"
    );
}

/// What `scripts/build-tarball` and `scripts/build-deb` made of this build's debug binaries,
/// once per test binary (the tarball of debug binaries takes a few seconds to pack).
struct Built {
    /// The binaries packed: copies of this build's without their debug info.
    bin_dir: PathBuf,
    tarball: PathBuf,
    deb: PathBuf,
}

/// The three programs as this build made them. `stepproof-run` and `stepproof` are this test
/// binary's own (`CARGO_BIN_EXE_…`); the hook is the workspace member's binary beside them,
/// which `cargo test --workspace` (scripts/test) builds in the same run.
fn this_builds_binaries() -> [(&'static str, PathBuf); 3] {
    let hook = Path::new(RUN).with_file_name("stepproof-hook");
    assert!(
        hook.is_file(),
        "{} is missing: run the tests with `cargo test --workspace` (scripts/test does)",
        hook.display()
    );
    [
        ("stepproof-run", PathBuf::from(RUN)),
        ("stepproof", PathBuf::from(STEPPROOF)),
        ("stepproof-hook", hook),
    ]
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("packaging");
        let _ = fs::remove_dir_all(&work);
        let bin_dir = work.join("bin");
        fs::create_dir_all(&bin_dir).unwrap();
        for (name, path) in this_builds_binaries() {
            // Without their debug info (300 MB that would take minutes to compress); the
            // build id stays, and names the build each copy came from.
            let copy = bin_dir.join(name);
            let out = Command::new("objcopy")
                .arg("--strip-debug")
                .arg(&path)
                .arg(&copy)
                .output()
                .unwrap();
            assert!(out.status.success(), "objcopy: {}", describe(&out));
            assert_eq!(build_id(&copy), build_id(&path));
        }
        let dist = work.join("dist");
        let tarball = script("build-tarball", &[bin_dir.as_os_str()], &dist, "xz");
        // gzip: xz takes over a minute here on debug binaries (the release's .deb is xz).
        let deb = script("build-deb", &[tarball.as_os_str()], &dist, "gzip");
        Built {
            bin_dir,
            tarball,
            deb,
        }
    })
}

/// Runs scripts/NAME with ARGS, OUT_DIR and DEB_COMPRESSION; returns the path it prints.
fn script(name: &str, args: &[&std::ffi::OsStr], out_dir: &Path, compression: &str) -> PathBuf {
    let out = Command::new(Path::new(ROOT).join("scripts").join(name))
        .args(args)
        .env("OUT_DIR", out_dir)
        .env("DEB_COMPRESSION", compression)
        .output()
        .unwrap();
    assert!(out.status.success(), "scripts/{name}: {}", describe(&out));
    let printed = String::from_utf8(out.stdout).unwrap();
    let path = PathBuf::from(printed.trim());
    assert!(path.is_file(), "scripts/{name} printed {printed:?}");
    path
}

/// The GNU build id the linker wrote into an ELF file (`readelf -n`): it survives stripping,
/// so a packed binary's id names the build it came from.
fn build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "readelf -n: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("{} has no build id", path.display()))
        .to_string()
}

fn sha256(path: &Path) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(fs::read(path).unwrap()))
}

fn arch() -> &'static str {
    std::env::consts::ARCH
}

/// The tarball the release workflow publishes, from this build: named for the version and the
/// architecture, holding exactly this build's binaries, the profiles as compiled in, the man
/// pages (gzipped), the completions for bash, zsh and fish, README and LICENSE.
#[test]
fn the_tarball_holds_this_builds_programs_pages_completions_and_profiles() {
    let built = built();
    let version = env!("CARGO_PKG_VERSION");
    let name = format!("stepproof-{version}-{}-linux", arch());
    assert_eq!(
        built.tarball.file_name().unwrap().to_str().unwrap(),
        format!("{name}.tar.gz")
    );
    let root = tempfile::tempdir().unwrap();
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(&built.tarball)
        .arg("-C")
        .arg(root.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let tree = root.path().join(&name);
    for (program, path) in this_builds_binaries() {
        let packed = tree.join("bin").join(program);
        assert_eq!(sha256(&packed), sha256(&built.bin_dir.join(program)));
        assert_eq!(
            build_id(&packed),
            build_id(&path),
            "bin/{program} is not this build's"
        );
    }
    for profile in ["default", "ci", "strict"] {
        let file = format!("profiles/{profile}.toml");
        assert_eq!(
            fs::read(tree.join("share/stepproof").join(&file)).unwrap(),
            fs::read(Path::new(ROOT).join(&file)).unwrap(),
            "{file}"
        );
    }
    for file in [
        "README.md",
        "LICENSE",
        "share/man/man1/stepproof-run.1.gz",
        "share/man/man1/stepproof.1.gz",
        "share/man/man1/stepproof-doctor.1.gz",
        "share/man/man1/stepproof-audit-verify.1.gz",
        "share/bash-completion/completions/stepproof-run",
        "share/bash-completion/completions/stepproof",
        "share/zsh/vendor-completions/_stepproof-run",
        "share/zsh/vendor-completions/_stepproof",
        "share/fish/vendor_completions.d/stepproof-run.fish",
        "share/fish/vendor_completions.d/stepproof.fish",
        "share/doc/stepproof/README.md",
        // The README's links lead into docs/, shipped beside it.
        "docs/exit-codes.md",
        "share/doc/stepproof/docs/profiles.md",
    ] {
        assert!(tree.join(file).is_file(), "the tarball lacks {file}");
    }
    // Internal commands have no page.
    let pages: Vec<String> = fs::read_dir(tree.join("share/man/man1"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !pages
            .iter()
            .any(|p| p.contains("__") || p.contains("generate")),
        "{pages:?}"
    );
}

/// The Debian package, from the tarball above: its control file, then installed into a scratch
/// root (by dpkg, as root; else unpacked) and used from there, then removed — the binaries are this
/// build's, `stepproof doctor` runs, `stepproof-run -- true` runs with the hook from beside it
/// and a new user's empty home, the man page renders, the bash completion loads.
#[test]
fn the_deb_installs_into_a_scratch_root_and_works_from_there() {
    let built = built();
    let version = env!("CARGO_PKG_VERSION");
    let deb_arch = match arch() {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => panic!("no Debian architecture for {other}"),
    };
    assert_eq!(
        built.deb.file_name().unwrap().to_str().unwrap(),
        format!("stepproof_{version}_{deb_arch}.deb")
    );
    let info = Command::new("dpkg-deb")
        .arg("--field")
        .arg(&built.deb)
        .output()
        .unwrap();
    assert!(info.status.success(), "{}", describe(&info));
    let control = String::from_utf8_lossy(&info.stdout).into_owned();
    for field in [
        "Package: stepproof\n".to_string(),
        format!("Version: {version}\n"),
        format!("Architecture: {deb_arch}\n"),
    ] {
        assert!(control.contains(&field), "{control}");
    }
    // Debug binaries are linked dynamically: the package then needs the C library they were
    // built against (the release's static binaries need none: release_binaries_pack_…).
    let dynamic = fs::read(RUN)
        .unwrap()
        .windows(b"ld-linux".len())
        .any(|w| w == b"ld-linux");
    assert_eq!(
        control.contains("Depends: libc6 (>= "),
        dynamic,
        "{control}"
    );

    // As root (CI): installed by dpkg itself into a scratch root with a database of its own,
    // and removed at the end; otherwise unpacked (dpkg needs root to install anywhere).
    let root = tempfile::tempdir().unwrap();
    let installed_by_dpkg = nix::unistd::geteuid().is_root();
    let out = if installed_by_dpkg {
        let db = root.path().join("var/lib/dpkg");
        fs::create_dir_all(db.join("updates")).unwrap();
        fs::create_dir_all(db.join("info")).unwrap();
        fs::write(db.join("status"), "").unwrap();
        Command::new("dpkg")
            .arg(format!("--root={}", root.path().display()))
            // The scratch root's database has no libc6, which a dynamically linked debug
            // build's package depends on (the host's C library runs it).
            .args([
                "--force-script-chrootless",
                "--force-not-root",
                "--force-depends",
                "-i",
            ])
            .arg(&built.deb)
            .output()
            .unwrap()
    } else {
        Command::new("dpkg-deb")
            .arg("-x")
            .arg(&built.deb)
            .arg(root.path())
            .output()
            .unwrap()
    };
    assert!(out.status.success(), "{}", describe(&out));
    let usr = root.path().join("usr");
    for (program, path) in this_builds_binaries() {
        let installed = usr.join("bin").join(program);
        assert_eq!(sha256(&installed), sha256(&built.bin_dir.join(program)));
        assert_eq!(
            build_id(&installed),
            build_id(&path),
            "{} is not this build's {program}",
            installed.display()
        );
    }
    for file in [
        "share/stepproof/profiles/default.toml",
        "share/man/man1/stepproof-run.1.gz",
        "share/bash-completion/completions/stepproof-run",
        "share/zsh/vendor-completions/_stepproof-run",
        "share/fish/vendor_completions.d/stepproof-run.fish",
        "share/doc/stepproof/copyright",
    ] {
        assert!(usr.join(file).is_file(), "the package lacks /usr/{file}");
    }

    let stepproof = usr.join("bin/stepproof");
    let out = Command::new(&stepproof).arg("--version").output().unwrap();
    // The version with the commit it was built from.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.starts_with(&format!("stepproof {version} (commit "))
            && said.ends_with(")\n")
            && !said.contains("(commit unknown)"),
        "{said}"
    );

    // The man page renders (man, else groff; else at least its roff structure).
    let page = usr.join("share/man/man1/stepproof-run.1.gz");
    let rendered = render_man_page(&page);
    assert!(
        rendered.contains("stepproof-run") && rendered.contains("fail-on-deny"),
        "{rendered}"
    );

    // bash-completion loads `completions/stepproof-run` on first use: sourced, it registers.
    let completion = usr.join("share/bash-completion/completions/stepproof-run");
    let out = Command::new("bash")
        .arg("-c")
        .arg("source \"$1\" && complete -p stepproof-run")
        .arg("bash")
        .arg(&completion)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).ends_with(" stepproof-run\n"),
        "{}",
        describe(&out)
    );
    for (shell, file) in [
        ("zsh", "share/zsh/vendor-completions/_stepproof-run"),
        ("fish", "share/fish/vendor_completions.d/stepproof-run.fish"),
    ] {
        // Parsed by the shell where it is installed (neither is on the test machines).
        if let Ok(out) = Command::new(shell).arg("-n").arg(usr.join(file)).output() {
            assert!(
                out.status.success(),
                "{shell} -n {file}: {}",
                describe(&out)
            );
        }
    }

    // A new user: an empty home, a project directory, the package's programs by full path.
    let doctor = Command::new(&stepproof).arg("doctor").output().unwrap();
    if !sandbox_available() {
        return;
    }
    assert!(doctor.status.success(), "{}", describe(&doctor));
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let out = Command::new(usr.join("bin/stepproof-run"))
        .args(["--", "true"])
        .current_dir(project.path())
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8")
        .envs(field_ledger())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "stepproof-run -- true: {}",
        describe(&out)
    );
    if installed_by_dpkg {
        let out = Command::new("dpkg")
            .arg(format!("--root={}", root.path().display()))
            .args([
                "--force-script-chrootless",
                "--force-not-root",
                "-r",
                "stepproof",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        for gone in ["bin/stepproof-run", "bin/stepproof", "bin/stepproof-hook"] {
            assert!(
                !usr.join(gone).exists(),
                "/usr/{gone} is left after dpkg -r"
            );
        }
    }
}

/// The man page as a reader sees it: `man -l` (no pager), else groff; where neither exists, the
/// roff text itself, checked for a title and a NAME section.
fn render_man_page(page: &Path) -> String {
    if let Ok(out) = Command::new("man")
        .arg("-l")
        .arg(page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
    {
        assert!(out.status.success(), "man -l: {}", describe(&out));
        return String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let roff = {
        use std::io::Read as _;
        let out = Command::new("gzip").arg("-dc").arg(page).output().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        let mut text = String::new();
        out.stdout.as_slice().read_to_string(&mut text).unwrap();
        text
    };
    if let Ok(mut child) = Command::new("groff")
        .args(["-man", "-Tutf8"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(roff.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "groff: {}", describe(&out));
        return String::from_utf8_lossy(&out.stdout).into_owned();
    }
    assert!(
        roff.contains(".TH stepproof-run 1") && roff.contains(".SH NAME"),
        "{roff}"
    );
    roff.replace("\\-", "-")
}

/// The release binaries (scripts/build-release: lto, one codegen unit, static) pack as the
/// release workflow packs them: static, so the package depends on nothing. A release build
/// takes minutes, so locally this runs only with STEPPROOF_RELEASE_TEST=1 (the tests above pack
/// the debug binaries with the same scripts); in CI it always runs: the x86_64 tarball is built
/// there exactly as the workflow builds it.
#[test]
fn release_binaries_pack_as_the_workflow_packs_them() {
    let ci = std::env::var("CI").as_deref() == Ok("true");
    if !ci && std::env::var("STEPPROOF_RELEASE_TEST").as_deref() != Ok("1") {
        eprintln!(
            "skipped: a release build takes minutes; set STEPPROOF_RELEASE_TEST=1 (CI always runs it)"
        );
        return;
    }
    let out = Command::new(Path::new(ROOT).join("scripts/build-release"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/build-release: {}",
        describe(&out)
    );
    let bin_dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    for program in ["stepproof-run", "stepproof", "stepproof-hook"] {
        let readelf = Command::new("readelf")
            .arg("-l")
            .arg(bin_dir.join(program))
            .output()
            .unwrap();
        assert!(
            !String::from_utf8_lossy(&readelf.stdout).contains("program interpreter"),
            "{program} is dynamically linked"
        );
    }
    let dist = Path::new(env!("CARGO_TARGET_TMPDIR")).join("packaging-release");
    let _ = fs::remove_dir_all(&dist);
    let tarball = script("build-tarball", &[bin_dir.as_os_str()], &dist, "xz");
    let deb = script("build-deb", &[tarball.as_os_str()], &dist, "xz");
    let info = Command::new("dpkg-deb")
        .arg("--field")
        .arg(&deb)
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&info.stdout);
    assert!(!control.contains("Depends:"), "{control}");
    let root = tempfile::tempdir().unwrap();
    let out = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(root.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    for program in ["stepproof-run", "stepproof", "stepproof-hook"] {
        assert_eq!(
            sha256(&root.path().join("usr/bin").join(program)),
            sha256(&bin_dir.join(program)),
            "{program}"
        );
    }
    if sandbox_available() {
        let project = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(root.path().join("usr/bin/stepproof-run"))
            .args(["--", "true"])
            .current_dir(project.path())
            .env_clear()
            .env("HOME", home.path())
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
    }
}

/// The packaging scripts pass shellcheck (the workflow's run steps go through it by way of
/// actionlint: tests/github_action.rs).
#[test]
fn the_packaging_scripts_pass_shellcheck() {
    let scripts: Vec<PathBuf> = ["build-release", "build-tarball", "build-deb", "install"]
        .iter()
        .map(|name| Path::new(ROOT).join("scripts").join(name))
        .collect();
    match Command::new("shellcheck").args(&scripts).output() {
        Ok(out) => assert!(out.status.success(), "shellcheck: {}", describe(&out)),
        Err(_) => skip_or_fail("shellcheck is not installed (scripts/test installs it)"),
    }
}
