//! The sandbox plan: the profile and the facts of this machine turned into plain data — every
//! mount in order, the identity, the environment. It is what `stepproof explain` prints and what
//! the thin executor in `mounts.rs` and `supervisor/launch.rs` applies. Building it reads the file system
//! (what exists, what is a socket) but changes nothing.

pub mod agent_layer;
pub mod env;
pub mod git_index;
pub mod hook_policy;
pub mod landlock;
pub mod protected;
pub mod secrets;

use crate::profile::{HomeMode, Limits, NetworkMode, Profile};
use crate::sandbox::plan::env::build_environment;
use crate::sandbox::plan::landlock::{FsAccess, LandlockPlan, LandlockRule};
use serde::Serialize;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

pub(crate) use crate::sandbox::plan::protected::{WorkspaceScan, protected_paths, scan_workspace};

/// Facts about the caller and this machine the plan depends on.
#[derive(Debug, Clone)]
pub struct HostFacts {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
    /// Canonical home directory of the caller.
    pub home: PathBuf,
    /// Canonical workspace directory.
    pub workspace: PathBuf,
    /// Canonical current directory.
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    /// Whether idmapped mounts work for the workspace and home (only asked when invoked as root).
    pub idmapped_mounts: bool,
    /// The host's /etc/passwd and /etc/group, for the generated copies in root mode.
    pub passwd: String,
    pub group: String,
    /// The run's own directory on the host (audit log, hook socket, the agent's config dir);
    /// outside the sandbox's view.
    pub run_dir: PathBuf,
    /// `stepproof-hook`, installed next to `stepproof-run`.
    pub hook_binary: Option<PathBuf>,
    /// The host's Claude Code managed-settings directory (`/etc/claude-code`), read to build
    /// the agent's own copy.
    pub claude_managed_dir: PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdentityMode {
    /// Invoked by a normal user: runs as that user's uid and gid.
    Caller,
    /// Invoked as root: runs as an unprivileged uid; workspace and home through idmapped mounts.
    RootRemapped,
    /// Invoked as root where idmapped mounts are impossible and the profile allows it: uid 0
    /// inside, with no capabilities.
    RootFallback,
}

/// Who the command is, inside and on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    pub mode: IdentityMode,
    pub inside_uid: u32,
    pub inside_gid: u32,
    pub outside_uid: u32,
    pub outside_gid: u32,
    /// Supplementary groups that stay (an unprivileged caller cannot drop them).
    pub kept_groups: Vec<u32>,
}

/// Host ids that the sandbox user of a root invocation owns on the host. Chosen far above any
/// normal allocation (and checked against /etc/passwd) so that no host account shares them.
pub const ROOT_MODE_OUTSIDE_ID: u32 = 2_147_000_000;
pub const SANDBOX_USER_NAME: &str = "stepproof";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HideReason {
    Secret,
    /// Its name looks like a secret (`filesystem.hidden_names`).
    CredentialName,
    /// A project `.env` file (`filesystem.hide_env_files`).
    EnvFile,
    OtherProject,
    UnixSocket,
}

/// One step of building the sandbox's file system view, in order. `dst` is the path inside.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum MountOp {
    Bind {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
    },
    /// A bind whose files owned by host root appear as the sandbox user's (root invocations).
    IdmappedBind {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
    },
    Tmpfs {
        dst: PathBuf,
        mode: u32,
        size_mib: Option<u64>,
    },
    Proc {
        dst: PathBuf,
    },
    Devpts {
        dst: PathBuf,
    },
    DevNode {
        src: PathBuf,
        dst: PathBuf,
    },
    Symlink {
        target: PathBuf,
        dst: PathBuf,
    },
    /// An empty, read-only directory with mode 000 over `dst`.
    HideDir {
        dst: PathBuf,
        reason: HideReason,
    },
    /// An empty, read-only file with mode 000 over `dst` (also used over sockets).
    HideFile {
        dst: PathBuf,
        reason: HideReason,
    },
    /// The path as the view already shows it, bound onto itself read-only (persistence paths:
    /// taken from the new view so that an idmapped workspace keeps its mapping).
    ReadOnlyInPlace {
        path: PathBuf,
    },
    /// The directory as the view already shows it, bound onto itself with its access unchanged:
    /// a mount point cannot be renamed or removed (EBUSY), so what is bound below it stays put
    /// (the ancestors of a profile file kept in the workspace).
    PinInPlace {
        path: PathBuf,
    },
    /// `dst` read-only, as the host has it, with generated files laid over it (an overlay with
    /// two lower layers and no upper one): how StepProof adds `/etc/claude-code/…` and the
    /// sandbox account without touching the host's `/etc`. Paths in `files` are relative to dst.
    Overlay {
        src: PathBuf,
        dst: PathBuf,
        files: Vec<(PathBuf, String)>,
    },
    /// A host path the supervisor opened before the clone (through an O_PATH descriptor, so
    /// the init needs no access to the directories above it), bound at `dst`.
    FromSupervisor {
        src: PathBuf,
        dst: PathBuf,
        access: Access,
    },
    /// Everything at and below `dst` becomes read-only (after it was populated).
    SealReadOnly {
        dst: PathBuf,
    },
    /// A read-only tmpfs at `dst` holding only the files StepProof generated (paths relative to
    /// dst): what the agent reads there is StepProof's alone (`/etc/claude-code`).
    Generated {
        dst: PathBuf,
        files: Vec<(PathBuf, String)>,
    },
    /// A file generated by StepProof, read-only.
    File {
        dst: PathBuf,
        contents: String,
    },
    /// The rebuilt root itself becomes read-only (last).
    ReadOnlyRoot,
}

/// How the sandbox is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// User, mount, pid, ipc, uts, cgroup (and net) namespaces, plus Landlock and seccomp.
    Namespaces,
    /// Hosts that refuse user namespaces, where the profile allows it: Landlock and seccomp
    /// only. `SandboxPlan::losses` says what that gives up.
    LandlockSeccompOnly,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SandboxPlan {
    /// The hook and the agent's own state (profiles with a hook).
    pub agent: Option<crate::sandbox::plan::agent_layer::AgentState>,
    /// Keys StepProof owns that the host's managed-settings drop-ins set (removed inside; the
    /// launch warns, `--ci` refuses), as `<file>: <key>`.
    pub managed_settings_removed: Vec<String>,
    /// The repositories found at launch (the workspace's and the nested ones the bounded scan
    /// reached): the sweep compares what their `.git` is after the run.
    pub repositories: Vec<PathBuf>,
    pub isolation: Isolation,
    /// What this plan cannot enforce that the namespace sandbox would (degraded hosts).
    pub losses: Vec<String>,
    /// A per-run scratch directory (degraded hosts, where /tmp is the host's).
    pub scratch_dir: Option<PathBuf>,
    pub profile: String,
    pub policy_hash: String,
    pub identity: Identity,
    pub hostname: String,
    pub network: NetworkMode,
    /// The proxy's port on the sandbox's loopback (`allowlist`).
    pub proxy_port: u16,
    /// What the proxy lets through (`allowlist`).
    pub allow: crate::profile::AllowList,
    /// The credential gateway, with `ca_file` resolved.
    pub gateway: Option<crate::profile::GatewayConfig>,
    pub workspace: PathBuf,
    pub home: PathBuf,
    pub cwd: PathBuf,
    pub mounts: Vec<MountOp>,
    /// Names in the home hidden because they look like secrets, with the pattern each matched
    /// (also `hide` entries in `mounts`).
    pub credential_names: Vec<crate::sandbox::plan::secrets::CredentialName>,
    /// Every persistence path looked at (existing ones are also read-only binds in `mounts`);
    /// the end-of-run sweep compares them.
    pub protected_paths: Vec<PathBuf>,
    /// Serialized as names only: a value may be a secret the profile chose to pass.
    #[serde(serialize_with = "names_only")]
    pub env: Vec<(String, String)>,
    /// Names of variables of the caller that were not passed (values never recorded).
    pub env_dropped: Vec<String>,
    /// Landlock, mirroring the view at mount granularity (hidden paths are the mounts' job:
    /// Landlock cannot carve an exception out of a granted directory).
    pub landlock: LandlockPlan,
    pub limits: Limits,
    /// Things a reader should know (bounds reached, groups kept, …).
    pub notes: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Refused(String),
}

fn names_only<S: serde::Serializer>(env: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(env.iter().map(|(name, _)| name))
}

/// The device nodes of the minimal /dev (besides the terminal devices of a new devpts).
pub const DEVICE_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

const SCAN_ENTRY_LIMIT: usize = 20_000;
const SOCKET_SCAN_DEPTH: usize = 2;

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

pub fn build_plan(profile: &Profile, facts: &HostFacts) -> Result<SandboxPlan, PlanError> {
    let mut notes = Vec::new();
    let identity = choose_identity(profile, facts, &mut notes)?;
    let home = facts.home.clone();
    let workspace = facts.workspace.clone();
    check_workspace(profile, &workspace, &home)?;
    let resolve = |spec: &crate::profile::PathSpec| spec.resolve(&home, &workspace);
    // Invoked as root, everything bound from the caller's side (not the system directories)
    // goes through an idmapped mount: root's files there appear as the sandbox user's, and the
    // init, already that user, needs no access to root's private directories to mount them.
    let personal_bind = |src: &Path, access| match identity.mode {
        IdentityMode::RootRemapped => MountOp::IdmappedBind {
            src: src.to_path_buf(),
            dst: src.to_path_buf(),
            access,
        },
        _ => MountOp::Bind {
            src: src.to_path_buf(),
            dst: src.to_path_buf(),
            access,
        },
    };

    // Files StepProof lays over the host's /etc (never writing the host's).
    let mut etc_files = Vec::new();
    if identity.mode == IdentityMode::RootRemapped {
        etc_files.extend(sandbox_account_files(facts, &identity, &home));
    }
    // The agent inside: the hook where the agent cannot remove it, and its own state.
    let agent = crate::sandbox::plan::agent_layer::plan_agent(profile, facts, &home, &workspace)?;
    let managed_settings_removed = agent
        .as_ref()
        .map(|a| a.managed_removed.clone())
        .unwrap_or_default();
    if let Some(agent) = &agent {
        notes.extend(agent.notes.iter().cloned());
        // The mount point of the agent's own /etc/claude-code (the read-only /etc usually has
        // none); the generated tmpfs covers it.
        etc_files.push((PathBuf::from("claude-code/.mount-point"), String::new()));
    }
    tracing::debug!("plan: agent planned");
    let mut mounts = Vec::new();
    // System directories, read-only; a host symlink (merged /usr) is recreated as a symlink.
    for spec in &profile.filesystem.system {
        let path = resolve(spec);
        match fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = fs::read_link(&path).map_err(|source| PlanError::Io {
                    what: "reading the link",
                    path: path.clone(),
                    source,
                })?;
                mounts.push(MountOp::Symlink { target, dst: path });
            }
            Ok(_) if path == Path::new("/etc") && !etc_files.is_empty() => {
                mounts.push(MountOp::Overlay {
                    src: path.clone(),
                    dst: path,
                    files: std::mem::take(&mut etc_files),
                })
            }
            Ok(_) => mounts.push(MountOp::Bind {
                src: path.clone(),
                dst: path,
                access: Access::ReadOnly,
            }),
            Err(_) => {}
        }
    }
    // Kernel interfaces: a fresh read-only /proc for the new pid namespace, read-only /sys.
    mounts.push(MountOp::Proc {
        dst: "/proc".into(),
    });
    mounts.push(MountOp::Bind {
        src: "/sys".into(),
        dst: "/sys".into(),
        access: Access::ReadOnly,
    });
    push_minimal_dev(&mut mounts);
    // Private scratch space; no host daemon sockets under /run.
    mounts.push(MountOp::Tmpfs {
        dst: "/tmp".into(),
        mode: 0o1777,
        size_mib: Some(profile.filesystem.tmp_size_mib),
    });
    mounts.push(MountOp::Tmpfs {
        dst: "/run".into(),
        mode: 0o755,
        size_mib: Some(16),
    });
    if let Some(agent) = &agent {
        mounts.extend(agent.mounts.iter().cloned());
    }
    mounts.push(MountOp::Symlink {
        target: "../run".into(),
        dst: "/var/run".into(),
    });
    mounts.push(MountOp::Symlink {
        target: "../tmp".into(),
        dst: "/var/tmp".into(),
    });

    // The home: read-only (unless it is the workspace), or with `home = "allowlist"` a private
    // empty one that shows only what the profile lists. Then the workspace, read-write.
    let home_visible = home != Path::new("/") && home.is_dir() && home != workspace;
    let allowlist = home_visible && profile.filesystem.home == HomeMode::Allowlist;
    let home_allowed: Vec<PathBuf> = if allowlist {
        profile.filesystem.home_allow.iter().map(&resolve).collect()
    } else {
        Vec::new()
    };
    if allowlist {
        mounts.push(MountOp::Tmpfs {
            dst: home.clone(),
            mode: 0o700,
            size_mib: Some(profile.filesystem.tmp_size_mib),
        });
    } else if home_visible {
        mounts.push(personal_bind(&home, Access::ReadOnly));
    }
    mounts.push(personal_bind(&workspace, Access::ReadWrite));
    for spec in &profile.filesystem.writable {
        let path = existing(resolve(spec), "filesystem.writable")?;
        mounts.push(personal_bind(&path, Access::ReadWrite));
    }
    for spec in &profile.filesystem.read_only {
        let path = existing(resolve(spec), "filesystem.read_only")?;
        mounts.push(personal_bind(&path, Access::ReadOnly));
    }
    let mut listings = crate::sandbox::plan::secrets::Listings::default();
    let mut missing = Vec::new();
    for path in &home_allowed {
        // Toolchains differ between machines: a listed path this host lacks is skipped.
        if listings.exists_below(&home, path) {
            mounts.push(personal_bind(path, Access::ReadOnly));
        } else {
            missing.push(path.display().to_string());
        }
    }
    if !missing.is_empty() {
        notes.push(format!(
            "home_allow: not on this host, skipped: {}",
            missing.join(", ")
        ));
    }

    tracing::debug!("plan: home and workspace");
    let WorkspaceScan {
        protected_paths,
        repositories,
        env_files,
    } = scan_workspace(profile, &workspace, &home, &mut notes);
    tracing::debug!("plan: workspace scanned");

    // What must not be seen.
    let mut hidden = std::collections::BTreeMap::new();
    for path in crate::sandbox::plan::secrets::existing_catalogue(
        &profile.filesystem.hidden,
        &home,
        &workspace,
        &mut listings,
    ) {
        hidden.entry(path).or_insert(HideReason::Secret);
    }
    tracing::debug!("plan: catalogue");
    let credential_names = if home_visible {
        let mut keep = vec![workspace.clone()];
        keep.extend(
            profile
                .filesystem
                .read_only
                .iter()
                .chain(&profile.filesystem.writable)
                .map(resolve),
        );
        keep.extend(home_allowed.iter().cloned());
        crate::sandbox::plan::secrets::credential_names(
            &home,
            &profile.filesystem.hidden_names,
            &keep,
            &mut listings,
        )
    } else {
        Vec::new()
    };
    for found in &credential_names {
        hidden
            .entry(found.path.clone())
            .or_insert(HideReason::CredentialName);
    }
    tracing::debug!("plan: credential names");
    if profile.filesystem.hide_other_projects {
        for path in other_projects(&workspace, &home, &mut notes) {
            hidden.entry(path).or_insert(HideReason::OtherProject);
        }
    }
    if profile.filesystem.mask_home_sockets && home_visible || workspace == home {
        let skip: Vec<PathBuf> = hidden.keys().cloned().collect();
        for path in home_sockets(&home, &skip, &mut notes) {
            hidden.entry(path).or_insert(HideReason::UnixSocket);
        }
    }
    for path in hidden_env_files(profile, &workspace, &repositories, env_files, &mut notes) {
        hidden.entry(path).or_insert(HideReason::EnvFile);
    }
    // With an allow-listed home, only what is shown needs hiding.
    if allowlist {
        hidden.retain(|path, _| {
            !path.starts_with(&home)
                || path.starts_with(&workspace)
                || home_allowed.iter().any(|a| path.starts_with(a))
        });
    }
    tracing::debug!("plan: hidden found");
    for (path, reason) in hidden {
        let is_dir = fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false);
        mounts.push(if is_dir {
            MountOp::HideDir { dst: path, reason }
        } else {
            MountOp::HideFile { dst: path, reason }
        });
    }

    if let Some(git_dir) = git_dir_outside(&workspace) {
        notes.push(format!(
            "WARNING: the workspace's .git names {}, outside the workspace (a linked worktree or a submodule checkout): it is not in the sandbox's view, so git inside reports \"not a git repository\"; run from the main checkout to give the agent git",
            git_dir.display()
        ));
    }
    // Each repository's `.git`: a directory is pinned (a mount point cannot be renamed,
    // removed or replaced, so no gitfile or link can take its place while git inside works
    // as usual); a gitfile is read-only (its content is the redirect).
    for repo in &repositories {
        let git = repo.join(".git");
        match fs::symlink_metadata(&git) {
            Ok(meta) if meta.is_dir() => mounts.push(MountOp::PinInPlace { path: git }),
            Ok(meta) if meta.is_file() => mounts.push(MountOp::ReadOnlyInPlace { path: git }),
            // A link is the sweep's to judge; it is never looked through.
            _ => {}
        }
    }
    // Persistence paths: read-only where they exist; all of them recorded for the sweep.
    // One listing per parent directory instead of a lookup per name: most names are absent.
    for path in &protected_paths {
        if crate::sandbox::plan::protected::is_git_config(path) {
            continue;
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            continue;
        };
        let listed = listings
            .names(parent)
            .is_some_and(|names| names.contains(name));
        if listed && fs::symlink_metadata(path).is_ok_and(|m| !m.file_type().is_symlink()) {
            mounts.push(MountOp::ReadOnlyInPlace { path: path.clone() });
        }
    }

    // The profile that confines the run, where the run could write it: read-only and pinned.
    mounts.extend(profile_file_mounts(profile, &workspace, &mounts));

    mounts.push(MountOp::ReadOnlyRoot);

    tracing::debug!("plan: mounts");
    let (mut env, env_dropped) = build_environment(profile, facts, &identity, &home);
    if let Some(agent) = &agent {
        for (name, value) in &agent.env {
            env.retain(|(n, _)| n != name);
            env.push((name.clone(), value.clone()));
        }
        env.sort();
    }
    let landlock = LandlockPlan {
        rules: landlock_rules(&mounts)?,
        scope_signals_and_abstract_unix: true,
        // Port rules would only break the agent's own loopback servers inside a network
        // namespace; with the host's network they are no help against an allow-list either.
        tcp: None,
        assurance: profile.assurance,
    };
    let cwd = if facts.cwd.starts_with(&workspace) {
        facts.cwd.clone()
    } else {
        workspace.clone()
    };
    Ok(SandboxPlan {
        agent: agent.map(|a| a.state),
        managed_settings_removed,
        repositories,
        isolation: Isolation::Namespaces,
        losses: Vec::new(),
        scratch_dir: None,
        profile: profile.name.clone(),
        policy_hash: profile.policy_hash(),
        identity,
        hostname: "stepproof".into(),
        network: profile.network.mode,
        proxy_port: profile.network.proxy_port,
        allow: profile.network.allow.clone(),
        gateway: profile.network.gateway.clone().map(|mut g| {
            g.ca_file = g.ca_file.map(|spec| {
                let path = spec.resolve(&home, &workspace);
                crate::profile::PathSpec::Absolute(
                    path.strip_prefix("/").unwrap_or(&path).to_path_buf(),
                )
            });
            g
        }),
        workspace,
        home,
        cwd,
        mounts,
        credential_names,
        protected_paths,
        env,
        env_dropped,
        landlock,
        limits: profile.process.limits.clone(),
        notes,
    })
}

/// A checked Landlock rule; a path Landlock must not be given (a writable /proc, …) refuses the
/// plan.
pub(crate) fn landlock_rule(
    path: impl Into<PathBuf>,
    access: FsAccess,
) -> Result<LandlockRule, PlanError> {
    let path = path.into();
    LandlockRule::new(path.clone(), access)
        .map_err(|e| PlanError::Refused(format!("Landlock rule for {}: {e}", path.display())))
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
            MountOp::Overlay { dst, .. } | MountOp::Generated { dst, .. } => {
                (dst, FsAccess::ReadExecute)
            }
        };
        rules.push(landlock_rule(path.clone(), access)?);
    }
    Ok(rules)
}

pub(crate) fn choose_identity(
    profile: &Profile,
    facts: &HostFacts,
    notes: &mut Vec<String>,
) -> Result<Identity, PlanError> {
    if facts.uid != 0 {
        let kept_groups: Vec<u32> = facts
            .groups
            .iter()
            .copied()
            .filter(|g| *g != facts.gid)
            .collect();
        if !kept_groups.is_empty() {
            notes.push(format!(
                "supplementary groups {kept_groups:?} are kept: an unprivileged caller cannot drop them (they show as nogroup inside)"
            ));
        }
        return Ok(Identity {
            mode: IdentityMode::Caller,
            inside_uid: facts.uid,
            inside_gid: facts.gid,
            outside_uid: facts.uid,
            outside_gid: facts.gid,
            kept_groups,
        });
    }
    if facts.idmapped_mounts {
        let uid = profile.process.sandbox_uid;
        return Ok(Identity {
            mode: IdentityMode::RootRemapped,
            inside_uid: uid,
            inside_gid: uid,
            outside_uid: ROOT_MODE_OUTSIDE_ID,
            outside_gid: ROOT_MODE_OUTSIDE_ID,
            kept_groups: Vec::new(),
        });
    }
    if !profile.process.allow_root_fallback {
        return Err(PlanError::Refused(
            "invoked as root, but idmapped mounts do not work for the workspace or home here, so the command cannot run as an unprivileged user that owns them; set process.allow_root_fallback = true to run as uid 0 without capabilities (never for an agent with the hook), or run stepproof-run as a normal user".into(),
        ));
    }
    if profile.hook.is_some() {
        return Err(PlanError::Refused(
            "the root fallback is not allowed for a profile with a hook: Claude Code ignores parts of its managed settings when it runs as uid 0".into(),
        ));
    }
    notes.push("ROOT FALLBACK: the command runs as uid 0 (no capabilities) because idmapped mounts are unavailable".into());
    Ok(Identity {
        mode: IdentityMode::RootFallback,
        inside_uid: 0,
        inside_gid: 0,
        outside_uid: 0,
        outside_gid: 0,
        kept_groups: Vec::new(),
    })
}

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

pub use crate::profile::STATE_DIR;

/// Kernel and device trees a workspace can never be in, besides the profile's system directories.
const NEVER_A_WORKSPACE: &[&str] = &["/proc", "/sys", "/dev", "/boot"];

/// A workspace is the one directory the run may write, so it can be neither the whole file
/// system, nor a directory that holds the home (the home's secrets and rc files would be the
/// agent's), nor anything under the system directories the view shows read-only (`--workspace
/// /etc` would make the host's `/etc` writable), nor StepProof's own state (the audit logs).
/// The home itself is allowed: its persistence paths are protected and its secrets hidden.
pub(crate) fn check_workspace(
    profile: &Profile,
    workspace: &Path,
    home: &Path,
) -> Result<(), PlanError> {
    let refuse = |why: String| {
        Err(PlanError::Refused(format!(
            "--workspace {}: {why}; choose a project directory",
            workspace.display()
        )))
    };
    if workspace == Path::new("/") {
        return refuse("the workspace cannot be `/`".into());
    }
    if home.starts_with(workspace) && home != workspace {
        return refuse(format!(
            "it contains the home {} (whose secrets and startup files would become writable)",
            home.display()
        ));
    }
    let system = profile
        .filesystem
        .system
        .iter()
        .map(|spec| spec.resolve(home, workspace))
        .chain(NEVER_A_WORKSPACE.iter().map(PathBuf::from));
    for dir in system {
        let canonical = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if workspace.starts_with(&canonical) || workspace.starts_with(&dir) {
            return refuse(format!(
                "it is under {}, which the sandbox shows read-only from the host",
                dir.display()
            ));
        }
    }
    let state = home.join(STATE_DIR);
    if workspace.starts_with(&state) || state.starts_with(workspace) && workspace != home {
        return refuse(format!(
            "it holds or is inside StepProof's own state {} (audit logs, quarantine)",
            state.display()
        ));
    }
    Ok(())
}

impl SandboxPlan {
    /// Everything a run of this plan can write on the host, the workspace first: the view's
    /// read-write binds (writable extras), the agent's config directory, and, without a mount
    /// namespace, what Landlock grants for writing (the per-run scratch directory included).
    pub fn writable_host_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.workspace.clone()];
        paths.extend(writable_binds(&self.mounts));
        if let Some(agent) = &self.agent {
            paths.push(agent.config_dir.clone());
        }
        if self.isolation == Isolation::LandlockSeccompOnly {
            paths.extend(
                self.landlock
                    .rules
                    .iter()
                    .filter(|r| r.access == FsAccess::ReadWrite)
                    .map(|r| r.path.clone()),
            );
        }
        let mut seen = BTreeSet::new();
        paths.retain(|p| seen.insert(p.clone()));
        paths
    }
}

/// Host directories the view binds read-write (workspace, writable extras).
pub(crate) fn writable_binds(mounts: &[MountOp]) -> Vec<PathBuf> {
    mounts
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind {
                src,
                access: Access::ReadWrite,
                ..
            }
            | MountOp::IdmappedBind {
                src,
                access: Access::ReadWrite,
                ..
            } => Some(src.clone()),
            _ => None,
        })
        .collect()
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

pub(crate) fn existing(path: PathBuf, key: &str) -> Result<PathBuf, PlanError> {
    path.canonicalize().map_err(|source| PlanError::Io {
        what: if key == "filesystem.writable" {
            "filesystem.writable: resolving"
        } else {
            "filesystem.read_only: resolving"
        },
        path,
        source,
    })
}

pub(crate) use crate::sandbox::plan::secrets::hide_target;

/// The project's `.env` files to hide: those the scan found, minus the ones the profile shows
/// and the tracked ones (hidden, a tracked file would look emptied to git inside, and
/// `git commit -a` would record that): those are reported instead.
fn hidden_env_files(
    profile: &Profile,
    workspace: &Path,
    repositories: &[PathBuf],
    found: Vec<PathBuf>,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut tracked_by_repo: std::collections::HashMap<&Path, Result<BTreeSet<Vec<u8>>, String>> =
        std::collections::HashMap::new();
    let mut hide = Vec::new();
    for path in found {
        let rel = path.strip_prefix(workspace).unwrap_or(&path);
        if profile
            .filesystem
            .env_files_visible
            .iter()
            .any(|v| Path::new(v) == rel)
        {
            continue;
        }
        // The innermost repository holding it, and whether its index lists it.
        let repo = repositories
            .iter()
            .filter(|r| path.starts_with(r))
            .max_by_key(|r| r.as_os_str().len());
        let tracked = repo.and_then(|repo| {
            let git_dir = repo.join(".git");
            if !git_dir.is_dir() {
                return Some(Err("its repository's .git is not a directory".to_string()));
            }
            let in_repo = path
                .strip_prefix(repo)
                .ok()?
                .as_os_str()
                .as_bytes()
                .to_vec();
            let listed = tracked_by_repo
                .entry(repo.as_path())
                .or_insert_with(|| crate::sandbox::plan::git_index::tracked_in(&git_dir));
            Some(
                listed
                    .as_ref()
                    .map(|set| set.contains(&in_repo))
                    .map_err(Clone::clone),
            )
        });
        match tracked {
            Some(Ok(true)) => notes.push(format!(
                "WARNING: {} is a .env file tracked by git: it stays visible (hidden, git inside would see it emptied); take the secrets out of the repository",
                path.display()
            )),
            Some(Err(why)) => {
                notes.push(format!(
                    "{}: hidden, though whether git tracks it is unknown ({why})",
                    path.display()
                ));
                hide.push(path);
            }
            _ => hide.push(path),
        }
    }
    hide
}

/// Siblings of the workspace and of each ancestor up to the home: other people's projects.
/// Dot-entries are configuration (the secret catalogue covers those that matter), not projects.
pub(crate) fn other_projects(
    workspace: &Path,
    home: &Path,
    notes: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut found = Vec::new();
    if !workspace.starts_with(home) || workspace == home {
        return found;
    }
    let mut current = workspace;
    while let Some(parent) = current.parent() {
        if let Ok(entries) = fs::read_dir(parent) {
            for entry in entries.flatten() {
                let path = entry.path();
                let name = entry.file_name();
                if path != current && !name.to_string_lossy().starts_with('.') {
                    found.push(path);
                    if found.len() >= SCAN_ENTRY_LIMIT {
                        notes.push(format!(
                            "other projects: stopped after {SCAN_ENTRY_LIMIT} entries under {}",
                            parent.display()
                        ));
                        return found;
                    }
                }
            }
        }
        if parent == home {
            break;
        }
        current = parent;
    }
    found
}

/// Unix sockets under the home: every bound one the kernel lists in /proc/net/unix (any depth),
/// plus a shallow breadth-first scan for socket files whose listener lives in another network
/// namespace (connect() on a path crosses namespaces).
pub(crate) fn home_sockets(home: &Path, skip: &[PathBuf], notes: &mut Vec<String>) -> Vec<PathBuf> {
    let mut found: BTreeSet<PathBuf> = fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(7))
        .map(PathBuf::from)
        .filter(|path| path.starts_with(home) && !skip.iter().any(|s| path.starts_with(s)))
        .filter(|path| fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()))
        .collect();
    let mut queue = std::collections::VecDeque::from([(home.to_path_buf(), 0usize)]);
    let mut seen = 0usize;
    while let Some((dir, depth)) = queue.pop_front() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SCAN_ENTRY_LIMIT {
                notes.push(format!(
                    "socket scan of {} stopped after {SCAN_ENTRY_LIMIT} entries",
                    home.display()
                ));
                return found.into_iter().collect();
            }
            let path = entry.path();
            if skip.iter().any(|s| path.starts_with(s)) {
                continue;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_socket() {
                found.insert(path);
            } else if kind.is_dir() && depth + 1 < SOCKET_SCAN_DEPTH {
                queue.push_back((path, depth + 1));
            }
        }
    }
    found.into_iter().collect()
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

impl std::fmt::Display for MountOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = |a: &Access| match a {
            Access::ReadOnly => "ro",
            Access::ReadWrite => "rw",
        };
        match self {
            MountOp::Bind { src, dst, access } if src == dst => {
                write!(f, "{:<4} bind      {}", mode(access), dst.display())
            }
            MountOp::Bind { src, dst, access } => write!(
                f,
                "{:<4} bind      {} <- {}",
                mode(access),
                dst.display(),
                src.display()
            ),
            MountOp::IdmappedBind { dst, access, .. } => {
                write!(f, "{:<4} idmapped  {}", mode(access), dst.display())
            }
            MountOp::Tmpfs { dst, size_mib, .. } => match size_mib {
                Some(size) => write!(f, "rw   tmpfs     {} ({size} MiB)", dst.display()),
                None => write!(f, "rw   tmpfs     {}", dst.display()),
            },
            MountOp::Proc { dst } => write!(f, "ro   proc      {}", dst.display()),
            MountOp::Devpts { dst } => write!(f, "rw   devpts    {} (new instance)", dst.display()),
            MountOp::DevNode { dst, .. } => write!(f, "rw   device    {}", dst.display()),
            MountOp::Symlink { target, dst } => {
                write!(
                    f,
                    "     symlink   {} -> {}",
                    dst.display(),
                    target.display()
                )
            }
            MountOp::HideDir { dst, reason } | MountOp::HideFile { dst, reason } => {
                let why = match reason {
                    HideReason::Secret => "secret",
                    HideReason::CredentialName => "name looks like a secret",
                    HideReason::EnvFile => "project .env file",
                    HideReason::OtherProject => "other project",
                    HideReason::UnixSocket => "unix socket",
                };
                write!(f, "--   hidden    {} ({why})", dst.display())
            }
            MountOp::ReadOnlyInPlace { path } => write!(f, "ro   protect   {}", path.display()),
            MountOp::PinInPlace { path } => write!(f, "pin  in place  {}", path.display()),
            MountOp::File { dst, .. } => write!(f, "ro   generated {}", dst.display()),
            MountOp::FromSupervisor { src, dst, access } => write!(
                f,
                "{:<4} bind      {} <- {} (opened by the supervisor)",
                mode(access),
                dst.display(),
                src.display()
            ),
            MountOp::SealReadOnly { dst } => write!(f, "ro   seal      {}", dst.display()),
            MountOp::Overlay { dst, files, .. } => write!(
                f,
                "ro   overlay   {} (+ {})",
                dst.display(),
                files
                    .iter()
                    .map(|(p, _)| dst.join(p).display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            MountOp::Generated { dst, files } => write!(
                f,
                "ro   generated {} (only: {})",
                dst.display(),
                files
                    .iter()
                    .map(|(p, _)| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            MountOp::ReadOnlyRoot => write!(f, "ro   root      / (rebuilt, read-only)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(home: &Path, ws: &Path, uid: u32) -> HostFacts {
        HostFacts {
            uid,
            gid: uid,
            groups: vec![uid, 27],
            home: home.to_path_buf(),
            workspace: ws.to_path_buf(),
            cwd: ws.to_path_buf(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("GITHUB_TOKEN".into(), "ghp_x".into()),
                ("LD_PRELOAD".into(), "/x.so".into()),
            ],
            idmapped_mounts: true,
            passwd: "root:x:0:0:root:/root:/bin/bash\n".into(),
            group: "root:x:0:\n".into(),
            run_dir: home.join(".local/state/stepproof/runs/test"),
            hook_binary: Some(PathBuf::from("/usr/bin/true")),
            claude_managed_dir: PathBuf::from("/nonexistent/claude-code"),
        }
    }

    #[test]
    fn view_of_a_workspace_under_home() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let ws = home.join("src/proj");
        fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        fs::create_dir_all(ws.join("sub/.git/hooks")).unwrap();
        fs::create_dir_all(home.join("src/other")).unwrap();
        fs::create_dir_all(home.join("notes")).unwrap();
        fs::create_dir_all(home.join(".ssh")).unwrap();
        fs::write(home.join(".netrc"), "machine x").unwrap();
        fs::create_dir_all(home.join(".run")).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(home.join(".run/agent.sock")).unwrap();
        // Deeper than the scan goes: found through /proc/net/unix.
        fs::create_dir_all(home.join(".a/b/c/d")).unwrap();
        let _deep =
            std::os::unix::net::UnixListener::bind(home.join(".a/b/c/d/deep.sock")).unwrap();

        let profile = Profile::builtin_default().unwrap();
        let plan = build_plan(&profile, &facts(&home, &ws, 1234)).unwrap();

        let has = |op: &MountOp| plan.mounts.contains(op);
        assert!(has(&MountOp::Bind {
            src: home.clone(),
            dst: home.clone(),
            access: Access::ReadOnly
        }));
        assert!(has(&MountOp::Bind {
            src: ws.clone(),
            dst: ws.clone(),
            access: Access::ReadWrite
        }));
        assert!(has(&MountOp::HideDir {
            dst: home.join(".ssh"),
            reason: HideReason::Secret
        }));
        assert!(has(&MountOp::HideFile {
            dst: home.join(".netrc"),
            reason: HideReason::Secret
        }));
        assert!(has(&MountOp::HideDir {
            dst: home.join("src/other"),
            reason: HideReason::OtherProject
        }));
        assert!(has(&MountOp::HideDir {
            dst: home.join("notes"),
            reason: HideReason::OtherProject
        }));
        assert!(has(&MountOp::HideFile {
            dst: home.join(".run/agent.sock"),
            reason: HideReason::UnixSocket
        }));
        assert!(has(&MountOp::HideFile {
            dst: home.join(".a/b/c/d/deep.sock"),
            reason: HideReason::UnixSocket
        }));
        for path in [ws.join(".git/hooks"), ws.join("sub/.git/hooks")] {
            assert!(
                has(&MountOp::ReadOnlyInPlace { path: path.clone() }),
                "{path:?}"
            );
        }
        assert!(plan.protected_paths.contains(&ws.join(".vscode")));
        assert_eq!(plan.mounts.last(), Some(&MountOp::ReadOnlyRoot));
        // The home is bound before the workspace, which comes before what is hidden in it.
        let pos = |op: &MountOp| plan.mounts.iter().position(|m| m == op).unwrap();
        assert!(
            pos(&MountOp::Bind {
                src: home.clone(),
                dst: home.clone(),
                access: Access::ReadOnly
            }) < pos(&MountOp::Bind {
                src: ws.clone(),
                dst: ws.clone(),
                access: Access::ReadWrite
            })
        );
        assert_eq!(plan.identity.mode, IdentityMode::Caller);
        assert_eq!(plan.identity.kept_groups, vec![27]);
        assert!(
            plan.env
                .iter()
                .all(|(k, _)| k != "GITHUB_TOKEN" && !k.starts_with("LD_"))
        );
        assert!(plan.env_dropped.contains(&"GITHUB_TOKEN".to_string()));
    }

    #[test]
    fn the_agents_managed_settings_do_not_depend_on_the_view_of_etc() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let ws = home.join("w");
        fs::create_dir_all(&ws).unwrap();
        let mut profile = Profile::builtin_default().unwrap();
        for keep_etc in [true, false] {
            if !keep_etc {
                profile
                    .filesystem
                    .system
                    .retain(|s| s.resolve(&home, &ws) != Path::new("/etc"));
            }
            let plan = build_plan(&profile, &facts(&home, &ws, 1000)).unwrap();
            let generated: Vec<_> = plan
                .mounts
                .iter()
                .filter_map(|m| match m {
                    MountOp::Generated { dst, files } => Some((dst, files)),
                    _ => None,
                })
                .collect();
            assert_eq!(generated.len(), 1, "keep /etc: {keep_etc}");
            let (dst, files) = generated[0];
            assert_eq!(dst, Path::new("/etc/claude-code"));
            assert_eq!(files[0].0, Path::new("managed-settings.json"));
            let settings: serde_json::Value = serde_json::from_str(&files[0].1).unwrap();
            assert!(
                crate::sandbox::plan::agent_layer::managed_settings_problems(&settings, false)
                    .is_empty()
            );
        }
    }

    #[test]
    fn root_invocation_is_remapped_and_gets_an_account() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let ws = home.join("w");
        fs::create_dir_all(&ws).unwrap();
        let profile = Profile::builtin_default().unwrap();
        let plan = build_plan(&profile, &facts(&home, &ws, 0)).unwrap();
        assert_eq!(plan.identity.mode, IdentityMode::RootRemapped);
        assert_ne!(plan.identity.inside_uid, 0);
        assert!(plan.mounts.iter().any(|m| matches!(m, MountOp::IdmappedBind { dst, access: Access::ReadWrite, .. } if *dst == ws)));
        assert!(plan.mounts.iter().any(|m| matches!(m, MountOp::Overlay { dst, files, .. } if dst == Path::new("/etc") && files.iter().any(|(p, c)| p == Path::new("passwd") && c.contains("stepproof:x:1000:1000")))));

        let mut no_idmap = facts(&home, &ws, 0);
        no_idmap.idmapped_mounts = false;
        assert!(matches!(
            build_plan(&profile, &no_idmap),
            Err(PlanError::Refused(_))
        ));
    }

    #[test]
    fn workspace_equal_to_home_protects_shell_rc_files() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        fs::write(home.join(".bashrc"), "# rc").unwrap();
        let profile = Profile::builtin_default().unwrap();
        let plan = build_plan(&profile, &facts(&home, &home, 1234)).unwrap();
        let path = home.join(".bashrc");
        assert!(plan.mounts.contains(&MountOp::ReadOnlyInPlace { path }));
    }
}
