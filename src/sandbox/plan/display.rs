//! A mount op in words: one line each, as `stepproof explain` prints the plan.

use super::{Access, HideReason, MountOp};

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
                write!(f, "--   hidden    {} ({reason})", dst.display())
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
            MountOp::GitLayer {
                git,
                layer,
                through,
            } => write!(
                f,
                "rw   git layer {} (what the run writes there waits in {} for the end to judge it; written through: {})",
                git.display(),
                layer.display(),
                if through.is_empty() {
                    "nothing".to_string()
                } else {
                    through
                        .iter()
                        .map(|t| t.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ),
            MountOp::ScratchOverlay { dst, size_mib } => write!(
                f,
                "rw   overlay   {} (writes go to a private tmpfs of {size_mib} MiB, thrown away after the run)",
                dst.display()
            ),
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
            MountOp::TrustFiles { dst } => write!(
                f,
                "ro   generated {} (the run's CA and the bundle that trusts it, made at launch)",
                dst.display()
            ),
            MountOp::ReadOnlyRoot => write!(f, "ro   root      / (rebuilt, read-only)"),
        }
    }
}

impl std::fmt::Display for HideReason {
    /// Why a path is hidden, in the words `explain` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HideReason::Secret => "secret",
            HideReason::CredentialName => "name looks like a secret",
            HideReason::EnvFile => "project .env file",
            HideReason::OtherProject => "other project",
            HideReason::UnixSocket => "unix socket",
            HideReason::EvidenceInput => "not an input of the evidence",
            HideReason::StepProofState => "StepProof's state",
        })
    }
}
