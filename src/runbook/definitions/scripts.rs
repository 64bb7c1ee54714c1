//! Script files read: what the entries of a package.json, a justfile or a Taskfile run, as
//! the shell lines they are.

use super::tools::{TASKFILES, parent};
use super::{
    Definitions, SHELLS, ScriptKind, ScriptRef, add_line, finish, join, relative, shell_scripts,
};
use std::path::Path;
use stepproof_hook::shell::basename;

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
pub(super) fn entry_line(defs: &mut Definitions, line: &str, dir: &str, workspace: &Path) {
    let line = line.trim();
    if !line.is_empty() && !line.starts_with('#') {
        add_line(defs, line, dir, workspace);
        shell_scripts(defs, line, dir, workspace);
    }
}

pub(super) fn package_scripts(
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
pub(super) fn just_expand(
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
pub(super) fn just_literal(value: &str) -> Option<String> {
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

pub(super) fn just_recipes(defs: &mut Definitions, text: &str, r: &ScriptRef, workspace: &Path) {
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
pub(super) fn task_command(
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
pub(super) fn task_line(
    defs: &mut Definitions,
    line: &str,
    dir: &str,
    file: &str,
    workspace: &Path,
) {
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
pub(super) fn task_vars(
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

pub(super) fn task_cmds(defs: &mut Definitions, text: &str, r: &ScriptRef, workspace: &Path) {
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
