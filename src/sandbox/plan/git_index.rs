//! Which paths a repository tracks, read from its index file (`.git/index`, formats 2 to 4)
//! without running git: the launch must not run the host's git in a checkout an earlier run
//! could have configured. Used to tell a tracked `.env` (hiding it would look like a deletion to
//! git inside) from one that only lives in the checkout.

use std::collections::BTreeSet;
use std::path::Path;

/// An index larger than this is not read (the launch path stays bounded).
const INDEX_READ_LIMIT: u64 = 256 << 20;

/// The paths (relative to the repository, as bytes) in an index file.
pub fn tracked_paths(index: &[u8], hash_len: usize) -> Result<BTreeSet<Vec<u8>>, String> {
    let u32_at = |at: usize| -> Result<u32, String> {
        index
            .get(at..at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| "the index ends early".to_string())
    };
    if index.get(..4) != Some(b"DIRC") {
        return Err("not a git index (no DIRC signature)".into());
    }
    let version = u32_at(4)?;
    if !(2..=4).contains(&version) {
        return Err(format!("index version {version} is not one git writes"));
    }
    let count = u32_at(8)? as usize;
    let mut at = 12;
    let mut paths = BTreeSet::new();
    let mut previous: Vec<u8> = Vec::new();
    // Stat data (40 bytes), the object id, then 16 bits of flags.
    let fixed = 40 + hash_len + 2;
    for _ in 0..count {
        let start = at;
        let flags_at = start + fixed - 2;
        let flags = index
            .get(flags_at..flags_at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or("the index ends early")?;
        at = start + fixed;
        if flags & 0x4000 != 0 {
            if version < 3 {
                return Err("an extended entry in a version 2 index".into());
            }
            at += 2;
        }
        let name = if version == 4 {
            // The name is the previous one minus N bytes at its end, plus a NUL-terminated suffix.
            let (strip, used) = offset_varint(index.get(at..).ok_or("the index ends early")?)?;
            at += used;
            let rest = index.get(at..).ok_or("the index ends early")?;
            let end = rest
                .iter()
                .position(|&c| c == 0)
                .ok_or("a name is not terminated")?;
            let keep = previous
                .len()
                .checked_sub(strip)
                .ok_or("a name strips more than the previous one has")?;
            let mut name = previous[..keep].to_vec();
            name.extend_from_slice(&rest[..end]);
            at += end + 1;
            name
        } else {
            let rest = index.get(at..).ok_or("the index ends early")?;
            let end = rest
                .iter()
                .position(|&c| c == 0)
                .ok_or("a name is not terminated")?;
            let name = rest[..end].to_vec();
            // Padded with 1 to 8 NULs to a multiple of 8 bytes from the entry's start.
            at = start + ((at - start + end + 8) & !7);
            name
        };
        previous.clone_from(&name);
        paths.insert(name);
    }
    Ok(paths)
}

/// Git's varint of the index (and pack) offsets: big-endian groups of 7 bits, each continuation
/// adding one.
fn offset_varint(bytes: &[u8]) -> Result<(usize, usize), String> {
    let mut used = 0;
    let mut next = || {
        let c = *bytes.get(used).ok_or("the index ends early")?;
        used += 1;
        Ok::<u8, String>(c)
    };
    let mut c = next()?;
    let mut value = usize::from(c & 0x7f);
    while c & 0x80 != 0 {
        c = next()?;
        value = value
            .checked_add(1)
            .and_then(|v| v.checked_mul(128))
            .and_then(|v| v.checked_add(usize::from(c & 0x7f)))
            .ok_or("a varint overflows")?;
    }
    Ok((value, used))
}

/// The paths tracked by the repository whose git directory is `git_dir`, or why they cannot be
/// told (no index yet means nothing is tracked).
pub fn tracked_in(git_dir: &Path) -> Result<BTreeSet<Vec<u8>>, String> {
    use std::io::Read;
    let path = git_dir.join("index");
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    let mut bytes = Vec::new();
    file.take(INDEX_READ_LIMIT)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading {}: {e}", path.display()))?;
    let config = std::fs::read_to_string(git_dir.join("config")).unwrap_or_default();
    let sha256 = config.lines().any(|l| {
        let l = l.trim().to_ascii_lowercase();
        l.starts_with("objectformat") && l.ends_with("sha256")
    });
    tracked_paths(&bytes, if sha256 { 32 } else { 20 })
        .map_err(|e| format!("reading {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) {
        let status = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    }

    /// Real indexes written by the installed git, in every format it writes.
    #[test]
    fn reads_what_git_writes() {
        for version in ["2", "3", "4"] {
            let repo = tempfile::tempdir().unwrap();
            let r = repo.path();
            git(r, &["init", "-q"]);
            git(r, &["config", "index.version", version]);
            std::fs::create_dir_all(r.join("deeply/nested/dir")).unwrap();
            for f in [
                ".env",
                "deeply/nested/dir/.env.production",
                "a-much-longer-name-than-the-rest.txt",
                "b",
            ] {
                std::fs::write(r.join(f), "x").unwrap();
            }
            std::fs::write(r.join("untracked.env"), "x").unwrap();
            git(
                r,
                &[
                    "add",
                    ".env",
                    "deeply",
                    "a-much-longer-name-than-the-rest.txt",
                    "b",
                ],
            );
            if version == "3" {
                // An extended flag (intent-to-add) makes git write a version 3 entry.
                std::fs::write(r.join("later"), "x").unwrap();
                git(r, &["add", "-N", "later"]);
            }
            let tracked = tracked_in(&r.join(".git")).unwrap();
            let mut expected: Vec<&[u8]> = vec![
                b".env",
                b"a-much-longer-name-than-the-rest.txt",
                b"b",
                b"deeply/nested/dir/.env.production",
            ];
            if version == "3" {
                expected.push(b"later");
            }
            let got: Vec<&[u8]> = tracked.iter().map(Vec::as_slice).collect();
            assert_eq!(got, expected, "index version {version}");
        }
    }

    #[test]
    fn refuses_what_is_not_an_index() {
        assert!(tracked_paths(b"", 20).is_err());
        assert!(tracked_paths(b"DIRC\0\0\0\x09\0\0\0\0", 20).is_err());
        // Two entries promised, none there.
        assert!(tracked_paths(b"DIRC\0\0\0\x02\0\0\0\x02", 20).is_err());
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(tracked_in(empty.path()), Ok(BTreeSet::new()));
    }
}
