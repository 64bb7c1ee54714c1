//! After the run: the profile files that confined it, where the run could write them, still
//! hold what was read at launch. They were read-only and pinned inside, so a difference means
//! the floor did not hold (or a degraded host could not pin them): tampering either way.

use crate::profile::{MAX_PROFILE_BYTES, Profile};
use crate::supervisor::way_out::sweep::Finding;
use sha2::{Digest, Sha256};
use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The profile files under `writable_roots` whose content is not what was read at launch.
pub fn changed_profile_files(profile: &Profile, writable_roots: &[PathBuf]) -> Vec<Finding> {
    changed_files(&profile.files, writable_roots, "profile")
}

/// The runbook file (`--runbook`), when under `writable_roots` and not what was read at launch.
pub fn changed_runbook_file(
    file: &crate::profile::ProfileSource,
    writable_roots: &[PathBuf],
) -> Vec<Finding> {
    changed_files(std::slice::from_ref(file), writable_roots, "runbook")
}

fn changed_files(
    files: &[crate::profile::ProfileSource],
    writable_roots: &[PathBuf],
    what: &'static str,
) -> Vec<Finding> {
    files
        .iter()
        .filter(|f| writable_roots.iter().any(|r| f.path.starts_with(r)))
        .filter_map(|f| {
            let now = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(&f.path)
                .and_then(|file| {
                    if !file.metadata()?.is_file() {
                        return Err(std::io::Error::other("no longer a regular file"));
                    }
                    let mut bytes = Vec::new();
                    // One byte more than a profile may have: a file grown past the cap
                    // hashes differently from the one read at launch.
                    file.take(MAX_PROFILE_BYTES + 1).read_to_end(&mut bytes)?;
                    Ok(hex::encode(Sha256::digest(&bytes)))
                });
            let runbook = what == "runbook";
            let (change, error) = match now {
                Ok(hash) if hash == f.sha256 => return None,
                Ok(_) if runbook => ("runbook-changed", None),
                Ok(_) => ("profile-changed", None),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && runbook => {
                    ("runbook-removed", None)
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => ("profile-removed", None),
                Err(e) if runbook => ("runbook-replaced", Some(e.to_string())),
                Err(e) => ("profile-replaced", Some(e.to_string())),
            };
            Some(Finding {
                path: f.path.clone(),
                change,
                quarantined_to: None,
                entries: Vec::new(),
                error,
                detail: Some(if runbook {
                    "the runbook this run followed (read-only inside)".into()
                } else {
                    "a file of the profile that confined this run (read-only inside)".into()
                }),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_changed_replaced_or_removed_profile_file_is_a_finding() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        fs::write(
            ws.join("base.toml"),
            "name = \"base\"\nextends = \"default\"\n",
        )
        .unwrap();
        fs::write(ws.join("p.toml"), "name = \"p\"\nextends = \"base.toml\"\n").unwrap();
        let profile = Profile::load(Some(&ws.join("p.toml"))).unwrap();
        assert_eq!(profile.files.len(), 2);
        let roots = vec![ws.clone()];
        assert!(changed_profile_files(&profile, &roots).is_empty());
        // Outside the writable roots nothing is checked (the host's own edits).
        fs::write(ws.join("p.toml"), "name = \"p\"\n").unwrap();
        assert!(changed_profile_files(&profile, &[]).is_empty());
        fs::remove_file(ws.join("base.toml")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", ws.join("base.toml")).unwrap();
        let mut changes: Vec<_> = changed_profile_files(&profile, &roots)
            .into_iter()
            .map(|f| (f.path.file_name().unwrap().to_owned(), f.change))
            .collect();
        changes.sort();
        assert_eq!(
            changes,
            [
                ("base.toml".into(), "profile-replaced"),
                ("p.toml".into(), "profile-changed")
            ]
        );
        fs::remove_file(ws.join("p.toml")).unwrap();
        assert!(
            changed_profile_files(&profile, &roots)
                .iter()
                .any(|f| f.change == "profile-removed")
        );
    }
}
