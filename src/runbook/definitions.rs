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
    /// Build state in the workspace (directories, workspace-relative) the tools would reuse:
    /// discarded in the evidence sandbox unless the item trusts it by name.
    pub build_state: Vec<String>,
    /// What could not be known before the command runs (a computed word, a directory outside
    /// the workspace, a script a shell reads from a file it names at run time).
    pub unknown: Vec<String>,
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
            for value in option_values(args, &["-f"], &["--justfile"]) {
                if let Some(f) = value.and_then(|v| relative(&dir, &v, workspace)) {
                    defs.files.push(f);
                }
            }
            at(
                defs,
                &up,
                &["justfile", "Justfile", "JUSTFILE", ".justfile"],
            );
            at(defs, here, &["*.just", "**/*.just"]);
        }
        "task" => {
            for value in option_values(args, &["-t"], &["--taskfile"]) {
                if let Some(f) = value.and_then(|v| relative(&dir, &v, workspace)) {
                    defs.files.push(f);
                }
            }
            at(
                defs,
                &up,
                &[
                    "Taskfile.yml",
                    "Taskfile.yaml",
                    "taskfile.yml",
                    "taskfile.yaml",
                    "Taskfile.dist.yml",
                    "Taskfile.dist.yaml",
                    "taskfile.dist.yml",
                    "taskfile.dist.yaml",
                ],
            );
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
mod tests {
    use super::*;

    fn defs(run: &[&str]) -> Definitions {
        let run: Vec<String> = run.iter().map(|s| s.to_string()).collect();
        of_command(&run, Path::new("/work/p"))
    }

    #[test]
    fn make_in_its_directory_with_the_names_that_take_precedence() {
        let d = defs(&["make", "test"]);
        assert_eq!(d.makefiles, ["GNUmakefile", "makefile", "Makefile"]);
        assert!(d.files.contains(&"GNUmakefile".to_string()));
        let d = defs(&["make", "-C", "sub", "test"]);
        assert_eq!(
            d.makefiles,
            ["sub/GNUmakefile", "sub/makefile", "sub/Makefile"]
        );
        let d = defs(&["make", "--directory=a/b", "-f", "x.mk"]);
        assert_eq!(d.makefiles, ["a/b/x.mk"]);
        // Through a shell and wrappers, after a `cd`.
        let d = defs(&["sh", "-c", "cd sub && timeout 60 make test"]);
        assert_eq!(d.tools[0].dir, "sub");
        assert!(d.makefiles.contains(&"sub/Makefile".to_string()));
        let d = defs(&["make", "-C", "../elsewhere"]);
        assert!(d.tools.is_empty() && !d.unknown.is_empty());
    }

    #[test]
    fn each_tool_names_its_definitions_and_build_state() {
        let d = defs(&["cargo", "test", "--manifest-path", "crates/a/Cargo.toml"]);
        for f in [
            "crates/a/Cargo.toml",
            "Cargo.lock",
            ".cargo/config.toml",
            "rust-toolchain.toml",
            "**/build.rs",
        ] {
            assert!(d.files.contains(&f.to_string()), "{f}: {d:?}");
        }
        assert_eq!(d.build_state, ["target"]);
        let d = defs(&["npm", "--prefix", "web", "test"]);
        for f in [
            "web/package.json",
            "package.json",
            "web/.npmrc",
            "yarn.lock",
        ] {
            assert!(d.files.contains(&f.to_string()), "{f}: {d:?}");
        }
        assert!(d.build_state.contains(&"web/node_modules".to_string()));
        let d = defs(&["python3", "-m", "pytest", "-q", "tests"]);
        assert_eq!(d.tools[0].tool, "pytest");
        for f in [
            "**/conftest.py",
            "pytest.ini",
            "pyproject.toml",
            "setup.cfg",
            "tox.ini",
            "sitecustomize.py",
            "pytest.py",
        ] {
            assert!(d.files.contains(&f.to_string()), "{f}: {d:?}");
        }
        let d = defs(&["python", "-m", "unittest"]);
        assert!(d.files.contains(&"unittest.py".to_string()));
        assert!(
            defs(&["go", "test", "./..."])
                .files
                .contains(&"go.work".into())
        );
        assert!(defs(&["just", "test"]).files.contains(&".justfile".into()));
        assert!(
            defs(&["task", "test"])
                .files
                .contains(&"Taskfile.yml".into())
        );
        assert!(
            defs(&["./gradlew", "test"])
                .files
                .contains(&"gradlew".into())
        );
        assert!(defs(&["mvn", "test"]).files.contains(&".mvn/**".into()));
        assert!(
            defs(&["dotnet", "test"])
                .files
                .contains(&"**/Directory.Build.props".replace("Directory.Build.", "*."))
        );
    }

    #[test]
    fn a_program_in_the_workspace_is_a_definition() {
        assert_eq!(defs(&["./run-tests.sh"]).files, ["run-tests.sh"]);
        assert_eq!(defs(&["bin/x", "--all"]).files, ["bin/x"]);
        assert_eq!(
            defs(&["sh", "tests/test_calc.sh"]).files,
            ["tests/test_calc.sh"]
        );
        assert_eq!(defs(&["/work/p/ci/t.sh"]).files, ["ci/t.sh"]);
        // A shell's `-e` is errexit, not a script given inline.
        assert_eq!(defs(&["sh", "-e", "ci/t.sh"]).files, ["ci/t.sh"]);
        assert!(defs(&["/usr/bin/true"]).files.is_empty());
        assert!(defs(&["python3", "t.py"]).files.contains(&"t.py".into()));
    }

    #[test]
    fn literal_includes_are_found() {
        let text = "include common.mk\n-include local.mk other.mk # x\nsinclude $(X).mk\nall:\n\techo include no\n";
        let (named, computed) = make_includes(text, "sub");
        assert_eq!(named, ["sub/common.mk", "sub/local.mk", "sub/other.mk"]);
        assert_eq!(computed, ["$(X).mk"]);
    }

    #[test]
    fn what_the_recipes_run_defines_it_too() {
        let text = "PY = python3\n.PHONY: test\ntest: build\n\t@python3 -m pytest -q\n\t-cd rust && PATH=/opt/x:$$PATH cargo test \\\n\t  --offline\nnode: ; npm test\nsub:\n\t$(MAKE) -C web check\nvar:\n\t$(PY) -m unittest\n";
        let d = of_recipes(text, "", Path::new("/work/p"));
        for f in [
            "**/conftest.py",
            "pytest.ini",
            "rust/Cargo.toml",
            "**/build.rs",
            "package.json",
            "web/GNUmakefile",
            "web/Makefile",
        ] {
            assert!(d.files.contains(&f.to_string()), "{f}: {d:?}");
        }
        assert!(d.makefiles.contains(&"web/Makefile".to_string()), "{d:?}");
        for s in ["rust/target", "node_modules", ".venv"] {
            assert!(d.build_state.contains(&s.to_string()), "{s}: {d:?}");
        }
        let tools: Vec<&str> = d.tools.iter().map(|t| t.tool).collect();
        assert_eq!(
            tools,
            ["pytest", "cargo", "npm", "make", "unittest"],
            "{d:?}"
        );
        // A variable defined literally is expanded: `$(PY) -m unittest` runs unittest.
        assert!(d.files.contains(&"unittest.py".to_string()), "{d:?}");
        assert!(d.unknown.is_empty(), "{d:?}");
        // In a sub-directory's makefile, recipes start there.
        let d = of_recipes(
            "t:\n\tsh run.sh\n\tcd ci && bash -e check.sh\n",
            "sub",
            Path::new("/work/p"),
        );
        assert_eq!(d.files, ["sub/run.sh", "sub/ci/check.sh"]);
    }

    #[test]
    fn make_variables_defined_literally_find_the_tool() {
        let text = "PYTEST = python3 -m pytest\nCARGO := cargo\nGO ?= go\nGO ?= other\nFLAGS = -q\nFLAGS += -x\nRUNNER = $(shell which x)\ntest:\n\t$(PYTEST) $(FLAGS)\n\tcd rust && ${CARGO} test\n\t$(GO) test ./...\nodd:\n\t$(RUNNER) t\n\t$(NOWHERE) t\n\techo $@ $$HOME\n";
        let d = of_recipes(text, "", Path::new("/work/p"));
        let tools: Vec<&str> = d.tools.iter().map(|t| t.tool).collect();
        assert_eq!(tools, ["pytest", "cargo", "go"], "{d:?}");
        assert!(d.files.contains(&"**/conftest.py".to_string()), "{d:?}");
        assert!(d.files.contains(&"rust/Cargo.toml".to_string()), "{d:?}");
        // Computed and undefined ones are said, not guessed.
        let unknown = d.unknown.join("\n");
        assert!(
            unknown.contains("`$(RUNNER)`") && unknown.contains("`$(NOWHERE)`"),
            "{d:?}"
        );
        assert!(
            !unknown.contains("PYTEST") && !unknown.contains("`$(FLAGS)`"),
            "{d:?}"
        );
        assert_eq!(
            make_variables(text).get("FLAGS"),
            Some(&Some("-q -x".to_string()))
        );
        assert_eq!(
            make_variables(text).get("GO"),
            Some(&Some("go".to_string()))
        );
    }

    #[test]
    fn only_a_glob_that_names_a_file_makes_it_the_work() {
        assert!(names_file("Makefile", "Makefile"));
        assert!(names_file("**/conftest.py", "tests/conftest.py"));
        assert!(names_file("*.mk", "common.mk"));
        assert!(!names_file("**", "Makefile"));
        assert!(!names_file("tests/**", "tests/conftest.py"));
        assert!(!names_file("Makefile", "GNUmakefile"));
    }
}
