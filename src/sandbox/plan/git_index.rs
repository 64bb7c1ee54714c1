//! Git's index file (`.git/index`, formats 2 to 4), read without running git: the launch must
//! not run the host's git in a checkout an earlier run could have configured. Used to tell a
//! tracked `.env` (hiding it would look like a deletion to git inside) from one that only lives
//! in the checkout, and by the sweep to find the entries whose flags make git stop looking at a
//! file (`assume-valid`, `skip-worktree`) and the extensions that make it trust a cache (see
//! `supervisor::way_out::sweep`).

use std::collections::BTreeSet;
use std::path::Path;

/// An index larger than this is not read (the launch path stays bounded).
pub const INDEX_READ_LIMIT: u64 = 256 << 20;

/// In an entry's 16-bit flags: git trusts the entry's file as unchanged without looking at it
/// (`git update-index --assume-unchanged`, `core.ignoreStat`).
pub const ASSUME_VALID: u16 = 0x8000;
/// In an entry's 16-bit flags: 16 more bits of flags follow (index version 3 and later).
pub const EXTENDED: u16 = 0x4000;
/// In an entry's 16-bit flags: the length of its name (all ones: as long as it is, up to its NUL).
const NAME_MASK: u16 = 0x0fff;
/// In an entry's extended flags: git neither reads nor writes the entry's file (sparse
/// checkouts, `git update-index --skip-worktree`).
pub const SKIP_WORKTREE: u16 = 0x4000;

/// One entry of an index, as [`for_each_entry`] shows it.
#[derive(Debug)]
pub struct Entry<'a> {
    /// Its path, relative to the repository (bytes).
    pub name: &'a [u8],
    /// Its mode (`0o040000` for a directory of a sparse index).
    pub mode: u32,
    /// Where its 16-bit flags are in the index, and what they are.
    pub flags_at: usize,
    pub flags: u16,
    /// Where its extended flags are, and what they are (version 3 and later, when
    /// [`EXTENDED`] is set).
    pub extended: Option<(usize, u16)>,
}

/// One extension after the entries: its signature (`TREE`, `UNTR`, `FSMN`, `link`, …) and where
/// it is, its 8-byte header included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    pub signature: [u8; 4],
    pub start: usize,
    pub end: usize,
}

/// How an index is laid out: its version, where its entries end and its extensions are, and
/// where its trailing checksum starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    pub version: u32,
    pub entries: usize,
    pub entries_end: usize,
    pub extensions: Vec<Extension>,
    pub checksum_at: usize,
}

/// Every entry of an index (object ids of `hash_len` bytes), in order, to `visit`; then the
/// extensions. An index that is not what git writes is an error (nothing is guessed).
pub fn for_each_entry(
    index: &[u8],
    hash_len: usize,
    mut visit: impl FnMut(&Entry<'_>),
) -> Result<Layout, String> {
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
    let mut previous: Vec<u8> = Vec::new();
    // Stat data (40 bytes: the mode at 24), the object id, then 16 bits of flags.
    let fixed = 40 + hash_len + 2;
    for _ in 0..count {
        let start = at;
        let flags_at = start + fixed - 2;
        let flags = index
            .get(flags_at..flags_at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or("the index ends early")?;
        let mode = u32_at(start + 24)?;
        at = start + fixed;
        let mut extended = None;
        if flags & EXTENDED != 0 {
            if version < 3 {
                return Err("an extended entry in a version 2 index".into());
            }
            let bits = index
                .get(at..at + 2)
                .map(|b| u16::from_be_bytes([b[0], b[1]]))
                .ok_or("the index ends early")?;
            extended = Some((at, bits));
            at += 2;
        }
        // The name's length is in the flags (git reads that many bytes), or, when it does not
        // fit in 12 bits, up to its NUL.
        let flagged_len = usize::from(flags & NAME_MASK);
        if version == 4 {
            // The name is the previous one minus N bytes at its end, plus a NUL-terminated suffix.
            let (strip, used) = offset_varint(index.get(at..).ok_or("the index ends early")?)?;
            at += used;
            let keep = previous
                .len()
                .checked_sub(strip)
                .ok_or("a name strips more than the previous one has")?;
            let rest = index.get(at..).ok_or("the index ends early")?;
            let suffix = if flagged_len == usize::from(NAME_MASK) {
                memchr::memchr(0, rest).ok_or("a name is not terminated")?
            } else {
                flagged_len
                    .checked_sub(keep)
                    .ok_or("a name is shorter than the part it keeps")?
            };
            let suffix_bytes = rest.get(..suffix).ok_or("the index ends early")?;
            previous.truncate(keep);
            previous.extend_from_slice(suffix_bytes);
            at += suffix + 1;
            visit(&Entry {
                name: &previous,
                mode,
                flags_at,
                flags,
                extended,
            });
        } else {
            let rest = index.get(at..).ok_or("the index ends early")?;
            let end = if flagged_len == usize::from(NAME_MASK) {
                memchr::memchr(0, rest).ok_or("a name is not terminated")?
            } else {
                flagged_len
            };
            visit(&Entry {
                name: rest.get(..end).ok_or("the index ends early")?,
                mode,
                flags_at,
                flags,
                extended,
            });
            // Padded with 1 to 8 NULs to a multiple of 8 bytes from the entry's start.
            at = start + ((at - start + end + 8) & !7);
        }
    }
    let entries_end = at;
    let checksum_at = index
        .len()
        .checked_sub(hash_len)
        .filter(|&c| c >= entries_end)
        .ok_or("the index ends early")?;
    let mut extensions = Vec::new();
    // As git reads them: while an extension's header fits (fewer bytes left are ignored).
    while at + 8 <= checksum_at {
        let signature: [u8; 4] = index[at..at + 4].try_into().expect("4 bytes");
        let size = u32_at(at + 4)? as usize;
        let end = (at + 8)
            .checked_add(size)
            .filter(|&end| end <= checksum_at)
            .ok_or("an extension is longer than the index")?;
        extensions.push(Extension {
            signature,
            start: at,
            end,
        });
        at = end;
    }
    Ok(Layout {
        version,
        entries: count,
        entries_end,
        extensions,
        checksum_at,
    })
}

/// The paths (relative to the repository, as bytes) in an index file.
pub fn tracked_paths(index: &[u8], hash_len: usize) -> Result<BTreeSet<Vec<u8>>, String> {
    let mut paths = BTreeSet::new();
    for_each_entry(index, hash_len, |entry| {
        paths.insert(entry.name.to_vec());
    })?;
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
            .stdout(std::process::Stdio::null())
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

    /// The flags git sets (`--assume-unchanged`, `--skip-worktree`) and the extensions it
    /// writes (the untracked cache), found in every format it writes.
    #[test]
    fn finds_the_flags_and_extensions_git_writes() {
        for version in ["2", "3", "4"] {
            let repo = tempfile::tempdir().unwrap();
            let r = repo.path();
            git(r, &["init", "-q"]);
            git(r, &["config", "index.version", version]);
            for f in ["a", "b", "c", "dir/d"] {
                std::fs::create_dir_all(r.join(f).parent().unwrap()).unwrap();
                std::fs::write(r.join(f), "x").unwrap();
            }
            git(r, &["add", "."]);
            git(r, &["update-index", "--assume-unchanged", "a"]);
            git(r, &["update-index", "--skip-worktree", "dir/d"]);
            git(r, &["update-index", "--untracked-cache"]);
            git(r, &["status", "--short"]);
            let bytes = std::fs::read(r.join(".git/index")).unwrap();
            let mut seen = Vec::new();
            let layout = for_each_entry(&bytes, 20, |e| {
                let skip = e.extended.is_some_and(|(_, x)| x & SKIP_WORKTREE != 0);
                seen.push((
                    String::from_utf8_lossy(e.name).into_owned(),
                    e.flags & ASSUME_VALID != 0,
                    skip,
                ));
                assert_eq!(&bytes[e.flags_at..e.flags_at + 2], &e.flags.to_be_bytes());
            })
            .unwrap();
            let expected: Vec<(String, bool, bool)> = [
                ("a", true, false),
                ("b", false, false),
                ("c", false, false),
                ("dir/d", false, true),
            ]
            .iter()
            .map(|&(n, a, s)| (n.to_string(), a, s))
            .collect();
            assert_eq!(seen, expected, "index version {version}");
            // A skip-worktree entry makes git write version 3 at least.
            assert_eq!(layout.version, version.parse::<u32>().unwrap().max(3));
            assert_eq!(layout.checksum_at, bytes.len() - 20);
            assert!(
                layout.extensions.iter().any(|x| &x.signature == b"UNTR"),
                "{layout:?}"
            );
            assert_eq!(layout.extensions.last().unwrap().end, layout.checksum_at);
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
