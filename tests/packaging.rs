//! How StepProof reaches a user: the crates as `cargo package` would publish them (each carries
//! the profiles it embeds), and the release tarball and Debian package built by
//! `scripts/build-tarball` and `scripts/build-deb` — from the binaries of this very build,
//! installed into a scratch root and used there.

mod support;

use std::path::Path;
use std::process::Command;
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
