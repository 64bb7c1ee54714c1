//! The git rules: which changes to a repository's git directory, its config and `.gitmodules` stay
//! inert (what `git init`, `git worktree add` and ordinary work write: config keys, sample hooks,
//! submodule paths that stay below).

use super::GIT_CONFIG_READ_LIMIT;
use super::read_regular;
use crate::sys::beneath::{self, DIR_LISTING, Stat};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Component, Path};

/// What in a git directory decides what git runs (and where its common part is).
pub(super) const GIT_DIR_PERSISTENCE: &[&str] =
    &["config", "config.worktree", "commondir", "hooks"];

/// Keys `git init` and ordinary work write to a repository's config; anything else (fsmonitor,
/// hooksPath, sshCommand, pagers, editors, `!` aliases, filters, credential helpers, includes, …)
/// can run code and makes a new config a finding.
const INERT_GIT_CONFIG_KEYS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "extensions.objectformat",
    "init.defaultbranch",
    "user.name",
    "user.email",
];

/// Keys of the subsections `git clone` and `git submodule` write (`[remote "origin"]`,
/// `[branch "main"]`, `[submodule "lib"]`): where to fetch from and what to track. Not
/// `uploadpack`, `receivepack`, `vcs`, `proxy` or `submodule.*.update` (which can name a command).
const INERT_GIT_SUBSECTION_KEYS: &[&str] = &[
    "remote.url",
    "remote.fetch",
    "remote.pushurl",
    "remote.tagopt",
    "branch.remote",
    "branch.merge",
    "branch.rebase",
    "submodule.url",
    "submodule.active",
    "submodule.branch",
];

/// One `section[.subsection].key = value` of a git config file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ConfigEntry {
    section: String,
    subsection: Option<String>,
    key: String,
    value: String,
}

/// The entries of a git config file, or `None` when a line is anything but a plain header
/// (`[section]`, `[section "sub"]`), a `key = value` or a comment: what is not understood is
/// never inert (`[core] key = v` on one line, continuation lines, …).
fn git_config_entries(text: &str) -> Option<Vec<ConfigEntry>> {
    let mut entries = Vec::new();
    let mut section: Option<(String, Option<String>)> = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.ends_with('\\') {
            return None;
        }
        if let Some(header) = line.strip_prefix('[') {
            let header = header.strip_suffix(']')?;
            let (name, sub) = match header.split_once([' ', '\t', '.']) {
                Some((name, sub)) => (name, Some(sub.trim().to_string())),
                None => (header.trim(), None),
            };
            if sub
                .as_ref()
                .is_some_and(|s| s.is_empty() || s.contains(['\\', '\n']))
            {
                return None;
            }
            section = Some((name.to_ascii_lowercase(), sub));
            continue;
        }
        let (name, sub) = section.clone()?;
        let (key, value) = match line.split_once('=') {
            Some((key, value)) => (key.trim().to_ascii_lowercase(), value.trim().to_string()),
            None => (line.to_ascii_lowercase(), String::new()),
        };
        entries.push(ConfigEntry {
            section: name,
            subsection: sub,
            key,
            value,
        });
    }
    Some(entries)
}

/// A key `git init`, `git clone` or `git submodule` writes. `core.worktree` (a submodule's
/// config names its checkout) is inert only when `worktree_inside` accepts its value: the
/// host's `git checkout` writes wherever it points.
fn inert_entry(entry: &ConfigEntry, worktree_inside: &dyn Fn(&str) -> bool) -> bool {
    let full = format!("{}.{}", entry.section, entry.key);
    if entry.subsection.is_some() {
        INERT_GIT_SUBSECTION_KEYS.contains(&full.as_str())
    } else if full == "core.worktree" {
        worktree_inside(entry.value.trim_matches('"'))
    } else {
        INERT_GIT_CONFIG_KEYS.contains(&full.as_str())
    }
}

/// A repository's `config` with only inert keys.
pub(super) fn inert_git_config(text: &str, worktree_inside: &dyn Fn(&str) -> bool) -> bool {
    git_config_entries(text)
        .is_some_and(|entries| entries.iter().all(|e| inert_entry(e, worktree_inside)))
}

/// Whether every entry `after` has that `before` did not is inert (entries removed are: less
/// configuration runs less).
pub(super) fn inert_config_change(
    before: &str,
    after: &str,
    worktree_inside: &dyn Fn(&str) -> bool,
) -> bool {
    let (Some(mut old), Some(new)) = (git_config_entries(before), git_config_entries(after)) else {
        return false;
    };
    new.iter()
        .all(|entry| match old.iter().position(|o| o == entry) {
            Some(i) => {
                old.swap_remove(i);
                true
            }
            None => inert_entry(entry, worktree_inside),
        })
}

/// A `.gitmodules` as `git submodule add` writes it: each submodule's path, URL and tracking
/// options, with no URL that starts an option or names a transport helper (`ext::…`) and no
/// `update` that is a command.
pub(super) fn inert_gitmodules(text: &str) -> bool {
    let mut in_submodule = false;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            let Some(header) = header.strip_suffix(']') else {
                return false;
            };
            in_submodule = header.split_once([' ', '\t']).is_some_and(|(name, sub)| {
                name.eq_ignore_ascii_case("submodule") && !sub.trim().is_empty()
            });
            if !in_submodule {
                return false;
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return false;
        };
        let value = value.trim().trim_matches('"');
        let inert = in_submodule
            && match key.trim().to_ascii_lowercase().as_str() {
                "path" | "branch" | "shallow" | "ignore" | "fetchrecursesubmodules" => true,
                "url" => !value.starts_with('-') && !value.contains("::"),
                "update" => matches!(value, "checkout" | "rebase" | "merge" | "none"),
                _ => false,
            };
        if !inert {
            return false;
        }
    }
    true
}

/// Whether `value`, a path relative to `base` (itself relative to the workspace), names
/// something at or below the workspace, lexically (`..` never climbs above it; absolute paths
/// are not).
pub(super) fn stays_below(base: &Path, value: &str) -> bool {
    let mut depth = base
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    for component in Path::new(value).components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// A fresh repository's `hooks` (only regular `*.sample` files, which git never runs) and
/// inert `config` are what `git init` makes: not persistence. They count as absent. `dir` is
/// the directory holding `rel`'s last component.
pub(super) fn inert_git_path(dir: BorrowedFd<'_>, rel: &Path, st: &Stat) -> bool {
    if rel.file_name() == Some(OsStr::new(".gitmodules")) {
        return st.is_file()
            && read_regular(dir, OsStr::new(".gitmodules"), GIT_CONFIG_READ_LIMIT + 1).is_ok_and(
                |bytes| {
                    (bytes.len() as u64) <= GIT_CONFIG_READ_LIMIT
                        && std::str::from_utf8(&bytes).is_ok_and(inert_gitmodules)
                },
            );
    }
    let grandparent = rel
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name);
    let in_linked_worktree = grandparent.is_some_and(|m| m == "worktrees");
    let in_git_dir = rel.parent().and_then(Path::file_name).is_some_and(|n| {
        n == ".git" || grandparent.is_some_and(|m| m == "modules") || in_linked_worktree
    });
    let Some(name) = rel.file_name() else {
        return false;
    };
    if !in_git_dir {
        return false;
    }
    match name.to_str() {
        // What `git worktree add` writes: the common directory is two levels up.
        Some("commondir") if in_linked_worktree && st.is_file() => {
            read_regular(dir, name, 64).is_ok_and(|bytes| bytes.trim_ascii() == b"../..")
        }
        Some("hooks") if st.is_dir() => {
            let Ok(fd) = beneath::open_beneath(dir, Path::new(name), DIR_LISTING, 0) else {
                return false;
            };
            beneath::list_dir(fd.as_fd()).is_ok_and(|entries| {
                entries.iter().all(|(entry, _)| {
                    entry.to_string_lossy().ends_with(".sample")
                        && beneath::stat_at(fd.as_fd(), entry).is_ok_and(|s| s.is_file())
                })
            })
        }
        Some("config") if st.is_file() => {
            // `core.worktree`, relative to this git directory, must stay in the workspace.
            let git_dir = rel.parent().unwrap_or(Path::new(""));
            let worktree_inside = |value: &str| !value.is_empty() && stays_below(git_dir, value);
            read_regular(dir, name, GIT_CONFIG_READ_LIMIT + 1).is_ok_and(|bytes| {
                (bytes.len() as u64) <= GIT_CONFIG_READ_LIMIT
                    && std::str::from_utf8(&bytes)
                        .is_ok_and(|text| inert_git_config(text, &worktree_inside))
            })
        }
        _ => false,
    }
}
