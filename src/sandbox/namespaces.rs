//! User namespace id maps, written by the supervisor from outside (the only side allowed to map
//! ids other than its own), and the user namespace that idmapped mounts borrow their mapping from.

use crate::sandbox::plan::{Identity, IdentityMode};
use crate::sys;
use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}{hint}")]
pub struct NamespaceError {
    pub step: &'static str,
    pub path: PathBuf,
    pub source: io::Error,
    pub hint: &'static str,
}

pub const USERNS_HINT: &str = " (unprivileged user namespaces may be disabled: check `sysctl user.max_user_namespaces`, `kernel.unprivileged_userns_clone`, or Ubuntu's `kernel.apparmor_restrict_unprivileged_userns`; run `stepproof doctor`)";

fn write_proc(
    pid: i32,
    file: &str,
    contents: &str,
    step: &'static str,
) -> Result<(), NamespaceError> {
    let path = PathBuf::from(format!("/proc/{pid}/{file}"));
    fs::write(&path, contents).map_err(|source| NamespaceError {
        step,
        path,
        source,
        hint: "",
    })
}

/// Writes the child's uid and gid maps. A caller that is not root can only map itself and must
/// first give up `setgroups` in the child (the kernel's rule for unprivileged gid maps).
pub fn write_id_maps(child: i32, identity: &Identity) -> Result<(), NamespaceError> {
    if identity.mode == IdentityMode::Caller {
        write_proc(child, "setgroups", "deny", "denying setgroups in")?;
    }
    write_proc(
        child,
        "uid_map",
        &format!("{} {} 1\n", identity.inside_uid, identity.outside_uid),
        "writing the uid map",
    )?;
    write_proc(
        child,
        "gid_map",
        &format!("{} {} 1\n", identity.inside_gid, identity.outside_gid),
        "writing the gid map",
    )
}

/// A user namespace whose only mapping is host root → `outside_id`: given to an idmapped mount,
/// it makes root's files appear as the sandbox user's, and files the sandbox user creates land
/// on disk as root's. Its holder process is released at once and never waited for here (it is
/// reaped when the supervisor exits): waiting cost a scheduling round trip on every launch.
pub fn root_to_sandbox_userns(outside_id: u32) -> Result<OwnedFd, NamespaceError> {
    with_new_user_namespace(|child| {
        for file in ["uid_map", "gid_map"] {
            write_proc(
                child,
                file,
                &format!("0 {outside_id} 1\n"),
                "writing the id map",
            )?;
        }
        let path = PathBuf::from(format!("/proc/{child}/ns/user"));
        File::open(&path)
            .map(OwnedFd::from)
            .map_err(|source| NamespaceError {
                step: "opening",
                path,
                source,
                hint: "",
            })
    })?
}

/// Whether this process may create a user namespace at all (asked only by profiles that allow
/// the Landlock + seccomp-only mode). Costs one CLONE_VM child that is never waited for.
pub fn user_namespaces_available() -> bool {
    with_new_user_namespace(|_| ()).is_ok()
}

/// Runs `use_it` with the pid of a CLONE_VM child holding a new user namespace, then releases
/// the child. It is never waited for (it exits within microseconds and is reaped with the
/// supervisor); its stack is never freed for that reason.
fn with_new_user_namespace<T>(use_it: impl FnOnce(i32) -> T) -> Result<T, NamespaceError> {
    let fail = |step, source| NamespaceError {
        step,
        path: "a new user namespace".into(),
        source,
        hint: USERNS_HINT,
    };
    let (release_read, release_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(|e| fail("creating a pipe for", e.into()))?;
    let holder =
        sys::spawn_user_namespace_holder(&release_read).map_err(|e| fail("creating", e))?;
    let result = use_it(holder);
    // A byte, not end-of-file: the holder has its own copy of the write end (it shares our
    // memory, not our descriptor table).
    let _ = nix::unistd::write(&release_write, b"x");
    Ok(result)
}
