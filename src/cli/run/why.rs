//! What a failed command's outcome means, said to the caller: a command outside the view, a
//! file size limit reached.

use super::*;

/// A command that exists on the host but was not found inside: where it is, and that the
/// sandbox does not show it (the view has the system directories, the workspace, the home
/// read-only and what the profile adds, minus what it hides).
pub(super) fn outside_the_view(
    command: &OsString,
    env: &[(String, String)],
    plan: &crate::sandbox::plan::SandboxPlan,
) -> Option<String> {
    use crate::sandbox::plan::MountOp;
    let name = std::path::Path::new(command);
    let on_host = if name.components().count() > 1 {
        let name = plan.cwd.join(name.strip_prefix("./").unwrap_or(name));
        name.is_file().then_some(name)
    } else {
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_str())?;
        std::env::split_paths(path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    }?;
    let shown = plan.mounts.iter().any(|m| match m {
        MountOp::Bind { dst, .. } | MountOp::IdmappedBind { dst, .. } => on_host.starts_with(dst),
        _ => false,
    });
    let path = crate::audit::text::path(&on_host);
    Some(if shown {
        // In the view: what is missing is what it needs (its `#!` interpreter, a library).
        format!(
            " ({path} is in the sandbox's view; what it needs to start — the interpreter of its `#!` line, a shared library — may not be: `stepproof explain` lists the view)"
        )
    } else {
        format!(
            " ({path} exists on the host but not in the sandbox's view: add its directory to filesystem.read_only in the profile, unless the profile hides it on purpose; `stepproof explain` lists the view)"
        )
    })
}

/// The command died of SIGXFSZ: it wrote past `process.limits.fsize`. (A writer that ignores
/// the signal gets EFBIG instead and says so itself.)
pub(super) fn file_size_limit(outcome: &Outcome, fsize: u64) -> Option<String> {
    let signal = match outcome {
        Outcome::Signaled { signal, .. } => *signal,
        Outcome::TimedOut { command, .. } => match **command {
            Outcome::Signaled { signal, .. } => signal,
            _ => return None,
        },
        _ => return None,
    };
    (signal == libc::SIGXFSZ).then(|| {
        format!(
            "the command was killed by the file size limit ({}): it wrote a file larger than process.limits.fsize",
            crate::supervisor::launch::cgroup::describe_bytes(fsize)
        )
    })
}
