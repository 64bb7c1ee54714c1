//! What of the home the sandbox must not show: the profile's secret catalogue where it exists on
//! this host, and the names in `~`, `~/.config` and `~/.local/share` that look like secrets
//! (the catalogue names classes by their usual paths; a scan of the names catches the rest).
//! Everything here runs on the launch path, so it works from directory listings (one per
//! directory, made when first needed) instead of one lookup per catalogue entry.

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The directories of the home whose entries are matched against `hidden_names`.
pub const SCANNED_DIRS: &[&str] = &["", ".config", ".local/share"];

/// Directory listings made on demand: which names a directory has.
#[derive(Default)]
pub(crate) struct Listings {
    dirs: HashMap<PathBuf, Option<HashSet<OsString>>>,
}

impl Listings {
    /// The names in `dir` (`None` when it cannot be listed: absent, not a directory, no access).
    pub(crate) fn names(&mut self, dir: &Path) -> Option<&HashSet<OsString>> {
        self.dirs
            .entry(dir.to_path_buf())
            .or_insert_with(|| {
                fs::read_dir(dir)
                    .ok()
                    .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
            })
            .as_ref()
    }

    /// Whether `path` exists, by the listings of its ancestors from `base` down (each one listed
    /// only if the one above has it). `path` must lie below `base`.
    pub(crate) fn exists_below(&mut self, base: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(base) else {
            return false;
        };
        let mut dir = base.to_path_buf();
        for component in rel.components() {
            let name = component.as_os_str();
            if !self.names(&dir).is_some_and(|names| names.contains(name)) {
                return false;
            }
            dir.push(name);
        }
        true
    }
}

/// `name` matches `pattern`: `*` is any run of characters, `?` one character, letters match in
/// either case. (Hand-written rather than compiled globs: a few dozen patterns against a few
/// hundred names must cost microseconds on the launch path, and there is no syntax beyond these.)
pub fn name_matches(pattern: &str, name: &OsStr) -> bool {
    let (p, n) = (pattern.as_bytes(), name.as_bytes());
    // The classic two-pointer match with one backtrack point (the last `*`).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi].eq_ignore_ascii_case(&n[ni])) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The path to cover for a hidden entry: the entry itself, or where its symlink leads.
pub(crate) fn hide_target(path: &Path) -> Option<PathBuf> {
    let meta = fs::symlink_metadata(path).ok()?;
    if meta.file_type().is_symlink() {
        path.canonicalize().ok()
    } else {
        Some(path.to_path_buf())
    }
}

/// The catalogue entries that exist here (a link is hidden at its target, as the kernel mounts
/// onto what a link names). Most entries are absent on any one host: the listings of the
/// scanned directories (which the name scan reads anyway) rule out nearly all of them by their
/// first names, compared as bytes (hundreds of entries, before every launch); what is left costs
/// one lookup each.
pub(crate) fn existing_catalogue(
    entries: &[crate::profile::PathSpec],
    home: &Path,
    workspace: &Path,
    listings: &mut Listings,
) -> Vec<PathBuf> {
    use crate::profile::PathSpec;
    let config = home.join(".config");
    let share = home.join(".local/share");
    entries
        .iter()
        .filter_map(|spec| {
            if let PathSpec::Home(rel) = spec {
                let bytes = rel.as_os_str().as_bytes();
                let (dir, rest) = if let Some(rest) = bytes.strip_prefix(b".config/") {
                    (&config, rest)
                } else if let Some(rest) = bytes.strip_prefix(b".local/share/") {
                    (&share, rest)
                } else {
                    (&home.to_path_buf(), bytes)
                };
                let first = rest.split(|&c| c == b'/').next().unwrap_or_default();
                let listed = listings
                    .names(dir)
                    .is_some_and(|names| names.contains(OsStr::from_bytes(first)));
                if !listed {
                    return None;
                }
            }
            hide_target(&spec.resolve(home, workspace))
        })
        .collect()
}

/// One name found by the scan: the path and the pattern it matched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CredentialName {
    pub path: PathBuf,
    pub pattern: String,
}

/// Names directly in `~`, `~/.config` and `~/.local/share` that match a pattern, except what
/// must stay visible: `keep` (the workspace and the paths the profile lists), their ancestors,
/// and links whose target is outside the home (a mount would land on the target).
pub(crate) fn credential_names(
    home: &Path,
    patterns: &[String],
    keep: &[PathBuf],
    listings: &mut Listings,
) -> Vec<CredentialName> {
    let mut found = Vec::new();
    if patterns.is_empty() {
        return found;
    }
    for sub in SCANNED_DIRS {
        let dir = if sub.is_empty() {
            home.to_path_buf()
        } else {
            home.join(sub)
        };
        let Some(names) = listings.names(&dir) else {
            continue;
        };
        let mut matched: Vec<(OsString, &String)> = names
            .iter()
            .filter_map(|name| {
                patterns
                    .iter()
                    .find(|p| name_matches(p, name))
                    .map(|p| (name.clone(), p))
            })
            .collect();
        matched.sort();
        for (name, pattern) in matched {
            let path = dir.join(&name);
            if keep.iter().any(|k| k.starts_with(&path)) {
                continue;
            }
            let Some(target) = hide_target(&path) else {
                continue;
            };
            if !target.starts_with(home) || keep.iter().any(|k| k.starts_with(&target)) {
                continue;
            }
            found.push(CredentialName {
                path: target,
                pattern: pattern.clone(),
            });
        }
    }
    found
}

/// A `.env` file as the project keeps it (`.env`, `.env.local`, `.env.production`, …), not a
/// template meant to be committed (`.env.example`, `.env.sample`, `.env.template`, …): the
/// hook's own test (its `env-files` rule). A name that is not UTF-8 is read lossily: the
/// replaced bytes are never a `.` or part of a template word, so the verdict is the bytes'.
pub fn is_env_file(name: &OsStr) -> bool {
    stepproof_hook::pattern::is_env_file(&name.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_names_in_any_case() {
        let m = |p: &str, n: &str| name_matches(p, OsStr::new(n));
        assert!(m("*token*", ".vault-token"));
        assert!(m("*token*", "GITHUB_TOKEN.txt"));
        assert!(m("*history", ".bash_history"));
        assert!(m("id_*", "id_ed25519"));
        assert!(m(".env.*", ".env.local"));
        assert!(m("*.pem", "server.PEM"));
        assert!(m("a?c", "abc"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert!(!m("*.pem", "pem"));
        assert!(!m("id_*", "xid_rsa"));
        assert!(!m("*token*", ".cache"));
        assert!(!m("a?c", "ac"));
        assert!(m("**", ""));
    }

    #[test]
    fn env_files_but_not_templates() {
        for yes in [
            ".env",
            ".env.local",
            ".env.production",
            ".env.development.local",
        ] {
            assert!(is_env_file(OsStr::new(yes)), "{yes}");
        }
        for no in [
            ".env.example",
            ".env.sample",
            ".env.template",
            ".env.local.example",
            ".env.dist",
            ".envrc",
            "env",
            ".env.",
            "x.env",
        ] {
            assert!(!is_env_file(OsStr::new(no)), "{no}");
        }
        // Names that are not UTF-8: judged by their bytes.
        let bytes = |b: &'static [u8]| OsStr::from_bytes(b);
        assert!(is_env_file(bytes(b".env.\xff")));
        assert!(is_env_file(bytes(b".env.prod\xffuction")));
        assert!(!is_env_file(bytes(b".env.\xff.example")));
        assert!(!is_env_file(bytes(b".env\xff")));
    }

    #[test]
    fn scan_keeps_the_workspace_its_ancestors_and_listed_paths() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        for d in [
            "src/token-service/app",
            ".config/gh-token-helper",
            ".config/my-token-tool",
            ".local/share/keyrings",
            "tokens-but-deeper/x",
        ] {
            fs::create_dir_all(h.join(d)).unwrap();
        }
        for f in [
            ".bash_history",
            ".env",
            "notes.txt",
            ".config/api_key",
            "id_ed25519",
        ] {
            fs::write(h.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("/etc/hostname", h.join("linked-secret")).unwrap();
        let patterns: Vec<String> = [
            "*token*",
            "*history",
            ".env",
            "*api_key*",
            "id_*",
            "*keyring*",
            "*secret*",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let keep = vec![
            h.join("src/token-service/app"),
            h.join(".config/my-token-tool"),
        ];
        let mut listings = Listings::default();
        let found = credential_names(h, &patterns, &keep, &mut listings);
        let paths: Vec<PathBuf> = found
            .iter()
            .map(|f| f.path.strip_prefix(h).unwrap().to_path_buf())
            .collect();
        let expected: Vec<PathBuf> = [
            ".bash_history",
            ".env",
            "id_ed25519",
            "tokens-but-deeper",
            ".config/api_key",
            ".config/gh-token-helper",
            ".local/share/keyrings",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(paths, expected);
        assert_eq!(found[0].pattern, "*history");
        // `src` is not a match; the workspace below it is kept anyway; the link leads outside.
        assert!(listings.exists_below(h, &h.join("src/token-service/app")));
        assert!(!listings.exists_below(h, &h.join("src/nothing")));
        // The catalogue: present entries at every depth, absent ones ruled out.
        let catalogue: Vec<PathBuf> = [
            ".bash_history",
            ".config/api_key",
            ".local/share/keyrings",
            "tokens-but-deeper/x",
            ".config/absent/deeper",
            ".absent",
            "src/nothing",
        ]
        .iter()
        .map(|r| h.join(r))
        .collect();
        let specs: Vec<crate::profile::PathSpec> = catalogue
            .iter()
            .map(|p| {
                let rel = p.strip_prefix(h).unwrap().to_str().unwrap();
                crate::profile::PathSpec::parse(&format!("~/{rel}")).unwrap()
            })
            .collect();
        let present = existing_catalogue(&specs, h, h, &mut Listings::default());
        assert_eq!(present, catalogue[..4].to_vec());
    }
}
