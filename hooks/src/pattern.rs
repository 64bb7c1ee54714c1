//! The matchers rules compile to: wildcards over names, globs over path components and
//! patterns over argument lists. They are plain data matched by hand-written loops, so loading
//! a compiled policy costs a JSON parse and nothing else (no regex to build per call).

use serde::{Deserialize, Serialize};
use std::path::{Component, Path};

/// True when `s` holds a wildcard character (or an escape), i.e. needs `wildcard` rather
/// than `==`.
pub fn has_wildcard(s: &str) -> bool {
    s.contains(['*', '?', '\\'])
}

/// Matches `text` against `pattern` where `*` is any run of characters (also none), `?`
/// exactly one, and a backslash makes the next character literal (`/\*` is the two
/// characters `/*`, a glob written to the root). Linear-time two-pointer algorithm over
/// bytes, stepping whole UTF-8 characters: no backtracking blow-up on hostile input and no
/// allocation (it runs for every tool rule at every call).
pub fn wildcard(pattern: &str, text: &str) -> bool {
    if !has_wildcard(pattern) {
        return pattern == text;
    }
    wildcard_walk(pattern, text, false)
}

/// Whether some text that starts with `prefix` can match `pattern`.
fn wildcard_starts(pattern: &str, prefix: &str) -> bool {
    wildcard_walk(pattern, prefix, true)
}

/// `wildcard`'s loop; `prefix_only`: the text is only the start of what is matched.
fn wildcard_walk(pattern: &str, text: &str, prefix_only: bool) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let char_len = |bytes: &[u8], at: usize| text_char_len(bytes.get(at).copied());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let tl = char_len(t, ti);
        let pl = char_len(p, pi);
        let escaped = pi + 1 < p.len() && p[pi] == b'\\';
        if pi < p.len() && p[pi] == b'?' {
            pi += 1;
            ti += tl;
        } else if escaped && p.get(pi + 1..pi + 1 + char_len(p, pi + 1)) == t.get(ti..ti + tl) {
            pi += 1 + char_len(p, pi + 1);
            ti += tl;
        } else if pi < p.len()
            && p[pi] != b'*'
            && !escaped
            && p.get(pi..pi + pl) == t.get(ti..ti + tl)
        {
            pi += pl;
            ti += tl;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            let next = st + char_len(t, st);
            pi = sp + 1;
            ti = next;
            star = Some((sp, next));
        } else {
            return false;
        }
    }
    prefix_only || p[pi..].iter().all(|&c| c == b'*')
}

/// Length of the UTF-8 character starting with `first` (1 past the end).
fn text_char_len(first: Option<u8>) -> usize {
    match first {
        Some(b) if b >= 0xF0 => 4,
        Some(b) if b >= 0xE0 => 3,
        Some(b) if b >= 0xC0 => 2,
        _ => 1,
    }
}

/// The file-rule path that stands for a project's `.env` files wherever they are (`.env`,
/// `.env.local`, `.env.production`, …), templates excepted: one name test, not a glob, so
/// that the exceptions are read the same way as StepProof's sandbox reads them when it
/// hides such files (`hide_env_files`).
pub const ENV_FILES: &str = "@env-files";

/// Words that make a `.env.*` name a template meant to be committed (`.env.example`,
/// `.env.local.sample`), in any letter case. The sandbox's name test (`hide_env_files`,
/// src/sandbox/plan/secrets.rs) is [`is_env_file`] itself.
const ENV_TEMPLATES: &[&str] = &[
    "example", "sample", "template", "tmpl", "tpl", "dist", "defaults", "default", "schema",
    "skeleton", "stub", "spec",
];

/// Whether a file name is a `.env` file a project keeps (`.env`, `.env.local`), not a
/// template (`.env.example`) nor another name (`.envrc`, `x.env`).
pub fn is_env_file(name: &str) -> bool {
    if name == ".env" {
        return true;
    }
    match name.strip_prefix(".env.") {
        Some(rest) => {
            !rest.is_empty()
                && !rest
                    .split('.')
                    .any(|part| ENV_TEMPLATES.iter().any(|t| part.eq_ignore_ascii_case(t)))
        }
        None => false,
    }
}

/// An absolute path glob (already resolved against workspace and home). Kept as one string
/// and split when matched: loading the policy, which happens at every call, then costs one
/// string per glob.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, String)", into = "(u32, String)")]
pub struct PathGlob {
    /// Index of the rule in `CompiledPolicy::rules`.
    pub rule: u32,
    /// The glob; `**` as a component stands for any number of components.
    pub glob: String,
}

impl PathGlob {
    /// A glob for a rule.
    pub fn new(rule: u32, glob: &str) -> Self {
        PathGlob {
            rule,
            glob: glob.to_string(),
        }
    }

    /// Whether the absolute, normalised `path` matches.
    pub fn matches(&self, path: &str) -> bool {
        if self.glob == ENV_FILES {
            return is_env_file(path.rsplit('/').next().unwrap_or(path));
        }
        let pattern: Vec<&str> = split_path(&self.glob).collect();
        let components: Vec<&str> = split_path(path).collect();
        match_components(&pattern, &components)
    }
}

// Matchers are JSON arrays `[rule, text]` rather than objects: the hook parses the policy at
// every call, and skipping object keys is a large part of that cost.
impl From<(u32, String)> for PathGlob {
    fn from((rule, glob): (u32, String)) -> Self {
        PathGlob { rule, glob }
    }
}

impl From<PathGlob> for (u32, String) {
    fn from(g: PathGlob) -> Self {
        (g.rule, g.glob)
    }
}

impl From<(u32, String)> for CommandPattern {
    fn from((rule, args): (u32, String)) -> Self {
        CommandPattern { rule, args }
    }
}

impl From<CommandPattern> for (u32, String) {
    fn from(p: CommandPattern) -> Self {
        (p.rule, p.args)
    }
}

fn split_path(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|c| !c.is_empty())
}

fn match_components(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((first, rest)) if *first == "**" => {
            // Collapse runs of `**` so that hostile patterns stay polynomial.
            let rest_start = rest.iter().take_while(|p| **p == "**").count();
            let rest = &rest[rest_start..];
            (0..=path.len()).any(|skip| match_components(rest, &path[skip..]))
        }
        Some((first, rest)) => match path.split_first() {
            Some((component, path_rest)) => {
                wildcard(first, component) && match_components(rest, path_rest)
            }
            None => false,
        },
    }
}

/// An argument as the shell analysis saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arg {
    /// Known before the command runs.
    Static(String),
    /// Computed at run time (`$x`, `$(…)`, brace expansion): could be anything.
    Dynamic,
    /// Computed at run time around static text: `--output="$f"` starts with `--output=`,
    /// `"$dir/.env"` ends with `/.env`. What is not static could be anything.
    Partial {
        /// The static text before the first computed part.
        prefix: String,
        /// The static text after the last computed part.
        suffix: String,
    },
}

impl Arg {
    /// The text when known before running.
    pub fn as_static(&self) -> Option<&str> {
        match self {
            Arg::Static(s) => Some(s),
            Arg::Dynamic | Arg::Partial { .. } => None,
        }
    }

    /// Whether the word is computed at run time (wholly or in part).
    pub fn is_computed(&self) -> bool {
        !matches!(self, Arg::Static(_))
    }

    /// The static text a computed word starts with (empty when wholly computed).
    pub fn static_prefix(&self) -> &str {
        match self {
            Arg::Static(s) => s,
            Arg::Partial { prefix, .. } => prefix,
            Arg::Dynamic => "",
        }
    }

    /// The static text a computed word ends with (empty when wholly computed).
    pub fn static_suffix(&self) -> &str {
        match self {
            Arg::Static(s) => s,
            Arg::Partial { suffix, .. } => suffix,
            Arg::Dynamic => "",
        }
    }
}

/// Whether a word starting with `prefix` and ending with `suffix` (anything between) could
/// match `pattern`: both ends are checked, each on its own (an over-estimate).
fn could_match(pattern: &str, prefix: &str, suffix: &str) -> bool {
    if !wildcard_starts(pattern, prefix) {
        return false;
    }
    if pattern.contains('\\') || suffix.is_empty() {
        return true;
    }
    let reversed: String = pattern.chars().rev().collect();
    let suffix: String = suffix.chars().rev().collect();
    wildcard_starts(&reversed, &suffix)
}

/// A compiled command pattern (`git diff *`), indexed by its command name elsewhere.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "(u32, String)", into = "(u32, String)")]
pub struct CommandPattern {
    /// Index of the rule in `CompiledPolicy::rules`.
    pub rule: u32,
    /// The pattern's words after the command name, space-separated as written: a word that
    /// is just `*` stands for any number of arguments (also none), other words match one
    /// argument with `*`/`?` wildcards. One string, split when matched, for cheap loading.
    pub args: String,
}

impl CommandPattern {
    /// The pattern for the words after the name of a pattern such as `git diff *`.
    pub fn new(rule: u32, words: &[&str]) -> Self {
        CommandPattern {
            rule,
            args: words.join(" "),
        }
    }

    /// Whether the arguments match. `pessimistic` decides what a run-time argument does: for
    /// an allow rule it matches only `*` (it might be anything), for deny and ask rules it
    /// matches any word (it might be exactly the dangerous one).
    pub fn matches(&self, args: &[Arg], pessimistic: bool) -> bool {
        let words: Vec<&str> = self.args.split_whitespace().collect();
        match_args(&words, args, pessimistic)
    }
}

fn match_args(pattern: &[&str], args: &[Arg], pessimistic: bool) -> bool {
    match pattern.split_first() {
        None => args.is_empty(),
        Some((&"*", rest)) => {
            (0..=args.len()).any(|skip| match_args(rest, &args[skip..], pessimistic))
        }
        Some((word, rest)) => match args.split_first() {
            Some((Arg::Static(arg), args_rest)) => {
                wildcard(word, arg) && match_args(rest, args_rest, pessimistic)
            }
            Some((Arg::Dynamic, args_rest)) => {
                pessimistic && match_args(rest, args_rest, pessimistic)
            }
            Some((Arg::Partial { prefix, suffix }, args_rest)) => {
                pessimistic
                    && could_match(word, prefix, suffix)
                    && match_args(rest, args_rest, pessimistic)
            }
            None => false,
        },
    }
}

/// Matches a host name against `example.com`, `*.example.com` (the domain and its
/// subdomains) or `*` (anything).
pub fn domain_matches(pattern: &str, host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let pattern = pattern.to_ascii_lowercase();
    if pattern == "*" {
        return true;
    }
    match pattern.strip_prefix("*.") {
        Some(domain) => host == domain || host.ends_with(&format!(".{domain}")),
        None => host == pattern,
    }
}

/// Lexical normalisation: `.` and `..` removed, no symlinks followed (the kernel sandbox is
/// the floor for what a symlink can reach). `None` for a relative path.
pub fn normalize(path: &Path) -> Option<String> {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    let mut absolute = false;
    for component in path.components() {
        match component {
            Component::RootDir => absolute = true,
            Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                parts.pop();
            }
            Component::Normal(c) => parts.push(c),
        }
    }
    if !absolute {
        return None;
    }
    let mut out = String::new();
    for p in parts {
        out.push('/');
        out.push_str(&p.to_string_lossy());
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(wildcard("*", ""));
        assert!(wildcard("a*c", "abbbc"));
        assert!(wildcard("a?c", "abc"));
        assert!(!wildcard("a?c", "ac"));
        assert!(wildcard("*claude*", "/opt/claude-code/cli.js"));
        assert!(!wildcard("git", "gitk"));
        assert!(wildcard("--force*", "--force-with-lease"));
        assert!(wildcard("?é?", "aéb"));
        assert!(wildcard("*ü", "xxü"));
        assert!(!wildcard("a?", "aéb"));
        assert!(wildcard("é*", "é"));
        assert!(wildcard("/\\*", "/*"));
        assert!(!wildcard("/\\*", "/tmp"));
        assert!(wildcard("*\\?x*", "a?xb"));
        assert!(!wildcard("\\?", "a"));
        assert!(wildcard("a\\", "a\\"));
    }

    #[test]
    fn path_globs() {
        let g = PathGlob::new(0, "/ws/**");
        assert!(g.matches("/ws"));
        assert!(g.matches("/ws/a/b.rs"));
        assert!(!g.matches("/wsx/a"));
        let g = PathGlob::new(0, "/ws/**/.git/hooks/**");
        assert!(g.matches("/ws/.git/hooks/pre-commit"));
        assert!(g.matches("/ws/vendor/x/.git/hooks"));
        assert!(!g.matches("/ws/src/hooks/a"));
        let g = PathGlob::new(0, "/home/u/.ssh*/**");
        assert!(g.matches("/home/u/.ssh/id_rsa"));
    }

    #[test]
    fn argument_patterns() {
        let p = CommandPattern::new(0, &["*", "push", "*", "--force*", "*"]);
        let s = |v: &[&str]| {
            v.iter()
                .map(|a| Arg::Static(a.to_string()))
                .collect::<Vec<_>>()
        };
        assert!(p.matches(&s(&["push", "--force"]), false));
        assert!(p.matches(
            &s(&["-C", "x", "push", "origin", "--force-with-lease"]),
            false
        ));
        assert!(!p.matches(&s(&["push", "origin"]), false));
        let mut dynamic = s(&["push", "origin"]);
        dynamic.push(Arg::Dynamic);
        assert!(p.matches(&dynamic, true));
        assert!(!p.matches(&dynamic, false));
        let partial = |prefix: &str, suffix: &str| {
            let mut args = s(&["push", "origin"]);
            args.push(Arg::Partial {
                prefix: prefix.into(),
                suffix: suffix.into(),
            });
            args
        };
        assert!(p.matches(&partial("--force", ""), true));
        assert!(p.matches(&partial("--", "lease"), true));
        assert!(!p.matches(&partial("main", ""), true));
        // Only the ends are known: `--force/main` ends with `/main` too.
        assert!(p.matches(&partial("", "/main"), true));
        let env = CommandPattern::new(0, &["*", "*.env"]);
        assert!(env.matches(
            &[Arg::Partial {
                prefix: String::new(),
                suffix: "/.env".into()
            }],
            true
        ));
        assert!(!env.matches(
            &[Arg::Partial {
                prefix: "src/".into(),
                suffix: ".rs".into()
            }],
            true
        ));
        assert!(!p.matches(&partial("--force", ""), false));
        let exact = CommandPattern::new(0, &["status"]);
        assert!(exact.matches(&s(&["status"]), false));
        assert!(!exact.matches(&s(&["status", "-s"]), false));
    }

    #[test]
    fn env_files_but_not_templates() {
        for yes in [
            ".env",
            ".env.local",
            ".env.production",
            ".env.development.local",
        ] {
            assert!(is_env_file(yes), "{yes}");
        }
        for no in [
            ".env.example",
            ".env.sample",
            ".env.template",
            ".env.local.example",
            ".env.dist",
            ".env.EXAMPLE",
            ".envrc",
            "env",
            ".env.",
            "x.env",
        ] {
            assert!(!is_env_file(no), "{no}");
        }
        let rule = PathGlob::new(0, ENV_FILES);
        assert!(rule.matches("/work/project/.env"));
        assert!(rule.matches("/tmp/app/.env.local"));
        assert!(!rule.matches("/work/project/.env.example"));
        assert!(!rule.matches("/work/project/.env/x"));
    }

    #[test]
    fn domains() {
        assert!(domain_matches("*.rust-lang.org", "doc.rust-lang.org"));
        assert!(domain_matches("*.rust-lang.org", "rust-lang.org"));
        assert!(!domain_matches("*.rust-lang.org", "evilrust-lang.org"));
        assert!(domain_matches("docs.rs", "DOCS.RS."));
    }
}
