//! The build caches a run writes: StepProof's own, per workspace, outside the sandbox, and never
//! the host's (a writable host cache is a way back out: cargo compiles the registry sources it
//! extracted without checking them again, Go reuses its build cache as it finds it). Bound
//! read-write at [`CACHES_DIR`]; the variables below point each toolchain there.

use crate::profile::Profile;
use crate::sandbox::plan::HostFacts;
use std::path::{Path, PathBuf};

/// Where the caches are inside (on the private /run).
pub const CACHES_DIR: &str = "/run/stepproof-caches";

/// Each cache: its directory under [`CACHES_DIR`] and the variable that points the tool there.
/// `CARGO_HOME` moves cargo's registry, git checkouts and `cargo install` there; cargo still
/// reads the `.cargo/config.toml` of the workspace and its ancestors (`~/.cargo/config.toml`
/// when the workspace is in the home).
pub const CACHES: &[(&str, &str)] = &[
    ("cargo", "CARGO_HOME"),
    ("npm", "npm_config_cache"),
    ("pip", "PIP_CACHE_DIR"),
    ("uv", "UV_CACHE_DIR"),
    ("go-mod", "GOMODCACHE"),
    ("go-build", "GOCACHE"),
];

/// Below a workspace's caches directory, what the sandbox sees.
pub const TREE: &str = "tree";

/// The caches of a run: where they are on the host, and whether they outlive it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PlannedCaches {
    /// The directory bound at [`CACHES_DIR`]: a kept one is `<id>/tree`, its markers (the
    /// workspace, when it was last used, the lock) beside it in `<id>`, out of the sandbox's
    /// reach.
    pub host: PathBuf,
    /// Kept for the workspace's next run (`~/.local/state/stepproof/caches/<id>`, pruned with
    /// the workspace's other state); else the run's own, removed when it ends.
    pub kept: bool,
}

/// Where StepProof keeps a workspace's caches between runs: `~/.local/state/stepproof/caches/<id>`,
/// `<id>` the first 32 hex digits of the SHA-256 of the workspace's canonical path and the
/// invoking uid. Per caller, not only per workspace: a root run given another user's home
/// (`sudo -E`) writes its caches as StepProof's root-mode user, whose files that user's own runs
/// could neither write nor remove; with its own directory neither run sees the other's.
pub fn caches_dir(home: &Path, workspace: &Path, caller_uid: u32) -> PathBuf {
    use sha2::Digest;
    use std::os::unix::ffi::OsStrExt;
    let mut digest = sha2::Sha256::new();
    digest.update(workspace.as_os_str().as_bytes());
    digest.update(format!("\0uid={caller_uid}").as_bytes());
    home.join(crate::profile::STATE_DIR)
        .join("caches")
        .join(&hex::encode(digest.finalize())[..32])
}

/// The run's caches: the workspace's when the profile keeps state between runs
/// (`claude.keep_sessions`) and the run does not start from nothing ([`super::run_kind::Fresh`]),
/// else the run's own.
pub fn plan_caches(profile: &Profile, facts: &HostFacts) -> PlannedCaches {
    if profile.claude.keep_sessions && !facts.fresh.caches {
        PlannedCaches {
            host: caches_dir(&facts.home, &facts.workspace, facts.uid).join(TREE),
            kept: true,
        }
    } else {
        per_run(&facts.run_dir)
    }
}

/// Caches that start empty and go with the run (unattended runs, the self-test).
pub fn per_run(run_dir: &Path) -> PlannedCaches {
    PlannedCaches {
        host: run_dir.join("caches"),
        kept: false,
    }
}

/// The variables that point each toolchain at its cache inside.
pub fn cache_env() -> Vec<(String, String)> {
    CACHES
        .iter()
        .map(|(dir, var)| ((*var).to_owned(), format!("{CACHES_DIR}/{dir}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_are_named_by_workspace_and_caller() {
        let home = Path::new("/home/u");
        let a = caches_dir(home, Path::new("/home/u/a"), 1000);
        assert_eq!(
            a.parent().unwrap(),
            home.join(".local/state/stepproof/caches")
        );
        let name = a.file_name().unwrap().to_str().unwrap();
        assert!(name.len() == 32 && name.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a, caches_dir(home, Path::new("/home/u/a"), 1000));
        assert_ne!(a, caches_dir(home, Path::new("/home/u/b"), 1000));
        // root with this home (sudo -E) has caches of its own.
        assert_ne!(a, caches_dir(home, Path::new("/home/u/a"), 0));
        assert_eq!(
            per_run(Path::new("/r/1-2")),
            PlannedCaches {
                host: "/r/1-2/caches".into(),
                kept: false
            }
        );
        let env = cache_env();
        assert!(env.contains(&("GOCACHE".into(), "/run/stepproof-caches/go-build".into())));
        assert!(env.contains(&("CARGO_HOME".into(), "/run/stepproof-caches/cargo".into())));
    }
}
