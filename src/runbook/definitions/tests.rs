//! Unit tests of the definitions reader: which files each tool, script and recipe rests on.

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

/// What `run` comes to once the files (workspace-relative name, text) are read.
fn followed(run: &[&str], files: &[(&str, &str)]) -> Definitions {
    let run: Vec<String> = run.iter().map(|s| s.to_string()).collect();
    let start = of_command(&run, Path::new("/work/p"));
    follow(
        &[start],
        Path::new("/work/p"),
        128,
        |f| {
            Ok::<_, String>(
                files
                    .iter()
                    .find(|(n, _)| *n == f)
                    .map(|(_, t)| t.as_bytes().to_vec()),
            )
        },
        |n| format!("over {n}"),
    )
    .unwrap()
}

fn has(d: &Definitions, files: &[&str]) {
    for f in files {
        assert!(d.files.contains(&f.to_string()), "{f}: {d:?}");
    }
}

#[test]
fn npm_test_whose_script_runs_jest() {
    let pkg = r#"{"scripts": {"test": "jest --ci", "lint": "eslint ."}}"#;
    let d = followed(&["npm", "test"], &[("package.json", pkg)]);
    has(
        &d,
        &[
            "package.json",
            "jest.config.*",
            "babel.config.*",
            "tsconfig.json",
        ],
    );
    assert!(d.tools.iter().any(|t| t.tool == "jest"), "{d:?}");
    assert!(d.build_state.contains(&"node_modules".to_string()), "{d:?}");
    // Only the named script: `lint` is not followed.
    assert!(!d.tools.iter().any(|t| t.tool == "eslint"), "{d:?}");
    // The same through `npx`, `pnpm exec`, `yarn jest` (no such script: the program).
    for run in [
        &["npx", "jest"][..],
        &["pnpm", "exec", "jest"],
        &["yarn", "jest"],
    ] {
        let d = followed(run, &[("package.json", r#"{"scripts": {}}"#)]);
        has(&d, &["jest.config.*"]);
    }
    // `./node_modules/.bin/jest` is build state, not a definition.
    let d = followed(
        &["npm", "t"],
        &[(
            "package.json",
            r#"{"scripts": {"test": "./node_modules/.bin/vitest run"}}"#,
        )],
    );
    has(&d, &["vitest.config.*", "vite.config.*"]);
    assert!(
        !d.files.iter().any(|f| f.starts_with("node_modules")),
        "{d:?}"
    );
    assert!(d.build_state.contains(&"node_modules".to_string()), "{d:?}");
}

#[test]
fn pre_and_post_scripts_are_followed() {
    let pkg = r#"{"scripts": {"pretest": "sh ci/setup.sh", "test": "mocha", "posttest": "node ci/report.js", "prelint": "sh ci/no.sh"}}"#;
    let d = followed(&["npm", "test"], &[("package.json", pkg)]);
    has(&d, &["ci/setup.sh", ".mocharc*", "ci/report.js"]);
    assert!(!d.files.contains(&"ci/no.sh".to_string()), "{d:?}");
    // `npm run X`, `yarn X` and `pnpm run X` too.
    let pkg = r#"{"scripts": {"prex": "sh a.sh", "x": "true", "postx": "sh b.sh"}}"#;
    for run in [
        &["npm", "run", "x"][..],
        &["yarn", "x"],
        &["pnpm", "run", "x"],
    ] {
        let d = followed(run, &[("package.json", pkg)]);
        has(&d, &["a.sh", "b.sh"]);
    }
}

#[test]
fn npm_run_a_runs_npm_run_b_runs_pytest() {
    let pkg = r#"{"scripts": {"a": "npm run b --silent", "b": "cd py && python3 -m pytest -q", "c": "npm run a"}}"#;
    let d = followed(&["npm", "run", "c"], &[("package.json", pkg)]);
    has(&d, &["**/conftest.py", "py/pytest.ini", "pytest.ini"]);
    assert!(
        d.tools.iter().any(|t| t.tool == "pytest" && t.dir == "py"),
        "{d:?}"
    );
    // A cycle is read once; in a sub-directory's package.json scripts start there.
    let pkg = r#"{"scripts": {"test": "npm test && yarn --cwd web test"}}"#;
    let d = followed(
        &["npm", "test"],
        &[
            ("package.json", pkg),
            ("web/package.json", r#"{"scripts": {"test": "sh run.sh"}}"#),
        ],
    );
    has(&d, &["web/run.sh"]);
    // A computed word is said, not guessed.
    let pkg = r#"{"scripts": {"test": "$RUNNER tests", "x": "npm run $WHICH"}}"#;
    let d = followed(&["npm", "test"], &[("package.json", pkg)]);
    assert!(!d.unknown.is_empty(), "{d:?}");
    let d = followed(&["npm", "run", "x"], &[("package.json", pkg)]);
    assert!(d.unknown.iter().any(|u| u.contains("computed")), "{d:?}");
}

#[test]
fn a_justfile_recipe_running_pytest() {
    let just = "set shell := [\"bash\", \"-c\"]\npy := 'python3'\nimport 'ci/extra.just'\n\n# the tests\ntest *args: build\n    @{{py}} -m pytest -q {{args}}\n\nbuild:\n    cd rust && cargo build\n";
    let extra = "lint:\n  #!/usr/bin/env bash\n  sh ci/lint.sh\nother:\n  #!/usr/bin/env python3\n  print(1)\n";
    let d = followed(
        &["just", "test"],
        &[("justfile", just), ("ci/extra.just", extra)],
    );
    has(
        &d,
        &[
            "justfile",
            "**/conftest.py",
            "pytest.ini",
            "rust/Cargo.toml",
            "ci/extra.just",
            "ci/lint.sh",
        ],
    );
    assert!(d.build_state.contains(&"rust/target".to_string()), "{d:?}");
    // `{{args}}` is a parameter (computed), the python recipe is not followed: both said.
    let unknown = d.unknown.join("\n");
    assert!(
        unknown.contains("{{args}}") && unknown.contains("`python3` script"),
        "{d:?}"
    );
    assert!(!unknown.contains("{{py}}"), "{d:?}");
}

#[test]
fn a_taskfile_task_running_go_test() {
    let task = "version: '3'\nincludes:\n  web: ./web\ntasks:\n  default:\n    cmds: [echo hi]\n  test:\n    deps: [gen]\n    cmds:\n      - go test ./...\n      - task: lint\n  gen:\n    dir: tools\n    cmds:\n      - cmd: sh gen.sh\n  lint: golangci-lint run && sh ci/lint.sh\n  unused:\n    cmds: [sh ci/unused.sh]\n";
    let web = "version: '3'\ntasks:\n  build:\n    cmds:\n      - npm test\n";
    let d = followed(
        &["task", "test"],
        &[("Taskfile.yml", task), ("web/Taskfile.yml", web)],
    );
    has(
        &d,
        &[
            "go.mod",
            "go.sum",
            "tools/gen.sh",
            "ci/lint.sh",
            "web/Taskfile.yml",
            "package.json",
        ],
    );
    assert!(!d.files.contains(&"ci/unused.sh".to_string()), "{d:?}");
    assert!(d.tools.iter().any(|t| t.tool == "go"), "{d:?}");
    // Templates are computed; a billion laughs is no Taskfile.
    let d = followed(
        &["task", "t"],
        &[("Taskfile.yml", "tasks:\n  t:\n    cmds: ['{{.GO}} test']\n")],
    );
    assert!(d.unknown.iter().any(|u| u.contains("{{.GO}}")), "{d:?}");
    let mut laughs = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for (i, c) in "bcdefghijklmnop".chars().enumerate() {
        let p = "abcdefghijklmnop".chars().nth(i).unwrap();
        laughs.push_str(&format!(
            "{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        ));
    }
    let d = followed(&["task", "t"], &[("Taskfile.yml", &laughs)]);
    assert!(d.unknown.iter().any(|u| u.contains("not YAML")), "{d:?}");
}

#[test]
fn too_many_reads_is_an_outcome_not_a_cut() {
    let run: Vec<String> = ["make", "test"].iter().map(|s| s.to_string()).collect();
    let start = of_command(&run, Path::new("/work/p"));
    let deep = |f: &str| {
        let n: usize = f
            .trim_start_matches("m")
            .trim_end_matches(".mk")
            .parse()
            .unwrap_or(0);
        Ok::<_, String>(Some(format!("include m{}.mk\n", n + 1).into_bytes()))
    };
    let out = follow(&[start], Path::new("/work/p"), 16, deep, |n| {
        format!("over {n}")
    });
    assert_eq!(out.unwrap_err(), "over 16");
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
