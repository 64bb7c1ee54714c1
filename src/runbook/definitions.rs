//! What defines an evidence command: per tool (the program word of the command, parsed with the
//! hook's shell analysis, wrappers and `sh -c` peeled off), the workspace files that decide what
//! it runs — build files, test-runner configuration, plugins, lock files, start-up hooks, the
//! program itself when it is in the workspace — including names that do not exist yet but would
//! take precedence (`GNUmakefile` over `Makefile`), and the build state it would reuse
//! (`target/`, `node_modules/`, `.venv/`). Pure: the supervisor walks what this names.

use std::path::{Component, Path, PathBuf};
use stepproof_hook::pattern::Arg;
use stepproof_hook::shell::{Effect, Invocation, analyze, basename};

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

/// The value of an option among `args`: `-C DIR`, `-CDIR`, `--directory=DIR`, `--directory DIR`.
fn option_values(args: &[Arg], short: &[&str], long: &[&str]) -> Vec<Option<String>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let Some(text) = args[i].as_static() else {
            i += 1;
            continue;
        };
        if text == "--" {
            break;
        }
        let mut found = None;
        for s in short {
            if text == *s {
                found = Some(args.get(i + 1).and_then(Arg::as_static).map(str::to_string));
                i += 1;
            } else if let Some(v) = text.strip_prefix(s)
                && !v.is_empty()
                && !s.starts_with("--")
            {
                found = Some(Some(v.trim_start_matches('=').to_string()));
            }
        }
        for l in long {
            if text == *l {
                found = Some(args.get(i + 1).and_then(Arg::as_static).map(str::to_string));
                i += 1;
            } else if let Some(v) = text.strip_prefix(&format!("{l}=")) {
                found = Some(Some(v.to_string()));
            }
        }
        if let Some(v) = found {
            out.push(v);
        }
        i += 1;
    }
    out
}

/// The directory a tool reads its definitions in: `cwd` moved by each directory option.
fn tool_dir(
    defs: &mut Definitions,
    cwd: &str,
    args: &[Arg],
    short: &[&str],
    long: &[&str],
    workspace: &Path,
) -> Option<String> {
    let mut dir = cwd.to_string();
    for value in option_values(args, short, long) {
        match value.and_then(|v| relative(&dir, &v, workspace)) {
            Some(d) => dir = d,
            None => {
                defs.unknown.push(format!(
                    "a directory option of `{}` names a directory computed at run time or outside the workspace",
                    short.first().or(long.first()).unwrap_or(&"?")
                ));
                return None;
            }
        }
    }
    Some(dir)
}

fn at(defs: &mut Definitions, dirs: &[String], names: &[&str]) {
    for d in dirs {
        for n in names {
            defs.files.push(join(d, n));
        }
    }
}

fn state(defs: &mut Definitions, dirs: &[String], names: &[&str]) {
    for d in dirs {
        for n in names {
            defs.build_state.push(join(d, n));
        }
    }
}

fn tool_use(defs: &mut Definitions, cwd: &str, inv: &Invocation, workspace: &Path) {
    // A program the workspace holds is itself a definition.
    if inv.program.contains('/') && !inv.program.starts_with("~/") {
        program_file(defs, cwd, &inv.program, workspace);
    }
    let args = &inv.args;
    let name = inv.name.as_str();
    let tool: &'static str = match name {
        "make" | "gmake" => "make",
        "cargo" => "cargo",
        "npm" | "npx" | "pnpm" | "pnpx" | "yarn" => "npm",
        "pytest" | "py.test" => "pytest",
        "jest" => "jest",
        "vitest" => "vitest",
        "mocha" | "_mocha" => "mocha",
        "ava" => "ava",
        "tap" => "tap",
        "jasmine" => "jasmine",
        "karma" => "karma",
        "playwright" => "playwright",
        "cypress" => "cypress",
        "go" => "go",
        "just" => "just",
        "task" | "go-task" => "task",
        "gradle" | "gradlew" => "gradle",
        "mvn" | "mvnw" => "mvn",
        "dotnet" => "dotnet",
        n if is_python(n) => match option_values(args, &["-m"], &[]).into_iter().next() {
            Some(Some(m)) if m == "pytest" || m == "py.test" => "pytest",
            Some(Some(m)) if m == "unittest" => "unittest",
            Some(Some(_)) => "python",
            _ => match script_operand(n, args) {
                Some(script) => {
                    program_file(defs, cwd, &script, workspace);
                    "python"
                }
                None => "python",
            },
        },
        n if SHELLS.contains(&n) || INTERPRETERS.contains(&n) => {
            if let Some(script) = script_operand(n, args) {
                program_file(defs, cwd, &script, workspace);
            }
            if n == "node" || n == "tsx" {
                // Modules loaded before the script (`-r ./setup.js`, `--import ./hooks.mjs`).
                for value in option_values(
                    args,
                    &["-r"],
                    &["--require", "--import", "--loader", "--experimental-loader"],
                ) {
                    match value {
                        Some(v) if v.starts_with('.') || v.starts_with('/') => {
                            program_file(defs, cwd, &v, workspace)
                        }
                        Some(_) => {}
                        None => defs
                            .unknown
                            .push(format!("`{n}` preloads a module computed at run time")),
                    }
                }
            }
            return;
        }
        _ => return,
    };
    let dir = match tool {
        "make" => tool_dir(defs, cwd, args, &["-C"], &["--directory"], workspace),
        "cargo" => tool_dir(defs, cwd, args, &["-C"], &[], workspace),
        "npm" => tool_dir(
            defs,
            cwd,
            args,
            &["-C"],
            &["--prefix", "--dir", "--cwd"],
            workspace,
        ),
        "pytest" => tool_dir(defs, cwd, args, &[], &["--rootdir"], workspace),
        "go" => tool_dir(defs, cwd, args, &["-C"], &[], workspace),
        "just" => tool_dir(
            defs,
            cwd,
            args,
            &["-d"],
            &["--working-directory"],
            workspace,
        ),
        "task" => tool_dir(defs, cwd, args, &["-d"], &["--dir"], workspace),
        "gradle" => tool_dir(defs, cwd, args, &["-p"], &["--project-dir"], workspace),
        _ => Some(cwd.to_string()),
    };
    let Some(dir) = dir else { return };
    defs.tools.push(ToolUse {
        tool,
        dir: dir.clone(),
    });
    let here = std::slice::from_ref(&dir);
    let up = upwards(&dir);
    match tool {
        "make" => {
            let named = option_values(args, &["-f"], &["--file", "--makefile"]);
            if named.is_empty() {
                for n in ["GNUmakefile", "makefile", "Makefile"] {
                    defs.makefiles.push(join(&dir, n));
                }
            }
            for file in named {
                match file.and_then(|f| relative(&dir, &f, workspace)) {
                    Some(f) => defs.makefiles.push(f),
                    None => defs.unknown.push(
                        "`make -f` names a makefile computed at run time or outside the workspace"
                            .into(),
                    ),
                }
            }
            let makefiles = defs.makefiles.clone();
            defs.files.extend(makefiles);
        }
        "cargo" => {
            for value in option_values(args, &[], &["--manifest-path"]) {
                match value.and_then(|v| relative(&dir, &v, workspace)) {
                    Some(m) => defs.files.push(m),
                    None => defs.unknown.push(
                        "`--manifest-path` computed at run time or outside the workspace".into(),
                    ),
                }
            }
            at(
                defs,
                &up,
                &[
                    "Cargo.toml",
                    "Cargo.lock",
                    ".cargo/config",
                    ".cargo/config.toml",
                    "rust-toolchain",
                    "rust-toolchain.toml",
                ],
            );
            // Every member's manifest and build script, wherever the workspace keeps them.
            defs.files.push("**/Cargo.toml".into());
            defs.files.push("**/build.rs".into());
            state(defs, &up, &["target"]);
        }
        "npm" => {
            at(
                defs,
                &up,
                &[
                    "package.json",
                    "package-lock.json",
                    "npm-shrinkwrap.json",
                    "pnpm-lock.yaml",
                    "pnpm-workspace.yaml",
                    "yarn.lock",
                    ".npmrc",
                    ".yarnrc",
                    ".yarnrc.yml",
                    ".pnpmfile.cjs",
                    ".yarn/releases/**",
                    ".yarn/plugins/**",
                ],
            );
            at(
                defs,
                here,
                &[
                    "**/package.json",
                    "jest.config.*",
                    "vitest.config.*",
                    "vite.config.*",
                    ".mocharc*",
                    "babel.config.*",
                    ".babelrc*",
                ],
            );
            state(defs, &up, &["node_modules"]);
            package_runs(defs, name, args, &dir, &up, workspace);
        }
        "jest" | "vitest" | "mocha" | "ava" | "tap" | "jasmine" | "karma" | "playwright"
        | "cypress" => {
            for value in option_values(args, &["-c"], &["--config"]) {
                match value.and_then(|v| relative(&dir, &v, workspace)) {
                    Some(c) => defs.files.push(c),
                    None => defs.unknown.push(format!(
                        "`{tool} --config` names a file computed at run time or outside the workspace"
                    )),
                }
            }
            // Their configuration (the package.json key of the same name too), the setup
            // files by their usual names, and the transpilers they run the tests through.
            let own: &[&str] = match tool {
                "jest" => &[
                    "jest.config.*",
                    "jest.setup.*",
                    "setupTests.*",
                    "src/setupTests.*",
                ],
                "vitest" => &[
                    "vitest.config.*",
                    "vitest.workspace.*",
                    "vitest.setup.*",
                    "vite.config.*",
                ],
                "mocha" => &[".mocharc*", "test/mocha.opts"],
                "ava" => &["ava.config.*"],
                "tap" => &[".taprc"],
                "jasmine" => &["spec/support/jasmine.json", "spec/support/jasmine.js"],
                "karma" => &["karma.conf.*", ".config/karma.conf.*"],
                "playwright" => &["playwright.config.*"],
                _ => &["cypress.config.*", "cypress.json", "cypress/support/**"],
            };
            at(defs, here, own);
            at(
                defs,
                &up,
                &[
                    "package.json",
                    "babel.config.*",
                    ".babelrc*",
                    "tsconfig.json",
                    "tsconfig.*.json",
                    ".swcrc",
                ],
            );
            state(defs, &up, &["node_modules"]);
        }
        "pytest" | "unittest" | "python" => {
            if tool == "pytest" {
                for value in option_values(args, &["-c"], &["--config-file"]) {
                    if let Some(c) = value.and_then(|v| relative(&dir, &v, workspace)) {
                        defs.files.push(c);
                    }
                }
                at(
                    defs,
                    &up,
                    &[
                        "pytest.ini",
                        ".pytest.ini",
                        "pytest.toml",
                        ".pytest.toml",
                        "pyproject.toml",
                        "setup.cfg",
                        "tox.ini",
                    ],
                );
                defs.files.push("**/conftest.py".into());
                at(defs, here, &["pytest.py", "pytest", "_pytest", "py.py"]);
                state(defs, here, &[".pytest_cache"]);
            }
            if tool == "unittest" {
                at(defs, here, &["unittest.py", "unittest"]);
            }
            // The current directory is on sys.path (`python -m`): start-up hooks there run
            // before anything else.
            at(defs, here, &["sitecustomize.py", "usercustomize.py"]);
            state(defs, here, &[".venv", "venv", ".tox", ".nox"]);
        }
        "go" => at(defs, &up, &["go.mod", "go.sum", "go.work", "go.work.sum"]),
        "just" => {
            let mut named = Vec::new();
            for value in option_values(args, &["-f"], &["--justfile"]) {
                match value.and_then(|v| relative(&dir, &v, workspace)) {
                    Some(f) => {
                        defs.files.push(f.clone());
                        named.push(f);
                    }
                    None => defs.unknown.push(
                        "`just --justfile` names a file computed at run time or outside the workspace"
                            .into(),
                    ),
                }
            }
            at(defs, &up, JUSTFILES);
            at(defs, here, &["*.just", "**/*.just"]);
            let names = task_names(
                defs,
                "just",
                args,
                &["-f", "-d"],
                &[
                    "--justfile",
                    "--working-directory",
                    "--set",
                    "--shell",
                    "--dotenv-filename",
                    "--dotenv-path",
                ],
            );
            let found: Vec<(String, String)> = if named.is_empty() {
                up.iter()
                    .flat_map(|d| JUSTFILES.iter().map(move |n| (join(d, n), d.clone())))
                    .collect()
            } else {
                named.into_iter().map(|f| (f.clone(), parent(&f))).collect()
            };
            for (file, dir) in found {
                defs.scripts.push(ScriptRef {
                    kind: ScriptKind::Just,
                    file,
                    dir,
                    names: names.clone(),
                    otherwise: None,
                });
            }
        }
        "task" => {
            let mut named = Vec::new();
            for value in option_values(args, &["-t"], &["--taskfile"]) {
                match value.and_then(|v| relative(&dir, &v, workspace)) {
                    Some(f) => {
                        defs.files.push(f.clone());
                        named.push(f);
                    }
                    None => defs.unknown.push(
                        "`task --taskfile` names a file computed at run time or outside the workspace"
                            .into(),
                    ),
                }
            }
            at(defs, &up, TASKFILES);
            // Task's checksums of a task's `sources` (an up-to-date task is skipped).
            state(defs, &up, &[".task"]);
            let mut names = task_names(
                defs,
                "task",
                args,
                &["-d", "-t", "-o", "-C"],
                &[
                    "--dir",
                    "--taskfile",
                    "--output",
                    "--concurrency",
                    "--interval",
                ],
            );
            if names.is_empty() {
                names.push("default".into());
            }
            let found: Vec<(String, String)> = if named.is_empty() {
                up.iter()
                    .flat_map(|d| TASKFILES.iter().map(move |n| (join(d, n), d.clone())))
                    .collect()
            } else {
                named.into_iter().map(|f| (f.clone(), parent(&f))).collect()
            };
            for (file, dir) in found {
                defs.scripts.push(ScriptRef {
                    kind: ScriptKind::Task,
                    file,
                    dir,
                    names: names.clone(),
                    otherwise: None,
                });
            }
        }
        "gradle" => {
            at(
                defs,
                here,
                &[
                    "gradlew",
                    "gradle/**",
                    "gradle.properties",
                    "buildSrc/**",
                    "**/build.gradle",
                    "**/build.gradle.kts",
                    "**/settings.gradle",
                    "**/settings.gradle.kts",
                ],
            );
            state(defs, here, &[".gradle", "build"]);
        }
        "mvn" => {
            for value in option_values(args, &["-f"], &["--file"]) {
                if let Some(f) = value.and_then(|v| relative(&dir, &v, workspace)) {
                    defs.files.push(f);
                }
            }
            at(defs, here, &["mvnw", ".mvn/**", "**/pom.xml"]);
            state(defs, here, &["target"]);
        }
        "dotnet" => {
            at(
                defs,
                here,
                &[
                    "**/*.csproj",
                    "**/*.fsproj",
                    "**/*.vbproj",
                    "**/*.sln",
                    "**/*.slnx",
                    "**/*.props",
                    "**/*.targets",
                    "**/NuGet.config",
                    "**/nuget.config",
                ],
            );
            at(defs, &up, &["global.json"]);
            state(defs, here, &["bin", "obj"]);
        }
        _ => {}
    }
}

const JUSTFILES: &[&str] = &["justfile", "Justfile", "JUSTFILE", ".justfile"];
const TASKFILES: &[&str] = &[
    "Taskfile.yml",
    "Taskfile.yaml",
    "taskfile.yml",
    "taskfile.yaml",
    "Taskfile.dist.yml",
    "Taskfile.dist.yaml",
    "taskfile.dist.yml",
    "taskfile.dist.yaml",
];

/// The directory of a workspace-relative file.
fn parent(file: &str) -> String {
    file.rsplit_once('/')
        .map(|(d, _)| d.to_string())
        .unwrap_or_default()
}

/// The words of `args` that are not options (nor options' values, nor `NAME=value`
/// variables): the recipes or tasks a `just` or `task` command line names. A computed one is
/// said in `unknown`.
fn task_names(
    defs: &mut Definitions,
    tool: &str,
    args: &[Arg],
    short_values: &[&str],
    long_values: &[&str],
) -> Vec<String> {
    let mut names = Vec::new();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        let Some(text) = arg.as_static() else {
            defs.unknown.push(format!(
                "`{tool}` is given a word computed at run time: which entries run is not known"
            ));
            continue;
        };
        if text == "--" {
            break;
        }
        if short_values.contains(&text) || long_values.contains(&text) {
            i += 1;
        } else if !text.starts_with('-') && !text.contains('=') {
            names.push(text.to_string());
        }
    }
    names
}

/// Options of npm, pnpm and yarn that take the next word as their value.
const PACKAGE_VALUE_OPTIONS: &[&str] = &[
    "--prefix",
    "-C",
    "--dir",
    "--cwd",
    "--loglevel",
    "--registry",
    "--cache",
    "--userconfig",
    "--globalconfig",
    "--script-shell",
    "--node-options",
    "--reporter",
    "-p",
    "--package",
    "-w",
    "--workspace",
    "--filter",
    "-F",
];

/// The lifecycle scripts an install runs in the package itself (its dependencies' are build
/// state: `node_modules/`).
const INSTALL_SCRIPTS: &[&str] = &[
    "preinstall",
    "install",
    "postinstall",
    "preprepare",
    "prepare",
    "postprepare",
];

/// What an `npm`/`npx`/`pnpm`/`pnpx`/`yarn` command line (`name`, `args`, in `dir`) runs from
/// the package.json scripts (read when the step opens: [`of_scripts`]) or as a program
/// (`npx jest`, `pnpm exec vitest`: that program's definitions).
fn package_runs(
    defs: &mut Definitions,
    name: &str,
    args: &[Arg],
    dir: &str,
    up: &[String],
    workspace: &Path,
) {
    let mut words: Vec<&str> = Vec::new();
    let mut i = 0;
    let mut command_string = None;
    // The subcommand and what follows it; options before it are the tool's.
    while let Some(arg) = args.get(i) {
        let Some(text) = arg.as_static() else {
            defs.unknown.push(format!(
                "`{name}` is given a word computed at run time: which script runs is not known"
            ));
            return;
        };
        i += 1;
        if !words.is_empty() {
            words.push(text);
            continue;
        }
        if matches!(
            text,
            "-w" | "--workspace"
                | "--workspaces"
                | "-ws"
                | "-r"
                | "--recursive"
                | "--filter"
                | "-F"
        ) || text.starts_with("--workspace=")
            || text.starts_with("--filter=")
        {
            defs.unknown.push(format!(
                "`{name} {text}` runs the scripts of other packages of the workspace: their package.json files are frozen, what their scripts run is not followed"
            ));
        }
        if matches!(text, "-c" | "--call") && matches!(name, "npx" | "pnpx" | "npm") {
            command_string = args.get(i).and_then(Arg::as_static);
            i += 1;
        } else if PACKAGE_VALUE_OPTIONS.contains(&text) {
            i += 1;
        } else if !text.starts_with('-') {
            words.push(text);
        }
    }
    let run_line = |defs: &mut Definitions, words: &[&str]| {
        let line = words
            .iter()
            .map(|w| format!("'{}'", w.replace('\'', r"'\''")))
            .collect::<Vec<_>>()
            .join(" ");
        if !line.is_empty() {
            add_line(defs, &line, dir, workspace);
        }
    };
    if let Some(line) = command_string {
        add_line(defs, line, dir, workspace);
        return;
    }
    if matches!(name, "npx" | "pnpx") {
        run_line(defs, &words);
        return;
    }
    let scripts =
        |defs: &mut Definitions, names: &[&str], pre_post: bool, otherwise: Option<String>| {
            for d in up {
                defs.scripts.push(ScriptRef {
                    kind: ScriptKind::Package { pre_post },
                    file: join(d, "package.json"),
                    dir: d.clone(),
                    names: names.iter().map(|n| n.to_string()).collect(),
                    otherwise: otherwise.clone(),
                });
            }
        };
    let first = words.first().copied();
    let rest = words.get(1..).unwrap_or(&[]);
    let named = |rest: &[&str]| rest.first().map(|n| n.to_string());
    match (name, first) {
        (_, Some("test" | "t" | "tst")) => scripts(defs, &["test"], true, None),
        (_, Some(s @ ("start" | "stop"))) => scripts(defs, &[s], true, None),
        (_, Some("restart")) => scripts(defs, &["restart", "stop", "start"], true, None),
        ("npm", Some("run" | "run-script" | "rum" | "urn")) | (_, Some("run" | "run-script")) => {
            if let Some(script) = named(rest) {
                // yarn and pnpm run a program of that name when no script has it.
                let otherwise = (name != "npm").then(|| rest.join(" "));
                scripts(defs, &[&script], true, otherwise);
            }
        }
        ("npm", Some("exec" | "x")) | (_, Some("exec" | "dlx")) => run_line(defs, rest),
        (_, Some("install" | "i" | "in" | "add" | "ci" | "clean-install" | "rebuild" | "rb"))
        | ("yarn", None) => scripts(defs, INSTALL_SCRIPTS, false, None),
        (_, Some("install-test" | "it" | "install-ci-test" | "cit")) => {
            scripts(defs, INSTALL_SCRIPTS, false, None);
            scripts(defs, &["test"], true, None);
        }
        (_, Some("pack" | "publish")) => scripts(
            defs,
            &[
                "prepack",
                "prepare",
                "postpack",
                "prepublishOnly",
                "publish",
                "postpublish",
            ],
            false,
            None,
        ),
        // `yarn X` and `pnpm X`: the script X, or the program X when there is none.
        ("yarn" | "pnpm", Some(script)) if !PACKAGE_BUILTINS.contains(&script) => {
            scripts(defs, &[script], true, Some(words.join(" ")));
        }
        _ => {}
    }
}

/// Subcommands of yarn and pnpm that are not scripts (a word not among them runs a script or
/// program of that name).
const PACKAGE_BUILTINS: &[&str] = &[
    "add",
    "audit",
    "bin",
    "cache",
    "config",
    "create",
    "dedupe",
    "deploy",
    "doctor",
    "env",
    "fetch",
    "help",
    "import",
    "info",
    "init",
    "install",
    "licenses",
    "link",
    "list",
    "ls",
    "outdated",
    "pack",
    "patch",
    "prune",
    "publish",
    "rebuild",
    "remove",
    "rm",
    "root",
    "server",
    "setup",
    "store",
    "unlink",
    "up",
    "update",
    "upgrade",
    "version",
    "versions",
    "why",
    "workspace",
    "workspaces",
    "plugin",
    "set",
    "constraints",
    "dlx",
    "exec",
    "node",
    "npm",
    "stage",
    "unplug",
    "global",
    "owner",
    "login",
    "logout",
    "tag",
    "team",
];

/// What the entries of a script file run (`text`, the file `r.file` names, as it is when the
/// step opens): each entry's lines as the shell commands they are, so a package.json script
/// `jest` makes `jest.config.*` a definition, a justfile recipe's `pytest` makes `conftest.py`
/// one, and a Taskfile task's `go test` makes `go.mod` one. Files those lines name that are
/// themselves script files to read (`npm run b` inside `a`, a justfile's `import`, a
/// Taskfile's `includes`) come back in `scripts`; what cannot be known before the tool runs
/// (a computed word, an entry that is not a shell line) in `unknown`.
pub fn of_scripts(text: &str, r: &ScriptRef, workspace: &Path) -> Definitions {
    let mut defs = Definitions::default();
    match r.kind {
        ScriptKind::Package { pre_post } => {
            package_scripts(&mut defs, text, r, pre_post, workspace)
        }
        ScriptKind::Just => just_recipes(&mut defs, text, r, workspace),
        ScriptKind::Task => task_cmds(&mut defs, text, r, workspace),
    }
    finish(&mut defs);
    defs
}

/// A shell line an entry runs, from `dir`: its tools, and the scripts a shell runs by name.
fn entry_line(defs: &mut Definitions, line: &str, dir: &str, workspace: &Path) {
    let line = line.trim();
    if !line.is_empty() && !line.starts_with('#') {
        add_line(defs, line, dir, workspace);
        shell_scripts(defs, line, dir, workspace);
    }
}

fn package_scripts(
    defs: &mut Definitions,
    text: &str,
    r: &ScriptRef,
    pre_post: bool,
    workspace: &Path,
) {
    let json: serde_json::Value = match serde_json::from_str(text) {
        Ok(json) => json,
        Err(e) => {
            defs.unknown.push(format!(
                "{} is not JSON ({e}): its scripts are not followed",
                r.file
            ));
            return;
        }
    };
    let scripts = json.get("scripts");
    for (n, name) in r.names.iter().enumerate() {
        let mut run = Vec::new();
        if pre_post {
            run.push(format!("pre{name}"));
        }
        run.push(name.clone());
        if pre_post {
            run.push(format!("post{name}"));
        }
        let mut found = false;
        for script in &run {
            match scripts.and_then(|s| s.get(script)) {
                Some(serde_json::Value::String(body)) => {
                    found |= script == name;
                    entry_line(defs, body, &r.dir, workspace);
                }
                Some(_) => defs.unknown.push(format!(
                    "{}: the script `{script}` is not a string: not followed",
                    r.file
                )),
                None => {}
            }
        }
        if !found
            && n == 0
            && let Some(program) = &r.otherwise
        {
            entry_line(defs, program, &r.dir, workspace);
        }
    }
}

/// A just expression `{{ … }}` replaced by the value of a variable the justfile defines as a
/// plain string; anything else is said in `unknown`, left to the shell as a computed word.
fn just_expand(
    line: &str,
    vars: &std::collections::BTreeMap<String, String>,
    unknown: &mut Vec<String>,
) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        if let Some(escaped) = after.strip_prefix('{') {
            // `{{{{` is a literal `{{`.
            out.push_str("{{");
            rest = escaped.strip_prefix('{').unwrap_or(escaped);
            continue;
        }
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[at..]);
            return out;
        };
        let expr = after[..end].trim();
        match vars.get(expr) {
            Some(value) => out.push_str(value),
            None => {
                unknown.push(format!(
                    "`{{{{{expr}}}}}`: not a variable the justfile defines as a plain string (computed when just runs)"
                ));
                out.push_str("\"$STEPPROOF_JUST_EXPRESSION\"");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A just string literal (`'x'`, `"x"` without escapes), or `None`.
fn just_literal(value: &str) -> Option<String> {
    let value = value.trim();
    for q in ['\'', '"'] {
        if let Some(inner) = value.strip_prefix(q).and_then(|v| v.strip_suffix(q))
            && !inner.contains(q)
            && !inner.contains('\\')
        {
            return Some(inner.to_string());
        }
    }
    None
}

fn just_recipes(defs: &mut Definitions, text: &str, r: &ScriptRef, workspace: &Path) {
    let here = parent(&r.file);
    let mut vars = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with([' ', '\t'])) {
        let line = line.trim_start_matches("export ").trim();
        if let Some((name, value)) = line.split_once(":=")
            && !name.trim().contains(' ')
            && let Some(value) = just_literal(value)
        {
            vars.insert(name.trim().to_string(), value);
        }
    }
    let mut in_recipe = false;
    let mut first_body_line = false;
    let mut shebang_ok = true;
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.starts_with([' ', '\t']) {
            if !in_recipe {
                continue;
            }
            let mut body = line.trim().to_string();
            if std::mem::take(&mut first_body_line)
                && let Some(interpreter) = body.strip_prefix("#!")
            {
                // A shebang recipe: a script in that interpreter.
                let words: Vec<&str> = interpreter.split_whitespace().collect();
                let program = match words.as_slice() {
                    [env, p, ..] if basename(env) == "env" => basename(p),
                    [p, ..] => basename(p),
                    [] => "",
                };
                shebang_ok = SHELLS.contains(&program);
                if !shebang_ok {
                    defs.unknown.push(format!(
                        "{}: a recipe is a `{program}` script: what it runs is not followed",
                        r.file
                    ));
                }
                continue;
            }
            if !shebang_ok {
                continue;
            }
            while body.ends_with('\\') {
                body.pop();
                match lines.next() {
                    Some(next) => body.push_str(next.trim()),
                    None => break,
                }
            }
            let body = body.trim_start_matches(['@', '-']);
            let body = just_expand(body, &vars, &mut defs.unknown);
            entry_line(defs, &body, &r.dir, workspace);
            continue;
        }
        in_recipe = false;
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') || line.starts_with('[') {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["import" | "import?", path, ..] => match just_literal(path) {
                Some(p) => match relative(&here, &p, workspace) {
                    Some(file) => {
                        defs.files.push(file.clone());
                        defs.scripts.push(ScriptRef {
                            kind: ScriptKind::Just,
                            file,
                            dir: r.dir.clone(),
                            names: Vec::new(),
                            otherwise: None,
                        });
                    }
                    None => defs
                        .unknown
                        .push(format!("{}: `{line}` is outside the workspace", r.file)),
                },
                None => defs.unknown.push(format!(
                    "{}: `{line}` names a file computed when just runs",
                    r.file
                )),
            },
            ["mod" | "mod?", module, rest @ ..] => {
                let module = module.trim_end_matches(';');
                let files: Vec<String> = match rest.first() {
                    Some(path) => match just_literal(path) {
                        Some(p) => vec![p],
                        None => {
                            defs.unknown.push(format!(
                                "{}: `{line}` names a file computed when just runs",
                                r.file
                            ));
                            Vec::new()
                        }
                    },
                    None => ["justfile", "Justfile", ".justfile", "mod.just"]
                        .iter()
                        .map(|n| format!("{module}/{n}"))
                        .chain([format!("{module}.just")])
                        .collect(),
                };
                for f in files {
                    if let Some(file) = relative(&here, &f, workspace) {
                        defs.files.push(file.clone());
                        defs.scripts.push(ScriptRef {
                            kind: ScriptKind::Just,
                            dir: parent(&file),
                            file,
                            names: Vec::new(),
                            otherwise: None,
                        });
                    }
                }
            }
            ["set", "shell" | "script-interpreter", ..]
                if !SHELLS.iter().any(|s| {
                    line.contains(&format!("\"{s}\"")) || line.contains(&format!("'{s}'"))
                }) =>
            {
                defs.unknown.push(format!(
                    "{}: `{line}`: recipes run in a program that is not a shell: what they run is not followed",
                    r.file
                ));
            }
            ["set" | "alias" | "export", ..] => {}
            _ if line.contains(":=") => {}
            _ if line.contains(':') => {
                // A recipe header: `name params: deps`, `@name:`, `name: && after`.
                in_recipe = true;
                first_body_line = true;
                shebang_ok = true;
            }
            _ => {}
        }
    }
}

/// A Taskfile value's lines: a string is a shell line; `{cmd: …}`, `{sh: …}` and `{defer: …}`
/// hold one; `{task: NAME}` calls a task (returned in `calls`); anything else is not known.
fn task_command(
    defs: &mut Definitions,
    value: &serde_yaml_ng::Value,
    dir: &str,
    file: &str,
    calls: &mut Vec<String>,
    workspace: &Path,
) {
    use serde_yaml_ng::Value;
    match value {
        Value::String(line) => task_line(defs, line, dir, file, workspace),
        Value::Mapping(m) => {
            if let Some(Value::String(task)) = m.get("task") {
                calls.push(task.clone());
            }
            for key in ["cmd", "sh"] {
                match m.get(key) {
                    Some(Value::String(line)) => task_line(defs, line, dir, file, workspace),
                    Some(_) => defs.unknown.push(format!(
                        "{file}: a `{key}` that is not a string: not followed"
                    )),
                    None => {}
                }
            }
            if let Some(deferred) = m.get("defer") {
                task_command(defs, deferred, dir, file, calls, workspace);
            }
            if let Some(Value::Sequence(each)) = m.get("cmds") {
                for c in each {
                    task_command(defs, c, dir, file, calls, workspace);
                }
            }
        }
        _ => defs.unknown.push(format!(
            "{file}: a command that is not a string: not followed"
        )),
    }
}

/// A Taskfile command line; Go templates (`{{.VAR}}`) are computed when task runs.
fn task_line(defs: &mut Definitions, line: &str, dir: &str, file: &str, workspace: &Path) {
    let mut line = line.to_string();
    while let Some(at) = line.find("{{") {
        let end = line[at..].find("}}").map_or(line.len(), |e| at + e + 2);
        defs.unknown.push(format!(
            "{file}: `{}`: a template computed when task runs",
            &line[at..end]
        ));
        line.replace_range(at..end, "\"$STEPPROOF_TASK_TEMPLATE\"");
    }
    for l in line.lines() {
        entry_line(defs, l, dir, workspace);
    }
}

/// Dynamic variables (`vars: X: {sh: …}`) run their command when task starts.
fn task_vars(
    defs: &mut Definitions,
    vars: Option<&serde_yaml_ng::Value>,
    dir: &str,
    file: &str,
    workspace: &Path,
) {
    if let Some(serde_yaml_ng::Value::Mapping(vars)) = vars {
        for value in vars.values() {
            if let serde_yaml_ng::Value::Mapping(m) = value
                && let Some(sh) = m.get("sh")
            {
                task_command(
                    defs,
                    &serde_yaml_ng::Value::Mapping(
                        [(serde_yaml_ng::Value::from("sh"), sh.clone())]
                            .into_iter()
                            .collect(),
                    ),
                    dir,
                    file,
                    &mut Vec::new(),
                    workspace,
                );
            }
        }
    }
}

fn task_cmds(defs: &mut Definitions, text: &str, r: &ScriptRef, workspace: &Path) {
    use serde_yaml_ng::Value;
    // serde_yaml_ng bounds alias expansion and nesting (a billion laughs is an error).
    let doc: Value = match serde_yaml_ng::from_str(text) {
        Ok(doc) => doc,
        Err(e) => {
            defs.unknown.push(format!(
                "{} is not YAML task reads ({e}): its tasks are not followed",
                r.file
            ));
            return;
        }
    };
    let here = parent(&r.file);
    task_vars(defs, doc.get("vars"), &r.dir, &r.file, workspace);
    // Included Taskfiles: every task of theirs is followed (they are called as `ns:task`).
    if let Some(Value::Mapping(includes)) = doc.get("includes") {
        for include in includes.values() {
            let (path, dir) = match include {
                Value::String(p) => (Some(p.clone()), None),
                Value::Mapping(m) => (
                    m.get("taskfile")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    m.get("dir").and_then(Value::as_str).map(str::to_string),
                ),
                _ => (None, None),
            };
            let Some(path) = path.filter(|p| !p.contains("{{")) else {
                defs.unknown
                    .push(format!("{}: an include computed when task runs", r.file));
                continue;
            };
            let Some(rel) = relative(&here, &path, workspace) else {
                defs.unknown.push(format!(
                    "{}: the include `{path}` is outside the workspace",
                    r.file
                ));
                continue;
            };
            let dir = match dir.map(|d| relative(&r.dir, &d, workspace)) {
                Some(Some(d)) => d,
                Some(None) => {
                    defs.unknown.push(format!(
                        "{}: an include's `dir` is computed or outside the workspace",
                        r.file
                    ));
                    continue;
                }
                None => r.dir.clone(),
            };
            // A directory holds a Taskfile by one of its names.
            let files: Vec<String> = if rel.ends_with(".yml") || rel.ends_with(".yaml") {
                vec![rel]
            } else {
                TASKFILES.iter().map(|n| join(&rel, n)).collect()
            };
            for file in files {
                defs.files.push(file.clone());
                defs.scripts.push(ScriptRef {
                    kind: ScriptKind::Task,
                    file,
                    dir: dir.clone(),
                    names: Vec::new(),
                    otherwise: None,
                });
            }
        }
    }
    let Some(Value::Mapping(tasks)) = doc.get("tasks") else {
        return;
    };
    let mut queue: Vec<String> = if r.names.is_empty() {
        tasks
            .keys()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    } else {
        r.names.clone()
    };
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = queue.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(task) = tasks.get(name.as_str()) else {
            if !name.contains(':') {
                defs.unknown.push(format!("{}: no task `{name}` (a wildcard task or one task finds elsewhere): not followed", r.file));
            }
            continue;
        };
        let mut calls = Vec::new();
        match task {
            Value::String(_) => task_command(defs, task, &r.dir, &r.file, &mut calls, workspace),
            Value::Sequence(cmds) => {
                for c in cmds {
                    task_command(defs, c, &r.dir, &r.file, &mut calls, workspace);
                }
            }
            Value::Mapping(m) => {
                let dir = match m.get("dir") {
                    None => Some(r.dir.clone()),
                    Some(Value::String(d)) if !d.contains("{{") => relative(&r.dir, d, workspace),
                    Some(_) => None,
                };
                let Some(dir) = dir else {
                    defs.unknown.push(format!("{}: the task `{name}` runs in a directory computed or outside the workspace", r.file));
                    continue;
                };
                task_vars(defs, m.get("vars"), &dir, &r.file, workspace);
                for key in ["cmds", "preconditions", "status"] {
                    if let Some(Value::Sequence(cmds)) = m.get(key) {
                        for c in cmds {
                            task_command(defs, c, &dir, &r.file, &mut calls, workspace);
                        }
                    }
                }
                if let Some(cmd) = m.get("cmd") {
                    task_command(defs, cmd, &dir, &r.file, &mut calls, workspace);
                }
                if let Some(Value::Sequence(deps)) = m.get("deps") {
                    for d in deps {
                        match d {
                            Value::String(t) => calls.push(t.clone()),
                            Value::Mapping(dm) => match dm.get("task").and_then(Value::as_str) {
                                Some(t) => calls.push(t.to_string()),
                                None => defs.unknown.push(format!(
                                    "{}: a dependency of `{name}` that names no task",
                                    r.file
                                )),
                            },
                            _ => defs.unknown.push(format!(
                                "{}: a dependency of `{name}` that is not a task name",
                                r.file
                            )),
                        }
                    }
                }
            }
            _ => defs.unknown.push(format!(
                "{}: the task `{name}` is neither commands nor a mapping",
                r.file
            )),
        }
        for call in calls {
            if call.contains("{{") {
                defs.unknown.push(format!(
                    "{}: `{call}`: a task name computed when task runs",
                    r.file
                ));
            } else {
                queue.push(call);
            }
        }
    }
}

/// What evidence commands' definitions come to once the makefiles and script files they name
/// are read (`read`: a workspace-relative file's whole text, `None` when there is none), each
/// file and entry once, in the order found, at most `reads` reads (more is `too_many`, not a
/// part left unread): a makefile's literal includes and recipes ([`of_recipes`]), a script
/// file's entries ([`of_scripts`]), and in turn what those name. `files`: every definition
/// glob; `build_state`: what the tools of recipes and scripts reuse; `unknown`: what could not
/// be known.
pub fn follow<E>(
    commands: &[Definitions],
    workspace: &Path,
    reads: usize,
    mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>, E>,
    too_many: impl FnOnce(usize) -> E,
) -> Result<Definitions, E> {
    /// A file to read, and how to take it.
    #[derive(PartialEq, Eq, PartialOrd, Ord, Clone)]
    enum Read {
        /// A makefile, with the directory make runs in.
        Make(String, String),
        Script(ScriptRef),
    }
    let to_read = |defs: &Definitions| {
        let mut found = Vec::new();
        for tool in defs.tools.iter().filter(|t| t.tool == "make") {
            for file in defs
                .makefiles
                .iter()
                .filter(|f| tool.dir.is_empty() || f.starts_with(&format!("{}/", tool.dir)))
            {
                found.push(Read::Make(file.clone(), tool.dir.clone()));
            }
        }
        found.extend(defs.scripts.iter().cloned().map(Read::Script));
        found
    };
    let mut out = Definitions::default();
    let mut queue: Vec<Read> = Vec::new();
    for defs in commands {
        out.tools.extend(defs.tools.iter().cloned());
        out.files.extend(defs.files.iter().cloned());
        queue.extend(to_read(defs));
    }
    queue.reverse();
    let mut done = std::collections::BTreeSet::new();
    while let Some(next) = queue.pop() {
        if done.contains(&next) {
            continue;
        }
        if done.len() == reads {
            return Err(too_many(reads));
        }
        done.insert(next.clone());
        let file = match &next {
            Read::Make(file, _) => file,
            Read::Script(r) => &r.file,
        };
        let Some(bytes) = read(file)? else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let mut more = Vec::new();
        let run = match &next {
            Read::Make(_, dir) => {
                let (named, _) = make_includes(&text, dir);
                for include in named {
                    if !out.files.contains(&include) {
                        out.files.push(include.clone());
                        more.push(Read::Make(include, dir.clone()));
                    }
                }
                of_recipes(&text, dir, workspace)
            }
            Read::Script(r) => of_scripts(&text, r, workspace),
        };
        out.files.extend(run.files.iter().cloned());
        more.extend(to_read(&run));
        out.tools.extend(run.tools);
        out.build_state.extend(run.build_state);
        out.unknown.extend(run.unknown);
        more.reverse();
        queue.extend(more);
    }
    finish(&mut out);
    Ok(out)
}

/// The files a makefile's literal `include` lines name (`include`, `-include`, `sinclude`),
/// relative to `dir` (where make runs); a name with a variable or a wildcard in it cannot be
/// known before make runs and is returned in the second list.
pub fn make_includes(text: &str, dir: &str) -> (Vec<String>, Vec<String>) {
    let mut named = Vec::new();
    let mut computed = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let rest = ["include ", "-include ", "sinclude "]
            .iter()
            .find_map(|k| line.strip_prefix(k));
        let Some(rest) = rest else { continue };
        let rest = rest.split('#').next().unwrap_or("");
        for word in rest.split_whitespace() {
            if word.contains(['$', '*', '?', '[', '%']) {
                computed.push(word.to_string());
            } else if !word.starts_with('/')
                && let Some(rel) = relative(dir, word, Path::new("/"))
            {
                named.push(rel);
            }
        }
    }
    (named, computed)
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
