//! Executes the plan's mount list inside the new mount namespace, in bubblewrap's order:
//! private propagation → a staging tmpfs as root (the old root kept at /oldroot for sources) →
//! the new root on tmpfs → each mount op → detach the old root → pivot into the new root.

use crate::sandbox::plan::{Access, MountOp, SandboxPlan};
use crate::sys::{self, MountFlags};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use std::collections::VecDeque;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}{hint}")]
pub struct MountError {
    pub step: String,
    pub path: PathBuf,
    pub source: io::Error,
    pub hint: &'static str,
}

fn err(step: impl Into<String>, path: &Path) -> impl FnOnce(io::Error) -> MountError {
    let step = step.into();
    let path = path.to_path_buf();
    move |source| MountError {
        step,
        path,
        source,
        hint: "",
    }
}

fn nix_err(step: impl Into<String>, path: &Path) -> impl FnOnce(nix::Error) -> MountError {
    let f = err(step, path);
    move |e| f(io::Error::from(e))
}

const STAGING: &str = "/tmp";
const OLD_ROOT: &str = "/oldroot";
const NEW_ROOT: &str = "/newroot";
const HIDDEN_FILE: &str = "/hidden-file";

/// The detached idmapped trees the supervisor prepared, in the order of the plan's
/// `IdmappedBind` ops.
pub type IdmappedTrees = VecDeque<OwnedFd>;

/// Detached trees the supervisor cloned for the plan's `FromSupervisor` ops when invoked as root,
/// in order (empty for a normal caller, whose own paths the init can bind directly).
pub type SupervisorPaths = VecDeque<OwnedFd>;

/// Builds the whole view and pivots into it. Runs in the sandbox init, with capabilities in the
/// new user namespace, before anything of the command's runs.
pub fn build_view(
    plan: &SandboxPlan,
    mut idmapped: IdmappedTrees,
    mut handed: SupervisorPaths,
    trust: &[(PathBuf, String)],
) -> Result<(), MountError> {
    // No mount or unmount here may propagate back to the host.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(nix_err("making mounts private at", Path::new("/")))?;
    enter_staging_root()?;
    mount(
        Some("tmpfs"),
        NEW_ROOT,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755"),
    )
    .map_err(nix_err(
        "mounting the new root tmpfs at",
        Path::new(NEW_ROOT),
    ))?;
    fs::write(HIDDEN_FILE, b"").map_err(err("creating", Path::new(HIDDEN_FILE)))?;
    fs::set_permissions(HIDDEN_FILE, fs::Permissions::from_mode(0o000))
        .map_err(err("chmod", Path::new(HIDDEN_FILE)))?;

    for (index, op) in plan.mounts.iter().enumerate() {
        apply(op, index, &mut idmapped, &mut handed, trust)?;
    }

    // The old root is no longer needed: detach it so nothing inside can reach the host tree.
    umount2(OLD_ROOT, MntFlags::MNT_DETACH)
        .map_err(nix_err("detaching the old root", Path::new(OLD_ROOT)))?;
    std::env::set_current_dir(NEW_ROOT).map_err(err("chdir", Path::new(NEW_ROOT)))?;
    sys::pivot_root(Path::new("."), Path::new("."))
        .map_err(err("pivot_root into", Path::new(NEW_ROOT)))?;
    umount2(".", MntFlags::MNT_DETACH)
        .map_err(nix_err("detaching the staging root", Path::new("/")))?;
    std::env::set_current_dir("/").map_err(err("chdir", Path::new("/")))?;
    Ok(())
}

/// A fresh read-only tmpfs at `target` holding exactly `files` (paths relative to it).
fn generated(target: &Path, files: &[(PathBuf, String)]) -> Result<(), MountError> {
    // Each file rounds up to whole pages.
    let bytes: usize = files.iter().map(|(_, c)| c.len() + 4096).sum();
    let size_mib = bytes / (1 << 20) + 1;
    tmpfs(
        target,
        &format!("mode=755,size={size_mib}m"),
        MsFlags::empty(),
    )?;
    for (index, (rel, contents)) in files.iter().enumerate() {
        // Names StepProof chose: relative, no `..` (the tmpfs is fresh, nothing in it
        // is a link).
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return Err(err(format!("generating {} under", rel.display()), target)(
                io::Error::from(io::ErrorKind::InvalidInput),
            ));
        }
        let path = target.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(err("creating", parent))?;
        }
        // A file with the contents of an earlier one is a second name of it: the trust files
        // are both the whole system bundle where `NODE_EXTRA_CA_CERTS` names it (a common
        // set-up), and writing 220 KB twice was the init's slowest step.
        if let Some((same, _)) = files[..index].iter().find(|(_, c)| c == contents) {
            let first = target.join(same);
            fs::hard_link(&first, &path).map_err(err("linking", &path))?;
            continue;
        }
        fs::write(&path, contents).map_err(err("writing", &path))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
            .map_err(err("chmod", &path))?;
    }
    restrict(target, true, true)
}

/// A tmpfs becomes the root, with the host's root at /oldroot: every source is then read from
/// /oldroot, so no source can be shadowed by a mount made for the new view.
fn enter_staging_root() -> Result<(), MountError> {
    let staging = Path::new(STAGING);
    mount(
        Some("tmpfs"),
        staging,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some("mode=0755,size=16m"),
    )
    .map_err(nix_err("mounting the staging tmpfs at", staging))?;
    std::env::set_current_dir(staging).map_err(err("chdir", staging))?;
    for dir in ["newroot", "oldroot"] {
        fs::create_dir(dir).map_err(err("creating", &staging.join(dir)))?;
    }
    sys::pivot_root(Path::new("."), Path::new("oldroot"))
        .map_err(err("pivot_root into", staging))?;
    std::env::set_current_dir("/").map_err(err("chdir", Path::new("/")))
}

fn outside(path: &Path) -> PathBuf {
    Path::new(OLD_ROOT).join(path.strip_prefix("/").unwrap_or(path))
}

fn inside(path: &Path) -> PathBuf {
    Path::new(NEW_ROOT).join(path.strip_prefix("/").unwrap_or(path))
}

/// Creates the mount point: a directory, or an empty file when the source is not a directory.
fn ensure_mount_point(target: &Path, directory: bool) -> Result<(), MountError> {
    create_unless_present(target, "creating mount point", || {
        if directory {
            fs::create_dir(target)
        } else {
            // O_EXCL: an existing entry, a symlink included, is an error, never opened.
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(target)
                .map(drop)
        }
    })
}

/// Runs `create` for `path`, creating missing parents once if it needs them. Anything already at
/// `path` (of any kind, a symlink included: never followed) is left as it is. Creating first and
/// looking only on failure saves a `stat` per entry: in the fresh new root nearly every one is
/// new.
fn create_unless_present(
    path: &Path,
    step: &str,
    create: impl Fn() -> io::Result<()>,
) -> Result<(), MountError> {
    let mut result = create();
    if matches!(&result, Err(e) if e.kind() == io::ErrorKind::NotFound)
        && let Some(parent) = path.parent()
    {
        fs::create_dir_all(parent).map_err(err(step, parent))?;
        result = create();
    }
    match result {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(err(step, path)(e)),
        _ => Ok(()),
    }
}

fn bind(source: &Path, target: &Path, step: &str) -> Result<(), MountError> {
    let directory = source.is_dir();
    ensure_mount_point(target, directory)?;
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(nix_err(format!("{step} {} onto", source.display()), target))
}

fn restrict(target: &Path, read_only: bool, nodev: bool) -> Result<(), MountError> {
    let flags = MountFlags {
        read_only,
        nosuid: true,
        nodev,
    };
    sys::mount_setattr(target, true, flags).map_err(err("restricting the mount", target))
}

fn tmpfs(target: &Path, options: &str, flags: MsFlags) -> Result<(), MountError> {
    ensure_mount_point(target, true)?;
    mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        flags | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options),
    )
    .map_err(nix_err("mounting tmpfs at", target))
}

/// An overlay over `dst` as the view shows it (the lower layer, made read-only first), with
/// its upper layer on a private tmpfs in the staging root: once the staging root is detached,
/// only the overlay holds that tmpfs, and it ends with the sandbox's mount namespace. The layers
/// are reached through short staging paths of ours, so no workspace name (a comma, a colon)
/// ever enters the option string.
fn scratch_overlay(dst: &Path, size_mib: u64, index: usize) -> Result<(), MountError> {
    let target = inside(dst);
    restrict(&target, true, true)?;
    let lower = PathBuf::from(format!("/scratch-lower-{index}"));
    bind(&target, &lower, "binding the overlay's lower layer")?;
    restrict(&lower, true, true)?;
    let scratch = PathBuf::from(format!("/scratch-{index}"));
    tmpfs(
        &scratch,
        &format!("mode=700,size={size_mib}m"),
        MsFlags::empty(),
    )?;
    let (upper, work) = (scratch.join("upper"), scratch.join("work"));
    for dir in [&upper, &work] {
        fs::create_dir(dir).map_err(err("creating", dir))?;
    }
    // The overlay's root takes the upper directory's mode: the workspace's own.
    let mode = fs::metadata(&lower)
        .map_err(err("reading the mode of", dst))?
        .permissions()
        .mode();
    fs::set_permissions(&upper, fs::Permissions::from_mode(mode & 0o7777))
        .map_err(err("chmod", &upper))?;
    overlay(
        &target,
        [&lower, &upper, &work],
        "the workspace's overlay",
        " (filesystem.workspace = \"overlay\" needs overlayfs in a user namespace with a tmpfs upper layer, Linux 6.6 or later, over a workspace overlayfs can stack on: not one already two overlays deep; `stepproof doctor` tries it; use \"read-only\" here)",
    )
}

/// Mounts an overlay at `target` from its lower, upper and work directories. `userxattr`: in a
/// user namespace overlayfs keeps its whiteouts and opaque directories in `user.overlay.*` (the
/// trusted namespace needs the host's CAP_SYS_ADMIN; the end of a git layer reads them there).
fn overlay(
    target: &Path,
    [lower, upper, work]: [&Path; 3],
    what: &str,
    hint: &'static str,
) -> Result<(), MountError> {
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        lower.display(),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        target,
        Some("overlay"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| MountError {
        step: format!("mounting {what} ({options}) at"),
        path: target.to_path_buf(),
        source: e.into(),
        hint,
    })
}

/// A repository's `.git` seen through an overlay whose upper layer is the run's `layer`
/// (`upper/` and `work/`, in the run directory, outside the sandbox): what the run writes in
/// `.git` lands there, never in the host's `.git`, until the end judges it. The host's `.git`,
/// as the view shows it, is the read-only lower layer; the object stores in `through` are bound
/// back over the overlay writable (straight to the host's store).
fn git_layer(
    git: &Path,
    layer: &Path,
    through: &[PathBuf],
    index: usize,
    handed: &mut SupervisorPaths,
) -> Result<(), MountError> {
    let target = inside(git);
    let kept: Vec<(PathBuf, PathBuf)> = through
        .iter()
        .enumerate()
        .map(|(k, rel)| {
            (
                target.join(rel),
                PathBuf::from(format!("/git-through-{index}-{k}")),
            )
        })
        .collect();
    for (dir, staged) in &kept {
        bind(dir, staged, "keeping the object store")?;
    }
    let lower = PathBuf::from(format!("/git-lower-{index}"));
    bind(&target, &lower, "binding the git layer's lower layer")?;
    restrict(&lower, true, true)?;
    let staged = PathBuf::from(format!("/git-layer-{index}"));
    match handed.pop_front() {
        // Invoked as root: a detached copy the supervisor cloned (the run directory is root's).
        Some(tree) => {
            ensure_mount_point(&staged, true)?;
            sys::move_mount_to(&tree, &staged)
                .map_err(err(format!("attaching {} at", layer.display()), &staged))?;
        }
        None => bind(&outside(layer), &staged, "binding the git layer")?,
    }
    let (upper, work) = (staged.join("upper"), staged.join("work"));
    overlay(
        &target,
        [&lower, &upper, &work],
        "the git layer",
        " (a writable workspace's repositories are seen through an overlay whose upper layer is in the run directory: that needs overlayfs in a user namespace, Linux 6.6 or later, a run directory on a file system with user extended attributes — ext4, xfs, btrfs, tmpfs — and a workspace overlayfs can stack on; `stepproof doctor` tries it)",
    )?;
    for (dir, staged) in &kept {
        bind(staged, dir, "writing through the object store")?;
        restrict(dir, false, true)?;
    }
    Ok(())
}

fn apply(
    op: &MountOp,
    index: usize,
    idmapped: &mut IdmappedTrees,
    handed: &mut SupervisorPaths,
    trust: &[(PathBuf, String)],
) -> Result<(), MountError> {
    tracing::debug!(%op, "mount");
    match op {
        MountOp::Bind { src, dst, access } => {
            let target = inside(dst);
            bind(&outside(src), &target, "binding")?;
            restrict(&target, *access == Access::ReadOnly, true)
        }
        MountOp::IdmappedBind { dst, .. } => {
            let target = inside(dst);
            let tree = idmapped.pop_front().ok_or_else(|| MountError {
                step: "attaching idmapped mount (none prepared)".into(),
                path: dst.clone(),
                source: io::Error::from(io::ErrorKind::NotFound),
                hint: "",
            })?;
            // A file (`~/.gitconfig` of an allow-listed home) needs a file to be mounted on.
            let directory =
                sys::beneath::stat_fd(std::os::fd::AsFd::as_fd(&tree)).is_ok_and(|st| st.is_dir());
            ensure_mount_point(&target, directory)?;
            sys::move_mount_to(&tree, &target)
                .map_err(err("attaching the idmapped mount at", &target))
        }
        MountOp::Tmpfs {
            dst,
            mode,
            size_mib,
        } => {
            let mut options = format!("mode={mode:o}");
            if let Some(size) = size_mib {
                options.push_str(&format!(",size={size}m"));
            }
            tmpfs(&inside(dst), &options, MsFlags::empty())
        }
        MountOp::Proc { dst } => {
            let target = inside(dst);
            ensure_mount_point(&target, true)?;
            let flags =
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY;
            mount(Some("proc"), &target, Some("proc"), flags, None::<&str>).map_err(|e| MountError {
                step: "mounting a fresh /proc at".into(),
                path: target.clone(),
                source: e.into(),
                hint: " (the kernel refuses a new proc when the host's /proc is partly covered, as in some containers)",
            })
        }
        MountOp::Devpts { dst } => {
            let target = inside(dst);
            ensure_mount_point(&target, true)?;
            mount(
                Some("devpts"),
                &target,
                Some("devpts"),
                MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
                Some("newinstance,ptmxmode=0666,mode=620"),
            )
            .map_err(nix_err("mounting devpts at", &target))
        }
        MountOp::DevNode { src, dst } => {
            let target = inside(dst);
            bind(&outside(src), &target, "binding device")?;
            let flags = MountFlags {
                read_only: false,
                nosuid: true,
                nodev: false,
            };
            sys::mount_setattr(&target, false, flags).map_err(err("restricting the mount", &target))
        }
        MountOp::Symlink { target, dst } => {
            let link = inside(dst);
            create_unless_present(&link, "creating symlink", || symlink(target, &link))
        }
        MountOp::HideDir { dst, .. } => tmpfs(
            &inside(dst),
            "mode=000,size=4k,nr_inodes=1",
            MsFlags::MS_RDONLY | MsFlags::MS_NOEXEC,
        ),
        MountOp::HideFile { dst, .. } => {
            let target = inside(dst);
            bind(Path::new(HIDDEN_FILE), &target, "hiding with")?;
            restrict(&target, true, true)
        }
        MountOp::ReadOnlyInPlace { path } => {
            let target = inside(path);
            bind(&target, &target, "re-binding")?;
            restrict(&target, true, true)
        }
        MountOp::PinInPlace { path } => {
            let target = inside(path);
            bind(&target, &target, "pinning")
        }
        MountOp::Overlay { src, dst, files } => {
            let layer = PathBuf::from(format!("/overlay-{index}"));
            for (rel, contents) in files {
                let path = layer.join(rel);
                if let Some(parent) = path.parent() {
                    fs::create_dir_all(parent).map_err(err("creating", parent))?;
                }
                fs::write(&path, contents).map_err(err("writing", &path))?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o644))
                    .map_err(err("chmod", &path))?;
            }
            let target = inside(dst);
            ensure_mount_point(&target, true)?;
            // Two lower layers and no upper one: read-only by construction.
            let options = format!("lowerdir={}:{}", layer.display(), outside(src).display());
            mount(
                Some("overlay"),
                &target,
                Some("overlay"),
                MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(options.as_str()),
            )
            .map_err(nix_err(
                format!("mounting an overlay ({options}) at"),
                &target,
            ))
        }
        MountOp::FromSupervisor { src, dst, access } => {
            let target = inside(dst);
            match handed.pop_front() {
                // Invoked as root: a detached copy the supervisor cloned (the init, already the
                // sandbox user, cannot pass root's private directories to reach the path).
                Some(tree) => {
                    let is_dir = nix::sys::stat::fstat(&tree)
                        .map(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR)
                        .unwrap_or(false);
                    ensure_mount_point(&target, is_dir)?;
                    sys::move_mount_to(&tree, &target)
                        .map_err(err(format!("attaching {} at", src.display()), &target))?;
                }
                // Invoked by a user: the path is the caller's own.
                None => bind(&outside(src), &target, "binding")?,
            }
            restrict(&target, *access == Access::ReadOnly, true)
        }
        MountOp::SealReadOnly { dst } => restrict(&inside(dst), true, true),
        MountOp::ScratchOverlay { dst, size_mib } => scratch_overlay(dst, *size_mib, index),
        MountOp::GitLayer {
            git,
            layer,
            through,
        } => git_layer(git, layer, through, index, handed),
        MountOp::Generated { dst, files } => generated(&inside(dst), files),
        MountOp::TrustFiles { dst } if trust.is_empty() => Err(MountError {
            step: "laying out the run's trust files (the launch made none)".into(),
            path: dst.clone(),
            source: io::Error::from(io::ErrorKind::NotFound),
            hint: "",
        }),
        MountOp::TrustFiles { dst } => generated(&inside(dst), trust),
        MountOp::File { dst, contents } => {
            let staged = PathBuf::from(format!("/generated-{index}"));
            fs::write(&staged, contents).map_err(err("writing", &staged))?;
            fs::set_permissions(&staged, fs::Permissions::from_mode(0o644))
                .map_err(err("chmod", &staged))?;
            let target = inside(dst);
            bind(&staged, &target, "binding generated file")?;
            restrict(&target, true, true)
        }
        MountOp::ReadOnlyRoot => {
            let flags = MountFlags {
                read_only: true,
                nosuid: true,
                nodev: true,
            };
            sys::mount_setattr(Path::new(NEW_ROOT), false, flags)
                .map_err(err("making the new root read-only", Path::new(NEW_ROOT)))
        }
    }
}
