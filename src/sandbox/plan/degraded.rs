//! The degraded strategy, for hosts that refuse user namespaces (some containers; Ubuntu's
//! `apparmor_restrict_unprivileged_userns`), where a profile allows it: Landlock and seccomp
//! only, over the host's own file system. It plans the same view as the namespace sandbox (the
//! core decides what is shown, hidden and protected); Landlock cannot carve an exception out of
//! a granted directory, so the directories on the way to a hidden path are granted entry by
//! entry; TCP is confined by Landlock port rules (there is no network namespace); and every
//! loss against the namespace sandbox is written down in the plan, the report and `explain`.

use crate::profile::{NetworkMode, Profile, WorkspaceMode};
use crate::sandbox::plan::agent_layer::AgentPlan;
use crate::sandbox::plan::landlock::{FsAccess, LandlockRule, TcpPolicy, grant_except, list_dir};
use crate::sandbox::plan::secrets::{Listings, hide_target};
use crate::sandbox::plan::{
    Access, DEVICE_NODES, HideReason, HostFacts, Identity, IdentityMode, Isolation,
    IsolationStrategy, PlanError, Realized, Scope, choose_identity, existing_protected,
    landlock_rule,
};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The Landlock rules as they are built, and what they lose.
pub(crate) struct LandlockView {
    rules: Vec<LandlockRule>,
    /// Directories to grant, kept until what must not be seen is known: each is then granted
    /// whole or, where a hidden path lies below it, entry by entry.
    grants: Vec<(PathBuf, FsAccess)>,
    losses: Vec<String>,
    /// The per-run directory the command gets as TMPDIR (the host's /tmp is not writable).
    scratch: Option<PathBuf>,
}

impl IsolationStrategy for LandlockView {
    const ISOLATION: Isolation = Isolation::LandlockSeccompOnly;
    /// Without a UTS namespace the host name is the host's.
    const HOSTNAME: &'static str = "";
    /// Nothing can be mounted where the agent could not change it: a profile with a hook runs
    /// here only with `[degraded] accept_removable_hook = true`, and then without the hook and
    /// the agent's layer (a loss, see [`Self::start`]).
    const PLANS_AGENT: bool = false;

    fn refuse(profile: &Profile) -> Result<(), PlanError> {
        if !profile.degraded.allow {
            return Err(PlanError::NoUserNamespaces);
        }
        if profile.hook.is_some() && !profile.degraded.accept_removable_hook {
            return Err(PlanError::HookNeedsNamespaces);
        }
        if profile.network.gateway.is_some() {
            return Err(PlanError::GatewayNeedsNamespaces);
        }
        if !profile.network.credentials.is_empty() {
            return Err(PlanError::CredentialsNeedNamespaces);
        }
        if profile.filesystem.workspace == WorkspaceMode::Overlay
            && !profile.degraded.read_only_workspace
        {
            return Err(PlanError::OverlayNeedsNamespaces);
        }
        Ok(())
    }

    /// Invoked as root there is no unprivileged user to become: uid 0, only where the profile
    /// allows the root fallback.
    fn identity(
        profile: &Profile,
        facts: &HostFacts,
        notes: &mut Vec<String>,
    ) -> Result<Identity, PlanError> {
        let mut identity = choose_identity(profile, facts, notes)?;
        if facts.uid == 0 {
            if !profile.process.allow_root_fallback {
                return Err(PlanError::RootWithoutUserNamespaces);
            }
            identity.mode = IdentityMode::RootFallback;
            identity.inside_uid = 0;
            identity.inside_gid = 0;
            identity.outside_uid = 0;
            identity.outside_gid = 0;
        }
        Ok(identity)
    }

    fn start(scope: &Scope<'_>, _agent: Option<&AgentPlan>) -> Self {
        let mut losses = vec![
            "no mount namespace: the host's file system is what Landlock grants, not a rebuilt view".to_string(),
            "no pid namespace: the host's processes are visible in /proc (Landlock's signal scope and seccomp's ptrace rule still stop signals and tracing)".to_string(),
            "no user namespace: the command runs with the caller's uid and groups, and the capability bounding set cannot be emptied without privileges (no_new_privs keeps execve from gaining anything)".to_string(),
            "`ls /` and `ls /dev` are refused (only the granted entries are reachable)".to_string(),
        ];
        if scope.profile.hook.is_some() {
            // A registration the agent could not remove needs the managed settings laid over
            // /etc; one it could remove would only look like the hook. Neither is made.
            losses.push("no hook: the profile's [hook] is not installed (Claude Code's managed settings cannot be laid over /etc without a mount namespace; accepted by [degraded] accept_removable_hook = true): no tool call is checked or recorded by the hook, only Landlock and seccomp apply; nor is the agent given its per-run config directory (CLAUDE_CONFIG_DIR is not set)".to_string());
        }
        LandlockView {
            rules: Vec::new(),
            grants: Vec::new(),
            losses,
            scratch: None,
        }
    }

    fn system_directory(&mut self, path: PathBuf) -> Result<(), PlanError> {
        if fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_dir()) {
            self.rules.push(landlock_rule(path, FsAccess::ReadExecute)?);
        }
        Ok(())
    }

    fn kernel_interfaces(&mut self) -> Result<(), PlanError> {
        self.rules
            .push(landlock_rule("/proc", FsAccess::ReadExecute)?);
        self.rules
            .push(landlock_rule("/sys", FsAccess::ReadExecute)?);
        Ok(())
    }

    /// The host's device nodes of the minimal /dev and its terminals, where they exist.
    fn devices(&mut self) -> Result<(), PlanError> {
        let devices = DEVICE_NODES
            .iter()
            .map(|n| format!("/dev/{n}"))
            .chain(["/dev/pts".into(), "/dev/ptmx".into()]);
        for device in devices {
            if Path::new(&device).exists() {
                self.rules.push(landlock_rule(device, FsAccess::Device)?);
            }
        }
        Ok(())
    }

    /// The per-run scratch directory, named here; the launch creates it and removes it after
    /// the run. Its rule comes last (see [`Self::finish`]).
    fn scratch_space(&mut self, scope: &Scope<'_>) -> Result<(), PlanError> {
        let scratch = scratch_dir(scope.facts);
        self.losses.push(format!(
            "no private /tmp: the host's /tmp is not writable; TMPDIR is the per-run directory {}",
            scratch.display()
        ));
        self.scratch = Some(scratch);
        Ok(())
    }

    /// Nothing of the home is granted; what the profile lists there is shown next. There is no
    /// private home to write in, as the namespace sandbox's tmpfs is.
    fn private_home(&mut self, _scope: &Scope<'_>) {
        self.losses.push("home = \"allowlist\": of the home, only the home_allow entries that exist are granted, read-only (besides the workspace and the profile's own paths); the home itself cannot be listed and nothing can be written in it (the namespace sandbox gives an empty private home the run may write: tools that keep caches or state in the home fail here)".to_string());
    }

    fn show(&mut self, path: &Path, access: Access) -> Result<(), PlanError> {
        let access = match access {
            Access::ReadOnly => FsAccess::ReadExecute,
            Access::ReadWrite => FsAccess::ReadWrite,
        };
        self.grants.push((path.to_path_buf(), access));
        Ok(())
    }

    /// No overlay without a mount namespace: a workspace that asks for one is read-only here
    /// (only where `[degraded] read_only_workspace = true`; [`Self::refuse`] stops the rest).
    fn workspace(&mut self, scope: &Scope<'_>) -> Result<WorkspaceMode, PlanError> {
        let path = scope.workspace;
        match scope.profile.filesystem.workspace {
            WorkspaceMode::Writable => {
                self.show(path, Access::ReadWrite)?;
                Ok(WorkspaceMode::Writable)
            }
            WorkspaceMode::ReadOnly => {
                self.show(path, Access::ReadOnly)?;
                Ok(WorkspaceMode::ReadOnly)
            }
            WorkspaceMode::Overlay => {
                self.losses.push("workspace = \"overlay\": no overlay without a mount namespace; the workspace is read-only instead (accepted by [degraded] read_only_workspace = true): builds and tests that write in it fail".to_string());
                self.show(path, Access::ReadOnly)?;
                Ok(WorkspaceMode::ReadOnly)
            }
        }
    }

    /// Every directory shown so far, granted around what must not be seen. A hidden `.env`
    /// that is a link is hidden where it leads too, as the mount over it would be.
    fn hide(&mut self, hidden: BTreeMap<PathBuf, HideReason>) -> Result<(), PlanError> {
        self.losses.push(named_sockets_loss(&hidden));
        let mut paths = Vec::with_capacity(hidden.len());
        for (path, reason) in hidden {
            if reason == HideReason::EnvFile
                && let Some(target) = hide_target(&path).filter(|t| *t != path)
            {
                paths.push(target);
            }
            paths.push(path);
        }
        for (root, access) in std::mem::take(&mut self.grants) {
            let expansion = grant_except(&root, access, &paths, &list_dir)
                .map_err(|source| PlanError::LandlockGrant { root, source })?;
            self.rules.extend(expansion.rules);
            self.losses.extend(expansion.losses);
        }
        Ok(())
    }

    /// Nothing can be made read-only or pinned inside a granted directory: the sweep judges
    /// after the run what the namespace sandbox would have kept from changing, and each such
    /// path is written down.
    fn protect(
        &mut self,
        scope: &Scope<'_>,
        protected_paths: &[PathBuf],
        repositories: &[PathBuf],
        listings: &mut Listings,
        _notes: &mut Vec<String>,
    ) {
        let writable_protected: Vec<String> = existing_protected(protected_paths, listings)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        if !writable_protected.is_empty() {
            self.losses.push(format!(
                "persistence paths inside the workspace cannot be made read-only (Landlock cannot take rights back below a writable grant): a change to one is found and moved to quarantine by the sweep after the run, not prevented: {}",
                writable_protected.join(", ")
            ));
        }
        let unpinned: Vec<String> = repositories
            .iter()
            .map(|repo| repo.join(".git"))
            .filter(|git| fs::symlink_metadata(git).is_ok_and(|m| m.is_dir() || m.is_file()))
            .map(|git| git.display().to_string())
            .collect();
        if !unpinned.is_empty() {
            self.losses.push(format!(
                "the repositories' .git cannot be pinned (nothing is a mount point): one replaced during the run (by a gitfile or a link) is found and moved to quarantine by the sweep after the run, not prevented: {}",
                unpinned.join(", ")
            ));
        }
        let writable_profile: Vec<String> = scope
            .profile
            .files
            .iter()
            .filter(|f| f.path.starts_with(scope.workspace))
            .map(|f| f.path.display().to_string())
            .collect();
        if !writable_profile.is_empty() {
            self.losses.push(format!(
                "the profile's own files inside the workspace cannot be made read-only (checked after the run instead): {}",
                writable_profile.join(", ")
            ));
        }
    }

    /// TCP through Landlock's port rules (there is no network namespace), and the scratch
    /// directory's rule.
    fn finish(mut self, scope: &Scope<'_>) -> Result<Realized, PlanError> {
        debug_assert!(
            self.grants.is_empty(),
            "hide() grants what show() asked for"
        );
        let profile = scope.profile;
        let tcp = match profile.network.mode {
            NetworkMode::None => {
                self.losses.push("network none: no network namespace; Landlock denies every TCP bind and connect, but UDP and unix sockets are not restricted".into());
                Some(TcpPolicy::default())
            }
            NetworkMode::Allowlist => {
                self.losses.push(format!(
                    "network allowlist: no network namespace; Landlock allows TCP connect only to port {} (the proxy, on any address) and no bind; UDP and unix sockets are not restricted",
                    profile.network.proxy_port
                ));
                if !profile.network.read_only.is_empty() {
                    self.losses.push(format!(
                        "network read-only hosts ({}): no private /run for the run's CA, so the proxy cannot read their requests and refuses them",
                        profile.network.read_only.join(", ")
                    ));
                }
                Some(TcpPolicy {
                    bind: Vec::new(),
                    connect: vec![profile.network.proxy_port],
                })
            }
            NetworkMode::Host => None,
        };
        if let Some(scratch) = &self.scratch {
            self.rules
                .push(landlock_rule(scratch.clone(), FsAccess::ReadWrite)?);
        }
        Ok(Realized {
            mounts: Vec::new(),
            landlock_rules: self.rules,
            tcp,
            losses: self.losses,
            scratch_dir: self.scratch,
        })
    }
}

/// What Landlock does not stop of a `connect()` to a unix socket by its path: before ABI 9
/// (Linux 7.1) it does not mediate it at all, so not granting a socket does not hide it the way
/// the namespace sandbox's stand-in (or its rebuilt view without the host's /run) does.
fn named_sockets_loss(hidden: &BTreeMap<PathBuf, HideReason>) -> String {
    let home_sockets: Vec<String> = hidden
        .iter()
        .filter(|(_, reason)| **reason == HideReason::UnixSocket)
        .map(|(path, _)| path.display().to_string())
        .collect();
    let home = if home_sockets.is_empty() {
        "none found".to_string()
    } else {
        home_sockets.join(", ")
    };
    format!(
        "named unix sockets: Landlock mediates connect() to a socket's path only from ABI 9 (Linux 7.1) on; with an older kernel the host's daemon sockets (/run, /var/run, /tmp: docker, D-Bus, ssh-agent, X11, …) stay reachable by path, and so do the home's sockets, though no rule grants them ({home})"
    )
}

/// The per-run scratch directory's name: in the supervisor's temporary directory, after the
/// run, with a random part, so that nobody can take the name in a shared /tmp beforehand (the
/// launch refuses a directory that already exists).
fn scratch_dir(facts: &HostFacts) -> PathBuf {
    use std::hash::{BuildHasher, RandomState};
    let run = facts.run_dir.file_name().unwrap_or_default();
    let random = RandomState::new().hash_one(run);
    std::env::temp_dir().join(format!(
        "stepproof-scratch-{}-{random:016x}",
        run.to_string_lossy()
    ))
}

#[cfg(test)]
mod tests {
    use crate::profile::{HomeMode, PathSpec, WorkspaceMode};
    use crate::sandbox::plan::landlock::{FsAccess, LandlockRule};
    use crate::sandbox::plan::tests::{degraded_profile, facts};
    use crate::sandbox::plan::{
        HideReason, MountOp, PlanError, SandboxPlan, build_degraded_plan, build_plan,
    };
    use std::fs;
    use std::path::{Path, PathBuf};

    /// The Landlock rules of `plan` that grant something at or above `path`.
    fn reaching<'p>(plan: &'p SandboxPlan, path: &Path) -> Vec<&'p LandlockRule> {
        plan.landlock
            .rules
            .iter()
            .filter(|r| path.starts_with(&r.path))
            .collect()
    }

    /// A home with a project in it (`~/src/proj`).
    fn home_with_project() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let ws = home.join("src/proj");
        fs::create_dir_all(&ws).unwrap();
        (dir, home, ws)
    }

    fn plant(path: &Path) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, "x").unwrap();
    }

    fn has_loss(plan: &SandboxPlan, words: &str) -> bool {
        plan.losses.iter().any(|l| l.contains(words))
    }

    #[test]
    fn an_allowlisted_home_grants_only_what_it_lists() {
        let (_dir, home, ws) = home_with_project();
        for path in [".local/bin/tool", "notes/todo", ".bashrc", ".cargo/env"] {
            plant(&home.join(path));
        }
        let mut profile = degraded_profile();
        profile.filesystem.home = HomeMode::Allowlist;
        profile.filesystem.home_allow = vec![
            PathSpec::parse("~/.local/bin").unwrap(),
            PathSpec::parse("~/.cargo/env").unwrap(),
            PathSpec::parse("~/absent").unwrap(),
        ];
        let plan = build_degraded_plan(&profile, &facts(&home, &ws, 1234)).unwrap();
        for shown in [".local/bin/tool", ".cargo/env"] {
            let rules = reaching(&plan, &home.join(shown));
            assert!(
                rules.iter().all(|r| r.access == FsAccess::ReadExecute) && !rules.is_empty(),
                "{shown}: {rules:?}"
            );
        }
        for unlisted in [".bashrc", "notes/todo", ".cargo", ".local", ""] {
            let rules = reaching(&plan, &home.join(unlisted));
            assert!(rules.is_empty(), "{unlisted:?} reached by {rules:?}");
        }
        assert_eq!(
            reaching(&plan, &ws.join("file")),
            [&LandlockRule {
                path: ws.clone(),
                access: FsAccess::ReadWrite
            }]
        );
        assert!(has_loss(&plan, "home = \"allowlist\""), "{:?}", plan.losses);
        assert!(plan.notes.iter().any(|n| n.contains("absent")));
    }

    #[test]
    fn names_that_look_like_secrets_and_env_files_get_no_rule() {
        let (_dir, home, ws) = home_with_project();
        let hidden = [
            (
                home.join(".config/deploy-token"),
                HideReason::CredentialName,
            ),
            (ws.join(".env"), HideReason::EnvFile),
            (ws.join("app/.env.local"), HideReason::EnvFile),
        ];
        for (path, _) in &hidden {
            plant(path);
        }
        plant(&ws.join(".env.example"));
        plant(&ws.join("app/main.rs"));
        // A linked `.env` is hidden where it leads, as a mount over it would be.
        plant(&ws.join("config/prod"));
        std::os::unix::fs::symlink(ws.join("config/prod"), ws.join(".env.production")).unwrap();
        let mut profile = degraded_profile();
        profile.filesystem.hide_env_files = true;
        let host = facts(&home, &ws, 1234);
        let full = build_plan(&profile, &host).unwrap();
        let degraded = build_degraded_plan(&profile, &host).unwrap();
        for (path, reason) in &hidden {
            let dst = path.clone();
            assert!(
                full.mounts.contains(&MountOp::HideFile {
                    dst,
                    reason: *reason
                }),
                "the namespace plan does not hide {path:?}"
            );
            let rules = reaching(&degraded, path);
            assert!(rules.is_empty(), "{path:?} reached by {rules:?}");
        }
        for path in [ws.join(".env.production"), ws.join("config/prod")] {
            let rules = reaching(&degraded, &path);
            assert!(rules.is_empty(), "{path:?} reached by {rules:?}");
        }
        assert_eq!(full.credential_names, degraded.credential_names);
        // The rest of the workspace stays writable, entry by entry, and the loss says so.
        for kept in [ws.join(".env.example"), ws.join("app/main.rs")] {
            let rules = reaching(&degraded, &kept);
            assert!(
                rules.iter().any(|r| r.access == FsAccess::ReadWrite),
                "{kept:?}: {rules:?}"
            );
        }
        assert!(
            has_loss(
                &degraded,
                &format!("{} (read-write): granted entry by entry", ws.display())
            ),
            "{:?}",
            degraded.losses
        );
        // The sweep walks the workspace whole, not each entry granted in it.
        assert_eq!(
            degraded.writable_host_paths(),
            [ws.clone(), degraded.scratch_dir.clone().unwrap()]
        );
    }

    /// No overlay without a mount namespace: refused, unless the profile accepts a read-only
    /// workspace instead — never a writable one.
    #[test]
    fn an_overlay_workspace_is_refused_or_read_only() {
        let (_dir, home, ws) = home_with_project();
        let host = facts(&home, &ws, 1234);
        let mut profile = degraded_profile();
        profile.filesystem.workspace = WorkspaceMode::Overlay;
        assert!(matches!(
            build_degraded_plan(&profile, &host),
            Err(PlanError::OverlayNeedsNamespaces)
        ));
        profile.degraded.read_only_workspace = true;
        let plan = build_degraded_plan(&profile, &host).unwrap();
        assert_eq!(plan.workspace_mode, WorkspaceMode::ReadOnly);
        assert!(
            !plan
                .landlock
                .rules
                .iter()
                .any(|r| r.path.starts_with(&ws) && r.access == FsAccess::ReadWrite),
            "{:?}",
            plan.landlock.rules
        );
        assert!(plan.landlock.rules.iter().any(|r| r.path == ws));
        assert!(
            has_loss(&plan, "workspace = \"overlay\""),
            "{:?}",
            plan.losses
        );
    }

    #[test]
    fn the_sweep_gets_the_repositories_and_the_losses_say_what_is_not_pinned() {
        let (_dir, home, ws) = home_with_project();
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        fs::create_dir_all(ws.join("sub/.git")).unwrap();
        fs::create_dir_all(ws.join(".vscode")).unwrap();
        let host = facts(&home, &ws, 1234);
        let full = build_plan(&degraded_profile(), &host).unwrap();
        let degraded = build_degraded_plan(&degraded_profile(), &host).unwrap();
        assert_eq!(full.repositories, [ws.clone(), ws.join("sub")]);
        assert_eq!(degraded.repositories, full.repositories);
        assert_eq!(degraded.protected_paths, full.protected_paths);
        assert!(degraded.protected_paths.contains(&ws.join(".vscode")));
        let pinned = degraded
            .losses
            .iter()
            .find(|l| l.contains(".git cannot be pinned"))
            .unwrap_or_else(|| panic!("{:?}", degraded.losses));
        assert!(pinned.contains(&ws.join("sub/.git").display().to_string()));
        let writable = degraded
            .losses
            .iter()
            .find(|l| l.starts_with("persistence paths"))
            .unwrap();
        assert!(writable.contains("the sweep"), "{writable}");
        assert!(writable.contains(&ws.join(".git/hooks").display().to_string()));
        assert!(writable.contains(&ws.join(".vscode").display().to_string()));
    }

    #[test]
    fn a_hooked_profile_runs_without_its_hook_and_says_so() {
        let (_dir, home, ws) = home_with_project();
        let mut profile = degraded_profile();
        profile.hook = crate::profile::Profile::builtin_default().unwrap().hook;
        profile.degraded.accept_removable_hook = true;
        let plan = build_degraded_plan(&profile, &facts(&home, &ws, 1234)).unwrap();
        assert!(plan.agent.is_none());
        assert!(
            plan.losses.iter().any(|l| l.starts_with("no hook:")),
            "{:?}",
            plan.losses
        );
        // Without a hook in the profile, nothing is lost on its account.
        let plain = build_degraded_plan(&degraded_profile(), &facts(&home, &ws, 1234)).unwrap();
        assert!(!plain.losses.iter().any(|l| l.starts_with("no hook:")));
    }

    #[test]
    fn home_sockets_follow_the_namespace_plans_rule() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        fs::create_dir_all(home.join(".run")).unwrap();
        let socket = home.join(".run/agent.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let mut profile = degraded_profile();
        // The workspace is the home: the namespace plan masks its sockets whatever the
        // profile says.
        profile.filesystem.mask_home_sockets = false;
        let host = facts(&home, &home, 1234);
        let full = build_plan(&profile, &host).unwrap();
        let degraded = build_degraded_plan(&profile, &host).unwrap();
        assert!(full.mounts.contains(&MountOp::HideFile {
            dst: socket.clone(),
            reason: HideReason::UnixSocket
        }));
        let rules = reaching(&degraded, &socket);
        assert!(rules.is_empty(), "reached by {rules:?}");
        // What Landlock cannot stop before ABI 9 is said, with the socket named.
        let line = degraded
            .losses
            .iter()
            .find(|l| l.starts_with("named unix sockets"))
            .unwrap_or_else(|| panic!("{:?}", degraded.losses));
        assert!(line.contains(&socket.display().to_string()), "{line}");
    }
}
