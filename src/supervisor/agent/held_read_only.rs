//! What the plan binds read-only in place — the runbook file and the profile's files where the
//! run could write them, the persistence paths that exist, the config directory's shipped
//! agents and commands — listed for the hook in the notices directory
//! (`stepproof_hook::contract::READ_ONLY_NOTICE`). A write to one fails in the kernel whatever
//! the tool, and Claude Code's Write tool reports it as a raw `EBUSY … rename`; with the list the
//! hook denies it first, in words (`held-read-only`).

use crate::sandbox::plan::{Access, MountOp};
use std::path::{Path, PathBuf};

/// The list's largest size: what the hook reads of it (`MAX_NOTICES_READ`).
const MAX_LISTING_BYTES: usize = 64 << 10;

/// The paths, one a line. A directory below which the plan mounts something writable is left
/// out (a write there may well succeed), as is a path a line cannot hold.
pub fn listing(mounts: &[MountOp]) -> String {
    let writable: Vec<&Path> = mounts.iter().filter_map(writable_dst).collect();
    let mut out = String::new();
    for op in mounts {
        let MountOp::ReadOnlyInPlace { path } = op else {
            continue;
        };
        let Some(text) = path.to_str() else { continue };
        if text.contains('\n')
            || !path.is_absolute()
            || writable.iter().any(|w| w != path && w.starts_with(path))
        {
            continue;
        }
        if out.len() + text.len() + 1 > MAX_LISTING_BYTES {
            break;
        }
        out.push_str(text);
        out.push('\n');
    }
    out
}

fn writable_dst(op: &MountOp) -> Option<&Path> {
    match op {
        MountOp::Bind {
            dst,
            access: Access::ReadWrite,
            ..
        }
        | MountOp::IdmappedBind {
            dst,
            access: Access::ReadWrite,
            ..
        }
        | MountOp::FromSupervisor {
            dst,
            access: Access::ReadWrite,
            ..
        }
        | MountOp::Tmpfs { dst, .. }
        | MountOp::ScratchOverlay { dst, .. } => Some(dst),
        MountOp::PinInPlace { path } => Some(path),
        _ => None,
    }
}

/// Where the list goes in the run directory's notices.
pub fn notice_path(notices: &Path) -> PathBuf {
    notices.join(stepproof_hook::contract::READ_ONLY_NOTICE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_what_is_held_read_only_and_not_what_has_writable_mounts_below() {
        let ro = |p: &str| MountOp::ReadOnlyInPlace { path: p.into() };
        let mounts = vec![
            MountOp::Bind {
                src: "/w".into(),
                dst: "/w".into(),
                access: Access::ReadWrite,
            },
            ro("/w/runbook.toml"),
            ro("/w/.git/hooks"),
            ro("/w/odd\nname"),
            ro("relative"),
            ro("/w/shared"),
            MountOp::Tmpfs {
                dst: "/w/shared/scratch".into(),
                mode: 0o755,
                size_mib: None,
            },
            MountOp::PinInPlace {
                path: "/w/pinned".into(),
            },
        ];
        assert_eq!(listing(&mounts), "/w/runbook.toml\n/w/.git/hooks\n");
    }
}
