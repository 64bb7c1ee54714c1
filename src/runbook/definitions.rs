//! What defines an evidence command: per tool (the program word of the command, parsed with the
//! hook's shell analysis, wrappers and `sh -c` peeled off), the workspace files that decide what
//! it runs — build files, test-runner configuration, plugins, lock files, start-up hooks, the
//! program itself when it is in the workspace — including names that do not exist yet but would
//! take precedence (`GNUmakefile` over `Makefile`), and the build state it would reuse
//! (`target/`, `node_modules/`, `.venv/`). Pure: the supervisor walks what this names.

use std::path::{Component, Path, PathBuf};
use stepproof_hook::pattern::Arg;
use stepproof_hook::shell::{Effect, analyze, basename};

mod follow;
mod scripts;
mod tools;

pub use follow::{follow, make_includes};
pub use scripts::of_scripts;
use tools::tool_use;

/// One tool an evidence command runs, and the workspace directory it reads its definitions in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolUse {
    pub tool: &'static str,
    /// Workspace-relative (`""`: the workspace itself).
    pub dir: String,
}

/// What one evidence command's outcome rests on in the workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Definitions {
    pub tools: Vec<ToolUse>,
    /// Workspace globs of the files that decide what the command does (existing or not).
    pub files: Vec<String>,
    /// Makefiles (workspace-relative) whose literal `include`s define it too: the supervisor
    /// reads them when the step opens ([`make_includes`]).
    pub makefiles: Vec<String>,
    /// Script files whose entries run tools too (a package.json's scripts, a justfile's
    /// recipes, a Taskfile's tasks): the supervisor reads them when the step opens
    /// ([`of_scripts`]) and adds what those entries run.
    pub scripts: Vec<ScriptRef>,
    /// Build state in the workspace (directories, workspace-relative) the tools would reuse:
    /// discarded in the evidence sandbox unless the item trusts it by name.
    pub build_state: Vec<String>,
    /// What could not be known before the command runs (a computed word, a directory outside
    /// the workspace, a script a shell reads from a file it names at run time).
    pub unknown: Vec<String>,
}

/// A script file whose named entries a tool runs, to be read when the step opens.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ScriptRef {
    pub kind: ScriptKind,
    /// Workspace-relative; read if it exists.
    pub file: String,
    /// Where the tool runs the entries (workspace-relative).
    pub dir: String,
    /// The entries run (a package.json's scripts, a Taskfile's tasks); a justfile's recipes
    /// are followed all, whichever are named (just's dependency graph is just's to read).
    pub names: Vec<String>,
    /// A package.json: the command line run when no script has the first name (`yarn jest`
    /// and `pnpm jest` run the program `jest` then).
    pub otherwise: Option<String>,
}

/// What kind of script file a [`ScriptRef`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScriptKind {
    /// A package.json; `pre_post`: the `pre<name>` and `post<name>` scripts run around each
    /// name (npm and yarn 1 run them; pnpm when `enable-pre-post-scripts` says so, whose
    /// default changed between versions; yarn 2+ does not — all are followed, freezing more).
    Package {
        pre_post: bool,
    },
    Just,
    Task,
}

/// Directory names a definition walk never enters: the repository's own store, and build state
/// (emptied in the evidence sandbox, or trusted by name).
pub const NOT_ENTERED: &[&str] = &[
    ".git",
    "target",
    "node_modules",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".nox",
    ".gradle",
];

/// Where Python's bytecode is read and written in the evidence sandbox: a private directory,
/// so no `__pycache__` of the workspace is ever imported (a crafted `.pyc` with the source's
/// recorded size and mtime would be).
pub const PYCACHE_PREFIX: &str = "/tmp/pycache";

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "mksh", "ash"];
const INTERPRETERS: &[&str] = &["node", "perl", "ruby", "php", "deno", "bun", "tsx"];

/// The definitions of `run` (an evidence command's argv, run in the workspace), with the
/// workspace's path as the sandbox sees it (absolute paths within it are taken as relative).
pub fn of_command(run: &[String], workspace: &Path) -> Definitions {
    let mut defs = Definitions::default();
    let Some(first) = run.first() else {
        return defs;
    };
    let name = basename(first);
    // A shell or interpreter given a script file: the script is the program (the hook's
    // analysis cannot see into it, and says so).
    if SHELLS.contains(&name) || INTERPRETERS.contains(&name) || is_python(name) {
        let static_args: Vec<Arg> = run[1..].iter().map(|a| Arg::Static(a.clone())).collect();
        if let Some(script) = script_operand(name, &static_args) {
            program_file(&mut defs, "", &script, workspace);
            if !is_python(name) {
                finish(&mut defs);
                return defs;
            }
        }
    }
    let line = run
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    add_line(&mut defs, &line, "", workspace);
    finish(&mut defs);
    defs
}

/// What one shell command line, started in `cwd`, runs: each tool's definitions, `cd` followed.
fn add_line(defs: &mut Definitions, line: &str, cwd: &str, workspace: &Path) {
    let mut cwd = cwd.to_string();
    for effect in analyze(line) {
        match effect {
            Effect::Exec(inv) if inv.name == "cd" => {
                match inv.args.first().and_then(Arg::as_static) {
                    Some(dir) => match relative(&cwd, dir, workspace) {
                        Some(d) => cwd = d,
                        None => defs
                            .unknown
                            .push(format!("`cd {dir}`: outside the workspace")),
                    },
                    None => defs
                        .unknown
                        .push("`cd` to a directory computed at run time".into()),
                }
            }
            Effect::Exec(inv) => tool_use(defs, &cwd, &inv, workspace),
            Effect::Unknown(why) => defs.unknown.push(why),
            _ => {}
        }
    }
}

/// What the recipes of a makefile run (make runs in `dir`, workspace-relative): each recipe
/// line as the shell command it is, so a recipe's `python3 -m pytest` makes `conftest.py` a
/// definition and its `cargo test` makes `target/` build state, as if the evidence named them.
/// Every recipe counts, whichever target the evidence names (make's graph is make's to read).
/// `$(MAKE)` is make; a line with another make variable is analysed as written, where the
/// shell's analysis sees a word computed at run time.
pub fn of_recipes(text: &str, dir: &str, workspace: &Path) -> Definitions {
    let mut defs = Definitions::default();
    let variables = make_variables(text);
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let recipe = if let Some(recipe) = line.strip_prefix('\t') {
            recipe.to_string()
        } else if let Some((rule, recipe)) = line.split_once(';')
            && !line.starts_with('#')
            && rule.contains(':')
            && !rule.contains('=')
        {
            // `target: prerequisites ; recipe`
            recipe.to_string()
        } else {
            continue;
        };
        // A backslash-newline goes to the shell as it is; the next line's tab is make's.
        let mut recipe = recipe;
        while recipe.ends_with('\\') {
            recipe.pop();
            match lines.next() {
                Some(next) => recipe.push_str(next.strip_prefix('\t').unwrap_or(next)),
                None => break,
            }
        }
        let command = recipe
            .trim_start_matches(|c: char| c == '@' || c == '-' || c == '+' || c.is_whitespace())
            .replace("$(MAKE)", "make")
            .replace("${MAKE}", "make");
        let command = expand(&command, &variables, &mut defs.unknown).replace("$$", "$");
        if !command.is_empty() && !command.starts_with('#') {
            add_line(&mut defs, &command, dir, workspace);
            shell_scripts(&mut defs, &command, dir, workspace);
        }
    }
    finish(&mut defs);
    defs
}

/// The variables a makefile defines literally (`PYTEST = python3 -m pytest`, `:=`, `::=`,
/// `?=`, `+=` appending, `override`/`export` before): name and value, `None` for one whose
/// value is computed (a function call, a variable the makefile does not define literally) —
/// the last definition wins, as make's would for recipes (expanded when they run).
fn make_variables(text: &str) -> std::collections::BTreeMap<String, Option<String>> {
    let mut vars = std::collections::BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('\t') || line.trim_start().starts_with('#') {
            continue;
        }
        let line = line
            .trim_start()
            .trim_start_matches("override ")
            .trim_start_matches("export ");
        let Some(eq) = line.find('=') else { continue };
        let (lhs, value) = (&line[..eq], line[eq + 1..].trim());
        let (name, op) = match lhs.trim_end() {
            l if l.ends_with("::") => (&l[..l.len() - 2], ":"),
            l if l.ends_with([':', '?', '+', '!']) => (&l[..l.len() - 1], &l[l.len() - 1..]),
            l => (l, ""),
        };
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
        {
            continue;
        }
        let literal =
            (!value.replace("$$", "").contains('$') && op != "!").then(|| value.to_string());
        match op {
            "+" => {
                let joined = match (vars.get(name).cloned().flatten(), literal) {
                    (Some(before), Some(more)) => Some(format!("{before} {more}")),
                    _ => None,
                };
                vars.insert(name.to_string(), joined);
            }
            "?" => {
                vars.entry(name.to_string()).or_insert(literal);
            }
            _ => {
                vars.insert(name.to_string(), literal);
            }
        }
    }
    vars
}

/// A recipe line with its `$(NAME)` / `${NAME}` replaced by the makefile's literal values; one
/// that is not known (computed, undefined, a function call) is said in `unknown` and left to
/// the shell as a word computed at run time.
fn expand(
    line: &str,
    vars: &std::collections::BTreeMap<String, Option<String>>,
    unknown: &mut Vec<String>,
) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let close = match after.chars().next() {
            Some('(') => ')',
            Some('{') => '}',
            Some('$') => {
                out.push_str("$$");
                rest = &after[1..];
                continue;
            }
            _ => {
                out.push('$');
                rest = after;
                continue;
            }
        };
        let Some(end) = after.find(close) else {
            out.push('$');
            rest = after;
            continue;
        };
        let name = &after[1..end];
        match vars.get(name) {
            Some(Some(value)) => out.push_str(value),
            _ => {
                unknown.push(format!(
                    "`$({name})`: not defined literally in the makefile (computed when make runs)"
                ));
                out.push_str("\"$STEPPROOF_MAKE_VARIABLE\"");
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// The script files of `sh FILE` in a recipe line: the shell's analysis says only that a
/// script file runs; which one, a plain reading of the line's words says (each `;`, `&&`,
/// `||` or `|` segment, after a literal `cd`).
fn shell_scripts(defs: &mut Definitions, line: &str, cwd: &str, workspace: &Path) {
    let mut cwd = cwd.to_string();
    for segment in line.split([';', '&', '|']) {
        let words: Vec<String> = segment
            .split_whitespace()
            .map(|w| w.trim_matches(['\'', '"']).to_string())
            .skip_while(|w| w.contains('=') && !w.starts_with('-'))
            .collect();
        let Some(first) = words.first() else { continue };
        if first == "cd" {
            if let Some(d) = words.get(1).and_then(|d| relative(&cwd, d, workspace)) {
                cwd = d;
            }
        } else if SHELLS.contains(&basename(first)) {
            let args: Vec<Arg> = words[1..].iter().cloned().map(Arg::Static).collect();
            if let Some(script) = script_operand(basename(first), &args) {
                program_file(defs, &cwd, &script, workspace);
            }
        }
    }
}

fn finish(defs: &mut Definitions) {
    for list in [&mut defs.files, &mut defs.makefiles, &mut defs.build_state] {
        let mut seen = std::collections::BTreeSet::new();
        list.retain(|p| seen.insert(p.clone()));
    }
    let mut seen = std::collections::BTreeSet::new();
    defs.scripts.retain(|r| seen.insert(r.clone()));
}

fn is_python(name: &str) -> bool {
    name == "python"
        || name
            .strip_prefix("python")
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The script operand of a shell or interpreter (`sh x.sh`, `python3 t.py`), when it reads one
/// from a file (not `-c`, not `-m`, not standard input).
fn script_operand(name: &str, args: &[Arg]) -> Option<String> {
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let text = arg.as_static()?;
        if text == "--" {
            return args.get(i + 1)?.as_static().map(str::to_string);
        }
        if let Some(flags) = text.strip_prefix('-') {
            if flags.is_empty()
                || flags.contains('c')
                || (is_python(name) && flags.starts_with('m'))
                || (!SHELLS.contains(&name) && (flags == "e" || flags == "-eval"))
            {
                return None;
            }
            i += 1;
            continue;
        }
        return Some(text.to_string());
    }
    None
}

/// `path` (as the command names it, from `cwd`) as a workspace-relative path, or `None` when it
/// is outside the workspace.
fn relative(cwd: &str, path: &str, workspace: &Path) -> Option<String> {
    let joined: PathBuf = if path.starts_with('/') {
        Path::new(path).strip_prefix(workspace).ok()?.to_path_buf()
    } else {
        Path::new(cwd).join(path)
    };
    let mut parts: Vec<String> = Vec::new();
    for c in joined.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?.to_string()),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.join("/"))
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// `dir` and each of its ancestors up to the workspace (tools that search upwards).
fn upwards(dir: &str) -> Vec<String> {
    let mut out = vec![dir.to_string()];
    let mut d = dir;
    while let Some((parent, _)) = d.rsplit_once('/') {
        out.push(parent.to_string());
        d = parent;
    }
    if !dir.is_empty() {
        out.push(String::new());
    }
    out
}

fn program_file(defs: &mut Definitions, cwd: &str, program: &str, workspace: &Path) {
    match relative(cwd, program, workspace) {
        // `./node_modules/.bin/jest`: a program in build state is build state (emptied in the
        // evidence sandbox unless trusted), not a definition file.
        Some(rel)
            if let Some(at) = rel
                .split('/')
                .position(|c| NOT_ENTERED.contains(&c) && c != ".git") =>
        {
            let dir: Vec<&str> = rel.split('/').take(at + 1).collect();
            defs.build_state.push(dir.join("/"));
        }
        Some(rel) if !rel.is_empty() => defs.files.push(rel),
        Some(_) => {}
        None if program.starts_with('/') => {}
        None => defs
            .unknown
            .push(format!("`{program}`: outside the workspace")),
    }
}

/// Whether a step glob names `path` as the step's work: it matches the path, and its last
/// component is not wildcards alone (`Makefile`, `**/conftest.py`, `*.mk` name files;
/// `src/**` or `**` name none).
pub fn names_file(glob: &str, path: &str) -> bool {
    let last = glob.rsplit('/').next().unwrap_or(glob);
    last.chars().any(|c| c != '*' && c != '?')
        && stepproof_hook::pattern::PathGlob::new(0, &format!("/{}", glob.trim_start_matches("./")))
            .matches(&format!("/{path}"))
}

#[cfg(test)]
mod tests;
