//! The per-tool table: for each program an evidence command runs, the workspace files that
//! decide what it does and the build state it reuses.

use super::{
    Definitions, INTERPRETERS, SHELLS, ScriptKind, ScriptRef, ToolUse, add_line, is_python, join,
    program_file, relative, script_operand, upwards,
};
use std::path::Path;
use stepproof_hook::pattern::Arg;
use stepproof_hook::shell::Invocation;

/// The value of an option among `args`: `-C DIR`, `-CDIR`, `--directory=DIR`, `--directory DIR`.
pub(super) fn option_values(args: &[Arg], short: &[&str], long: &[&str]) -> Vec<Option<String>> {
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
pub(super) fn tool_dir(
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

pub(super) fn at(defs: &mut Definitions, dirs: &[String], names: &[&str]) {
    for d in dirs {
        for n in names {
            defs.files.push(join(d, n));
        }
    }
}

pub(super) fn state(defs: &mut Definitions, dirs: &[String], names: &[&str]) {
    for d in dirs {
        for n in names {
            defs.build_state.push(join(d, n));
        }
    }
}

pub(super) fn tool_use(defs: &mut Definitions, cwd: &str, inv: &Invocation, workspace: &Path) {
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

pub(super) const JUSTFILES: &[&str] = &["justfile", "Justfile", "JUSTFILE", ".justfile"];

pub(super) const TASKFILES: &[&str] = &[
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
pub(super) fn parent(file: &str) -> String {
    file.rsplit_once('/')
        .map(|(d, _)| d.to_string())
        .unwrap_or_default()
}

/// The words of `args` that are not options (nor options' values, nor `NAME=value`
/// variables): the recipes or tasks a `just` or `task` command line names. A computed one is
/// said in `unknown`.
pub(super) fn task_names(
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
pub(super) const PACKAGE_VALUE_OPTIONS: &[&str] = &[
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
pub(super) const INSTALL_SCRIPTS: &[&str] = &[
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
pub(super) fn package_runs(
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
pub(super) const PACKAGE_BUILTINS: &[&str] = &[
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
