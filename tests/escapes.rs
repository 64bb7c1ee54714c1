//! Escape probes inside the real sandbox (every layer stacked, as a user gets it): each probe
//! tries one forbidden thing and must fail with the errno of the layer that owns the rule.
//! `tests/kernel_layers.rs` proves each layer alone with and without it; here the whole stack.
//! Also: ordinary work still runs.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use stepproof::cli::probes::{Needs, seccomp_refused};
use support::*;

fn install_probe_binary(w: &World) {
    let dst = w.workspace.join("stepproof");
    fs::copy(STEPPROOF, &dst).unwrap();
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755)).unwrap();
    chown_tree(&dst, w.owner);
}

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
    // Every probe seccomp refuses by itself (the one table in `probes`), as the sandbox runs it.
    for probe in seccomp_refused() {
        let name = probe.name;
        match probe.needs {
            // Terminal probes need a controlling terminal: a pty made inside, in a new session.
            Needs::Terminal => script.push_str(&format!(
                "python3 -c 'import pty, subprocess, fcntl, termios; m, s = pty.openpty(); subprocess.run([\"./stepproof\", \"__probe\", \"{name}\"], stdin=s, start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))'\n"
            )),
            Needs::Sibling => script.push_str(&format!("./stepproof __probe {name}:$sibling\n")),
            _ => script.push_str(&format!("./stepproof __probe {name}\n")),
        }
    }
    // Write the init's memory; signal the init (outside the Landlock domain).
    script.push_str("./stepproof __probe proc_mem:1\n./stepproof __probe kill:1\nkill $sibling\n");
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
    let mut wanted: Vec<(&str, &str)> = seccomp_refused()
        .map(|p| {
            (
                p.name,
                errno_name(i64::from(p.seccomp_errno.unwrap_or_default())),
            )
        })
        .collect();
    // Then the read-only /proc mount; then Landlock's signal scope.
    wanted.extend([("proc_mem", "EROFS"), ("kill", "EPERM")]);
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
