//! Which trees a run can lose without anyone being asked: what lies under the sandbox's private
//! `/tmp` (not the workspace), and build output the repository ignores (`dist`, `target`,
//! `node_modules`, …). Ignored files in general are not disposable (a local `.env`, data); a
//! known build-output name alone is not either (a project may keep sources in `build/`): both
//! must hold.
//!
//! The hook sees text, so a path is checked on disk before it is called disposable: every
//! existing component up to the one removed must be what its name says (no symlink on the way
//! out of the tree), a missing one is refused (an earlier command in the line could make it a
//! link), and `..`, a glob above the removed name, a glob in the build-output name itself or a
//! trailing slash after a glob are refused. The repository's ignore rules are read from its
//! `.gitignore` files and `.git/info/exclude` without running git (the repository's config is
//! the agent's); the user's global excludes file is not read, which only makes fewer trees
//! disposable. Reading happens only for a tree removal that names build output.

use std::path::{Path, PathBuf};

/// Directory names whose contents a build or a tool makes again on demand.
pub const BUILD_OUTPUT: &[&str] = &[
    "dist",
    "build",
    "target",
    "node_modules",
    "__pycache__",
    ".cache",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".next",
    ".nuxt",
    ".svelte-kit",
    ".turbo",
    ".parcel-cache",
    "coverage",
    "htmlcov",
    ".tox",
    ".nox",
    ".gradle",
    ".eggs",
];

/// The sandbox's private scratch directory.
const SCRATCH: &str = "/tmp";

/// Largest ignore file read; a larger one is not read (its rules then make nothing disposable).
const MAX_IGNORE_FILE: u64 = 256 << 10;

/// Whether removing or writing `path` can lose nothing the run cannot make again. `path` is
/// absolute as written (after the working directory), not normalised: `..` is refused here.
/// `tmpdir` is the sandbox's `$TMPDIR` when it is another private directory.
pub fn is_disposable(path: &str, workspace: &str, tmpdir: Option<&str>) -> bool {
    if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
        return false;
    }
    let follows_last = path.ends_with('/') || path.ends_with("/.");
    let parts: Vec<&str> = path
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    let has_glob = |c: &str| c.contains(['*', '?', '[', '{']);
    // A glob above the last component, or a glob followed through a link (`dist/*/`): refused.
    let Some((last, above)) = parts.split_last() else {
        return false;
    };
    if above.iter().any(|c| has_glob(c)) || (follows_last && has_glob(last)) {
        return false;
    }
    let normalized = format!("/{}", parts.join("/"));
    let inside = |dir: &str| normalized.starts_with(&format!("{}/", dir.trim_end_matches('/')));
    let in_workspace = inside(workspace) || normalized == workspace;
    let holds_workspace = workspace.starts_with(&format!("{normalized}/"));
    if holds_workspace {
        return false;
    }
    let checked = if follows_last {
        parts.len()
    } else {
        parts.len() - 1
    };
    let scratch = std::iter::once(SCRATCH)
        .chain(tmpdir.filter(|t| t.starts_with('/') && *t != "/"))
        .any(inside);
    if scratch && !in_workspace {
        // `/tmp/*` is all of it, Claude Code's own files included: a name first.
        let named = !normalized
            .trim_start_matches(SCRATCH)
            .trim_start_matches('/')
            .starts_with(['*', '?', '[', '{']);
        return named && no_link_on_the_way(&parts[..checked]);
    }
    if !in_workspace {
        return false;
    }
    let base = workspace
        .trim_end_matches('/')
        .split('/')
        .filter(|c| !c.is_empty())
        .count();
    let Some(output) = (base..parts.len()).find(|&i| BUILD_OUTPUT.contains(&parts[i])) else {
        return false;
    };
    if has_glob(parts[output]) || !no_link_on_the_way(&parts[..checked]) {
        return false;
    }
    let tree = PathBuf::from(format!("/{}", parts[..=output].join("/")));
    match repository_root(&tree) {
        Some(root) => {
            let depth = root.components().count() - 1;
            let relative: Vec<&str> = parts[depth..=output].to_vec();
            !relative.is_empty() && ignored(&root, &relative)
        }
        None => false,
    }
}

/// Whether each component of `/parts…` exists and is itself (no symlink): a missing one is
/// refused, since an earlier command in the line could create it as a link.
fn no_link_on_the_way(parts: &[&str]) -> bool {
    let mut path = PathBuf::from("/");
    for part in parts {
        path.push(part);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => return false,
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    true
}

/// The nearest directory at or above `tree`'s parent holding `.git` (a directory or a file).
fn repository_root(tree: &Path) -> Option<PathBuf> {
    let mut dir = tree.parent()?;
    loop {
        if std::fs::symlink_metadata(dir.join(".git")).is_ok() {
            return Some(dir.to_path_buf());
        }
        dir = dir.parent()?;
    }
}

/// One ignore rule (gitignore(5)): its pattern split in components, whether it is anchored to
/// the directory of its file, negated, or names directories only.
struct IgnoreRule {
    /// The directory the rule's file is in, relative to the repository root.
    base: Vec<String>,
    components: Vec<String>,
    anchored: bool,
    negated: bool,
}

fn parse_rules(text: &str, base: &[&str]) -> Vec<IgnoreRule> {
    let mut rules = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches([' ', '\r']);
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (negated, body) = match line.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, line.strip_prefix("\\").unwrap_or(line)),
        };
        // A trailing slash names directories; every path this module asks about is one.
        let body = body.trim_end_matches('/');
        if body.is_empty() {
            continue;
        }
        let anchored = body.contains('/');
        rules.push(IgnoreRule {
            base: base.iter().map(|c| c.to_string()).collect(),
            components: body
                .split('/')
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
            anchored,
            negated,
        });
    }
    rules
}

impl IgnoreRule {
    /// Whether the rule matches the directory `path` (components from the repository root).
    fn matches(&self, path: &[&str]) -> bool {
        let Some(rest) = path.strip_prefix(
            self.base
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .as_slice(),
        ) else {
            return false;
        };
        if rest.is_empty() {
            return false;
        }
        if self.anchored {
            let pattern: Vec<&str> = self.components.iter().map(String::as_str).collect();
            glob_components(&pattern, rest)
        } else {
            let name = rest.last().copied().unwrap_or_default();
            self.components
                .first()
                .is_some_and(|p| crate::pattern::wildcard(p, name))
        }
    }
}

/// gitignore's `**` (any number of components) and per-component wildcards.
fn glob_components(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| glob_components(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((component, path_rest)) => {
                crate::pattern::wildcard(first, component) && glob_components(rest, path_rest)
            }
            None => false,
        },
    }
}

/// Whether the directory `relative` (components from the repository `root`) is ignored: it, or
/// one of the directories above it (git does not look inside an ignored directory), is matched
/// last by a rule that does not negate. A negation whose pattern holds a character class (`[…]`,
/// which this matcher takes literally) makes nothing ignored.
fn ignored(root: &Path, relative: &[&str]) -> bool {
    let mut rules = Vec::new();
    if let Some(text) = read_small(&root.join(".git/info/exclude")) {
        rules.extend(parse_rules(&text, &[]));
    }
    for depth in 0..relative.len() {
        let dir = &relative[..depth];
        let file = dir.iter().fold(root.to_path_buf(), |p, c| p.join(c));
        if let Some(text) = read_small(&file.join(".gitignore")) {
            rules.extend(parse_rules(&text, dir));
        }
        let level = &relative[..=depth];
        let last = rules.iter().rev().find(|r| r.matches(level));
        if rules
            .iter()
            .any(|r| r.negated && r.components.iter().any(|c| c.contains('[')))
        {
            return false;
        }
        if last.is_some_and(|r| !r.negated) {
            return true;
        }
    }
    false
}

fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_IGNORE_FILE {
        return None;
    }
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository(ignore: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join(".git")).expect(".git");
        std::fs::write(root.join(".gitignore"), ignore).expect(".gitignore");
        for d in ["dist", "build", "src", "target/debug", "web/dist"] {
            std::fs::create_dir_all(root.join(d)).expect("dir");
        }
        let text = root.display().to_string();
        (dir, text)
    }

    #[test]
    fn ignored_build_output_is_disposable_and_nothing_else_in_the_workspace() {
        let (_dir, ws) = repository("/target\ndist/\n.env\n# build is kept\n");
        let at = |p: &str| format!("{ws}/{p}");
        assert!(is_disposable(&at("dist"), &ws, None));
        assert!(is_disposable(&at("dist/"), &ws, None));
        assert!(is_disposable(&at("./target/"), &ws, None));
        assert!(is_disposable(&at("target/debug/incremental"), &ws, None));
        assert!(
            is_disposable(&at("web/dist"), &ws, None),
            "dist/ matches at any depth"
        );
        assert!(is_disposable(&at("dist/*.map"), &ws, None));
        for kept in [
            "build",
            "src",
            ".env",
            ".",
            "dist/../src",
            "dist*",
            "dist/*/",
            "web",
            "",
            "target/../src",
        ] {
            assert!(!is_disposable(&at(kept), &ws, None), "{kept}");
        }
    }

    #[test]
    fn a_negation_or_an_unignored_tree_is_not_disposable() {
        let (_dir, ws) = repository("dist/\n!web/dist/\n");
        assert!(is_disposable(&format!("{ws}/dist"), &ws, None));
        assert!(!is_disposable(&format!("{ws}/web/dist"), &ws, None));
        let (_dir, ws) = repository("*\n!src\n");
        assert!(
            is_disposable(&format!("{ws}/target"), &ws, None),
            "* ignores target"
        );
    }

    #[test]
    fn a_symlink_on_the_way_is_refused() {
        let (_dir, ws) = repository("dist/\n");
        std::fs::remove_dir(format!("{ws}/dist")).expect("rmdir");
        std::os::unix::fs::symlink(format!("{ws}/src"), format!("{ws}/dist")).expect("link");
        // `rm -rf dist` removes the link only; `dist/` and `dist/x` go through it.
        assert!(is_disposable(&format!("{ws}/dist"), &ws, None));
        assert!(!is_disposable(&format!("{ws}/dist/"), &ws, None));
        assert!(!is_disposable(&format!("{ws}/dist/x"), &ws, None));
    }

    #[test]
    fn scratch_is_disposable_below_tmp_only_and_never_the_workspace() {
        assert!(is_disposable("/tmp/build", "/work/project", None));
        assert!(is_disposable("/tmp/stepproof-*", "/work/project", None));
        assert!(!is_disposable("/tmp", "/work/project", None));
        assert!(!is_disposable("/tmp/", "/work/project", None));
        assert!(!is_disposable(
            "/tmp/../work/project",
            "/work/project",
            None
        ));
        assert!(!is_disposable("/tmp/ws/src", "/tmp/ws", None));
        assert!(!is_disposable("/tmp/ws", "/tmp/ws/inner", None));
        assert!(!is_disposable("/tmp/no-such-dir/x", "/work/project", None));
        assert!(!is_disposable("/var/tmp/x", "/work/project", None));
    }
}
