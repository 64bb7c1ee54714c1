//! The namespace strategy: the view rebuilt as mounts in a new mount namespace, in order, with
//! Landlock mirroring it at mount granularity. What is hidden is covered by an empty stand-in,
//! what is protected is bound read-only onto itself, and the rebuilt root ends read-only.

use crate::profile::{Profile, WorkspaceMode};
use crate::sandbox::plan::agent_layer::{AgentPlan, LOGIN_FILE_STAND_IN, LOGIN_FILES};
use crate::sandbox::plan::landlock::{FsAccess, LandlockRule};
use crate::sandbox::plan::secrets::Listings;
use crate::sandbox::plan::{
    Access, DEVICE_NODES, HideReason, HostFacts, Identity, IdentityMode, Isolation,
    IsolationStrategy, MountOp, PlanError, Realized, SANDBOX_USER_NAME, Scope, existing_protected,
    landlock_rule, writable_binds,
};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The mount list as it is built.
pub(crate) struct MountView {
    mounts: Vec<MountOp>,
    /// Files StepProof lays over the host's /etc (never writing the host's): the sandbox
    /// account of a root invocation, the mount point of the agent's /etc/claude-code.
    etc_files: Vec<(PathBuf, String)>,
    /// The agent's own mounts (the hook, its socket, its state), placed under the private /run.
    agent_mounts: Vec<MountOp>,
    /// Invoked as root, everything bound from the caller's side (not the system directories)
    /// goes through an idmapped mount: root's files there appear as the sandbox user's, and the
    /// init, already that user, needs no access to root's private directories to mount them.
    idmapped: bool,
    /// Claude Code runs inside: a private home gets read-only stand-ins for the login shell's
    /// startup files (its Bash tool runs commands in a login shell).
    login_stand_ins: bool,
    /// The workspace is shown writable (its repositories' `.git` then get a layer each).
    workspace_writable: bool,
}

impl IsolationStrategy for MountView {
    const ISOLATION: Isolation = Isolation::Namespaces;
    const HOSTNAME: &'static str = "stepproof";
    const PLANS_AGENT: bool = true;

    fn start(scope: &Scope<'_>, agent: Option<&AgentPlan>) -> Self {
        let mut etc_files = Vec::new();
        if scope.identity.mode == IdentityMode::RootRemapped {
            etc_files.extend(sandbox_account_files(
                scope.facts,
                scope.identity,
                scope.home,
            ));
        }
        if agent.is_some() {
            // The mount point of the agent's own /etc/claude-code (the read-only /etc usually
            // has none); the generated tmpfs covers it.
            etc_files.push((PathBuf::from("claude-code/.mount-point"), String::new()));
        }
        MountView {
            mounts: Vec::new(),
            etc_files,
            agent_mounts: agent.map(|a| a.mounts.clone()).unwrap_or_default(),
            idmapped: scope.identity.mode == IdentityMode::RootRemapped,
            login_stand_ins: agent.is_some(),
            workspace_writable: false,
        }
    }

    /// A host symlink (merged /usr) is recreated as a symlink; /etc gets StepProof's files laid
    /// over it when there are any.
    fn system_directory(&mut self, path: PathBuf) -> Result<(), PlanError> {
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(&path).map_err(|source| PlanError::Io {
                    what: "reading the link",
                    path: path.clone(),
                    source,
                })?;
                self.mounts.push(MountOp::Symlink { target, dst: path });
            }
            Ok(_) if path == Path::new("/etc") && !self.etc_files.is_empty() => {
                self.mounts.push(MountOp::Overlay {
                    src: path.clone(),
                    dst: path,
                    files: std::mem::take(&mut self.etc_files),
                })
            }
            Ok(_) => self.mounts.push(MountOp::Bind {
                src: path.clone(),
                dst: path,
                access: Access::ReadOnly,
            }),
            Err(_) => {}
        }
        Ok(())
    }

    /// A fresh read-only /proc for the new pid namespace, read-only /sys.
    fn kernel_interfaces(&mut self) -> Result<(), PlanError> {
        self.mounts.push(MountOp::Proc {
            dst: "/proc".into(),
        });
        self.mounts.push(MountOp::Bind {
            src: "/sys".into(),
            dst: "/sys".into(),
            access: Access::ReadOnly,
        });
        Ok(())
    }

    fn devices(&mut self) -> Result<(), PlanError> {
        push_minimal_dev(&mut self.mounts);
        Ok(())
    }

    /// Private /tmp and /run (no host daemon sockets there), the agent's mounts under /run.
    fn scratch_space(&mut self, scope: &Scope<'_>) -> Result<(), PlanError> {
        self.mounts.push(MountOp::Tmpfs {
            dst: "/tmp".into(),
            mode: 0o1777,
            size_mib: Some(scope.profile.filesystem.tmp_size_mib),
        });
        self.mounts.push(MountOp::Tmpfs {
            dst: "/run".into(),
            mode: 0o755,
            size_mib: Some(16),
        });
        self.mounts.append(&mut self.agent_mounts);
        if crate::sandbox::plan::credentials::needs_trust(scope.profile) {
            // The run's CA (public) and the bundle that trusts it, made by the supervisor at
            // launch; its key never leaves the supervisor.
            self.mounts.push(MountOp::TrustFiles {
                dst: crate::sandbox::plan::credentials::TRUST_DIR.into(),
            });
        }
        // The build caches, StepProof's own (the launch creates the directory).
        self.mounts.push(MountOp::FromSupervisor {
            src: crate::sandbox::plan::caches::plan_caches(scope.profile, scope.facts).host,
            dst: crate::sandbox::plan::caches::CACHES_DIR.into(),
            access: Access::ReadWrite,
        });
        self.mounts.push(MountOp::Symlink {
            target: "../run".into(),
            dst: "/var/run".into(),
        });
        self.mounts.push(MountOp::Symlink {
            target: "../tmp".into(),
            dst: "/var/tmp".into(),
        });
        Ok(())
    }

    /// An empty tmpfs over the home; what the profile lists is bound into it next. With Claude
    /// Code inside, the login shell's startup files are read-only stand-ins: its Bash tool runs
    /// every command in a login shell (it has no snapshot: see `agent_layer::SOURCED_DIRS`), and
    /// a file the agent wrote there would run first, unseen by the hook.
    fn private_home(&mut self, scope: &Scope<'_>) {
        self.mounts.push(MountOp::Tmpfs {
            dst: scope.home.to_path_buf(),
            mode: 0o700,
            size_mib: Some(scope.profile.filesystem.tmp_size_mib),
        });
        if self.login_stand_ins {
            for name in LOGIN_FILES {
                self.mounts.push(MountOp::File {
                    dst: scope.home.join(name),
                    contents: LOGIN_FILE_STAND_IN.as_bytes().to_vec(),
                });
            }
        }
    }

    fn show(&mut self, path: &Path, access: Access) -> Result<(), PlanError> {
        let (src, dst) = (path.to_path_buf(), path.to_path_buf());
        self.mounts.push(if self.idmapped {
            MountOp::IdmappedBind { src, dst, access }
        } else {
            MountOp::Bind { src, dst, access }
        });
        Ok(())
    }

    /// Writable, read-only, or read-only beneath an overlay whose upper layer is a private
    /// tmpfs: writes succeed and stay in the sandbox's mount namespace, which ends with the run.
    fn workspace(&mut self, scope: &Scope<'_>) -> Result<WorkspaceMode, PlanError> {
        let path = scope.workspace;
        let mode = scope.profile.filesystem.workspace;
        match mode {
            WorkspaceMode::Writable => {
                self.show(path, Access::ReadWrite)?;
                self.workspace_writable = true;
            }
            WorkspaceMode::ReadOnly => self.show(path, Access::ReadOnly)?,
            WorkspaceMode::Overlay => {
                self.show(path, Access::ReadOnly)?;
                self.mounts.push(MountOp::ScratchOverlay {
                    dst: path.to_path_buf(),
                    size_mib: scope.profile.filesystem.tmp_size_mib,
                });
            }
        }
        Ok(mode)
    }

    /// An empty, mode 000 stand-in over each path, bound after what shows it.
    fn hide(&mut self, hidden: BTreeMap<PathBuf, HideReason>) -> Result<(), PlanError> {
        for (path, reason) in hidden {
            let is_dir = reason == HideReason::StepProofState
                || fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false);
            self.mounts.push(if is_dir {
                MountOp::HideDir { dst: path, reason }
            } else {
                MountOp::HideFile { dst: path, reason }
            });
        }
        Ok(())
    }

    fn protect(
        &mut self,
        scope: &Scope<'_>,
        protected_paths: &[PathBuf],
        repositories: &[PathBuf],
        listings: &mut Listings,
        notes: &mut Vec<String>,
    ) {
        if let Some(git_dir) = git_dir_outside(scope.workspace) {
            notes.push(format!(
                "WARNING: the workspace's .git names {}, outside the workspace (a linked worktree or a submodule checkout): it is not in the sandbox's view, so git inside reports \"not a git repository\"; run from the main checkout to give the agent git",
                git_dir.display()
            ));
        }
        // Each repository's `.git`: a directory is pinned (a mount point cannot be renamed,
        // removed or replaced, so no gitfile or link can take its place while git inside works
        // as usual); a gitfile is read-only (its content is the redirect). In a writable
        // workspace a directory is a layer instead (a mount point too): what the run writes
        // there waits outside the sandbox until the end judges it. The layers go right after
        // the workspace, before anything is hidden or bound below it (an overlay's lower layer
        // is one mount: a bind below it would not be seen through the overlay).
        let mut layers = Vec::new();
        let layers_fit = if self.workspace_writable {
            layer_file_systems(scope.workspace, &scope.facts.run_dir)
        } else {
            Ok(())
        };
        if let Err(why) = &layers_fit
            && !repositories.is_empty()
        {
            notes.push(format!(
                "WARNING: {why}: the repositories' .git are written in place, not through git layers (the host's git sees what the run writes there until the end judges it; a killed run leaves it until `stepproof repair`)"
            ));
        }
        for repo in repositories {
            let git = repo.join(".git");
            match fs::symlink_metadata(&git) {
                Ok(meta) if meta.is_dir() && self.workspace_writable && layers_fit.is_ok() => {
                    if layers.len() < MAX_GIT_LAYERS {
                        let layer = scope
                            .facts
                            .run_dir
                            .join(GIT_LAYERS_DIR)
                            .join(layers.len().to_string());
                        let through = object_stores(&git);
                        layers.push(MountOp::GitLayer {
                            git,
                            layer,
                            through,
                        });
                    } else {
                        notes.push(format!(
                            "{}: more than {MAX_GIT_LAYERS} repositories; this one's .git is written in place (what the run writes there is seen by the host's git during the run, and judged at the end)",
                            repo.display()
                        ));
                        self.mounts.push(MountOp::PinInPlace { path: git });
                    }
                }
                Ok(meta) if meta.is_dir() => self.mounts.push(MountOp::PinInPlace { path: git }),
                Ok(meta) if meta.is_file() => {
                    self.mounts.push(MountOp::ReadOnlyInPlace { path: git })
                }
                // A link is the sweep's to judge; it is never looked through.
                _ => {}
            }
        }
        if !layers.is_empty() {
            let at = self
                .mounts
                .iter()
                .position(|op| {
                    matches!(op, MountOp::Bind { dst, access: Access::ReadWrite, .. }
                        | MountOp::IdmappedBind { dst, access: Access::ReadWrite, .. }
                        if dst == scope.workspace)
                })
                .map_or(self.mounts.len(), |i| i + 1);
            self.mounts.splice(at..at, layers);
        }
        // Persistence paths: read-only where they exist; all of them recorded for the sweep.
        for path in existing_protected(protected_paths, listings) {
            self.mounts
                .push(MountOp::ReadOnlyInPlace { path: path.clone() });
        }
        // The profile that confines the run, where the run could write it: read-only and pinned.
        let profile_files = profile_file_mounts(scope.profile, scope.workspace, &self.mounts);
        self.mounts.extend(profile_files);
        // An evidence run: what defines it read-only, build state and cache settings gone.
        if let Some(view) = &scope.profile.runbook.evidence_view {
            self.mounts
                .extend(crate::sandbox::plan::evidence_view::mounts(scope, view));
        }
        self.mounts.push(MountOp::ReadOnlyRoot);
    }

    fn finish(self, _scope: &Scope<'_>) -> Result<Realized, PlanError> {
        Ok(Realized {
            landlock_rules: landlock_rules(&self.mounts)?,
            mounts: self.mounts,
            // Port rules would only break the agent's own loopback servers inside a network
            // namespace; with the host's network they are no help against an allow-list either.
            tcp: None,
            losses: Vec::new(),
            scratch_dir: None,
        })
    }
}

/// The git directory a gitfile at the workspace's `.git` names, when it is outside the
/// workspace (a linked worktree, a submodule checkout).
fn git_dir_outside(workspace: &Path) -> Option<PathBuf> {
    let gitfile = workspace.join(".git");
    if !fs::symlink_metadata(&gitfile).ok()?.is_file() {
        return None;
    }
    let text = fs::read_to_string(&gitfile).ok()?;
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let path = workspace.join(target);
    crate::sandbox::plan::protected::relative_beneath(workspace, &path)
        .is_none()
        .then_some(path)
}

/// Repositories whose `.git` gets a layer, at most; beyond, a `.git` is written in place.
const MAX_GIT_LAYERS: usize = 64;

/// File systems known to hold an overlay's layers in a user namespace (`userxattr`): ext4,
/// xfs, btrfs, tmpfs, f2fs, zfs. Anything else (an overlayfs root in a container, NFS, FUSE,
/// 9p) is not tried: a mount that fails would stop every launch.
const LAYER_FILE_SYSTEMS: &[(i64, &str)] = &[
    (0xEF53, "ext4"),
    (0x5846_5342, "xfs"),
    (0x9123_683E, "btrfs"),
    (0x0102_1994, "tmpfs"),
    (0xF2F5_2010, "f2fs"),
    (0x2FC1_2FC1, "zfs"),
];

/// Whether the workspace (the layers' lower side) and the run directory (their upper side) are
/// on file systems that hold git layers; `Err` names the one that does not.
pub fn layer_file_systems(workspace: &Path, run_dir: &Path) -> Result<(), String> {
    for (what, path) in [("the workspace", workspace), ("the run directory", run_dir)] {
        // The run directory is made at launch: its nearest existing ancestor tells.
        let existing = path.ancestors().find(|p| p.exists()).unwrap_or(path);
        // `__fsword_t` is i64 here, i32 on 32-bit targets.
        #[allow(clippy::unnecessary_cast)]
        let kind = nix::sys::statfs::statfs(existing)
            .map(|st| st.filesystem_type().0 as i64)
            .map_err(|e| format!("{what} {}: statfs: {e}", existing.display()))?;
        if !LAYER_FILE_SYSTEMS.iter().any(|(magic, _)| *magic == kind) {
            return Err(format!(
                "{what} {} is on a file system git layers are not used on (type {kind:#x}; they are on {})",
                existing.display(),
                LAYER_FILE_SYSTEMS
                    .iter()
                    .map(|(_, name)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    Ok(())
}

/// Where the layers live in the run directory (`git-layers/<n>/{upper,work}`).
pub const GIT_LAYERS_DIR: &str = "git-layers";

/// The object stores of the git directory `git` (its own, and its submodules' under
/// `modules/*/`, one level), relative to it: written through, not kept in the layer (objects are
/// named by their content, and a fetch would otherwise be copied at the end).
fn object_stores(git: &Path) -> Vec<PathBuf> {
    // Every component a directory, never a link: a bind follows links, and a writable bind of
    // what a link at `modules` names would reach outside the workspace.
    let is_dir = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_dir());
    let mut out = Vec::new();
    if is_dir(&git.join("objects")) {
        out.push(PathBuf::from("objects"));
    }
    if !is_dir(&git.join("modules")) {
        return out;
    }
    if let Ok(modules) = fs::read_dir(git.join("modules")) {
        for entry in modules.flatten().take(MAX_GIT_LAYERS) {
            let module = Path::new("modules").join(entry.file_name());
            let rel = module.join("objects");
            if is_dir(&git.join(&module)) && is_dir(&git.join(&rel)) {
                out.push(rel);
            }
        }
    }
    out.sort();
    out
}

/// The Landlock rules that mirror the mount list: read-execute where the view is read-only,
/// read-write where it is writable, device rights on the device nodes and terminals.
fn landlock_rules(mounts: &[MountOp]) -> Result<Vec<LandlockRule>, PlanError> {
    let mut rules = vec![landlock_rule("/", FsAccess::ListDirectories)?];
    for op in mounts {
        let (path, access) = match op {
            MountOp::Bind { dst, access, .. } | MountOp::IdmappedBind { dst, access, .. } => (
                dst,
                match access {
                    Access::ReadOnly => FsAccess::ReadExecute,
                    Access::ReadWrite => FsAccess::ReadWrite,
                },
            ),
            // /dev itself is only listed; its nodes get their own rules.
            MountOp::Tmpfs { dst, .. } if dst == Path::new("/dev") => (dst, FsAccess::ReadExecute),
            MountOp::Tmpfs { dst, .. } => (dst, FsAccess::ReadWrite),
            MountOp::Proc { dst } => (dst, FsAccess::ReadExecute),
            MountOp::Devpts { dst } | MountOp::DevNode { dst, .. } => (dst, FsAccess::Device),
            MountOp::Symlink { .. }
            | MountOp::HideDir { .. }
            | MountOp::HideFile { .. }
            | MountOp::ReadOnlyInPlace { .. }
            | MountOp::PinInPlace { .. }
            | MountOp::File { .. }
            | MountOp::SealReadOnly { .. }
            | MountOp::ReadOnlyRoot => continue,
            MountOp::FromSupervisor { dst, access, .. } => (
                dst,
                match access {
                    Access::ReadOnly => FsAccess::ReadExecute,
                    Access::ReadWrite => FsAccess::ReadWrite,
                },
            ),
            MountOp::Overlay { dst, .. }
            | MountOp::Generated { dst, .. }
            | MountOp::TrustFiles { dst } => (dst, FsAccess::ReadExecute),
            // Writable inside; what is written never reaches the host.
            MountOp::ScratchOverlay { dst, .. } => (dst, FsAccess::ReadWrite),
            // Writable inside; what is written reaches the host only when the end carries it.
            MountOp::GitLayer { git, .. } => (git, FsAccess::ReadWrite),
        };
        rules.push(landlock_rule(path.clone(), access)?);
    }
    Ok(rules)
}

/// The minimal /dev: a tmpfs with the device nodes bound in, a new devpts, the usual links.
fn push_minimal_dev(mounts: &mut Vec<MountOp>) {
    mounts.push(MountOp::Tmpfs {
        dst: "/dev".into(),
        mode: 0o755,
        size_mib: Some(1),
    });
    for node in DEVICE_NODES {
        let path = PathBuf::from("/dev").join(node);
        mounts.push(MountOp::DevNode {
            src: path.clone(),
            dst: path,
        });
    }
    mounts.push(MountOp::Devpts {
        dst: "/dev/pts".into(),
    });
    for (target, dst) in [
        ("pts/ptmx", "/dev/ptmx"),
        ("/proc/self/fd", "/dev/fd"),
        ("/proc/self/fd/0", "/dev/stdin"),
        ("/proc/self/fd/1", "/dev/stdout"),
        ("/proc/self/fd/2", "/dev/stderr"),
    ] {
        mounts.push(MountOp::Symlink {
            target: target.into(),
            dst: dst.into(),
        });
    }
    mounts.push(MountOp::Tmpfs {
        dst: "/dev/shm".into(),
        mode: 0o1777,
        size_mib: Some(64),
    });
}

/// Every file of the profile's chain that lies in a directory the run can write becomes a
/// read-only bind, and each directory between it and that writable root is pinned onto itself
/// first (a read-only file bind would otherwise move with a renamed parent). The hashes taken
/// when the profile was read are compared after the run.
fn profile_file_mounts(profile: &Profile, workspace: &Path, mounts: &[MountOp]) -> Vec<MountOp> {
    let mut roots = writable_binds(mounts);
    roots.push(workspace.to_path_buf());
    let mut ops = Vec::new();
    for file in &profile.files {
        let Some(root) = roots.iter().filter(|r| file.path.starts_with(r)).max() else {
            continue;
        };
        let mut dir = root.clone();
        let rel = file.path.strip_prefix(root).unwrap_or(&file.path);
        let parts: Vec<_> = rel.components().collect();
        for part in &parts[..parts.len().saturating_sub(1)] {
            dir.push(part);
            let op = MountOp::PinInPlace { path: dir.clone() };
            if !ops.contains(&op) {
                ops.push(op);
            }
        }
        let op = MountOp::ReadOnlyInPlace {
            path: file.path.clone(),
        };
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    // Pins first, outermost first: a later bind of an ancestor would hide what is below it.
    ops.sort_by_key(|op| match op {
        MountOp::PinInPlace { path } => (0, path.components().count()),
        _ => (1, 0),
    });
    ops
}

/// In root mode the sandbox user needs an account: tools ask `getpwuid` (git, ssh, Node's
/// `os.userInfo()`). The host's files are shown with the sandbox user's line in place of any
/// host account that has the same id, so the name inside is always `stepproof`.
fn sandbox_account_files(
    facts: &HostFacts,
    identity: &Identity,
    home: &Path,
) -> Vec<(PathBuf, String)> {
    let passwd_line = format!(
        "{SANDBOX_USER_NAME}:x:{}:{}:StepProof sandbox user:{}:/bin/sh",
        identity.inside_uid,
        identity.inside_gid,
        home.display()
    );
    let group_line = format!("{SANDBOX_USER_NAME}:x:{}:", identity.inside_gid);
    let mut files = Vec::new();
    for (name, host, id, line) in [
        ("passwd", &facts.passwd, identity.inside_uid, passwd_line),
        ("group", &facts.group, identity.inside_gid, group_line),
    ] {
        let id = id.to_string();
        let mut contents: String = host
            .lines()
            .filter(|l| {
                let mut fields = l.split(':');
                let name = fields.next();
                name != Some(SANDBOX_USER_NAME) && fields.nth(1) != Some(id.as_str())
            })
            .map(|l| format!("{l}\n"))
            .collect();
        contents.push_str(&line);
        contents.push('\n');
        files.push((PathBuf::from(name), contents));
    }
    files
}

#[cfg(test)]
mod layer_tests {
    use super::layer_file_systems;
    use std::path::Path;

    #[test]
    fn git_layers_are_used_only_on_file_systems_that_hold_them() {
        let dir = tempfile::tempdir().unwrap();
        let run_dir = dir.path().join("state/runs/1-2");
        // This machine's temporary directory is on ext4 or tmpfs; the run directory does not
        // exist yet (its nearest ancestor tells).
        assert_eq!(layer_file_systems(dir.path(), &run_dir), Ok(()));
        let refused = layer_file_systems(Path::new("/proc/self"), &run_dir).unwrap_err();
        assert!(
            refused.contains("the workspace /proc/self") && refused.contains("type 0x9fa0"),
            "{refused}"
        );
        let refused = layer_file_systems(dir.path(), Path::new("/sys/kernel")).unwrap_err();
        assert!(
            refused.contains("the run directory /sys/kernel"),
            "{refused}"
        );
    }

    #[test]
    fn object_stores_are_directories_all_the_way_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        let elsewhere = dir.path().join("elsewhere");
        for d in ["objects", "modules/a/objects", "modules/b"] {
            std::fs::create_dir_all(git.join(d)).unwrap();
        }
        std::fs::create_dir_all(elsewhere.join("x/objects")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("x"), git.join("modules/c")).unwrap();
        std::os::unix::fs::symlink(elsewhere.join("x/objects"), git.join("modules/b/objects"))
            .unwrap();
        assert_eq!(
            super::object_stores(&git),
            [Path::new("modules/a/objects"), Path::new("objects")]
        );
        // `modules` itself a link: none of what it names.
        std::fs::remove_dir_all(git.join("modules")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, git.join("modules")).unwrap();
        assert_eq!(super::object_stores(&git), [Path::new("objects")]);
    }
}
