//! What build and search tools run: ripgrep's preprocessors, make's and cmake's recipes and
//! scripts, uv's projects and tools.

use super::*;

impl Walker<'_> {
    /// `rg --pre COMMAND` runs COMMAND on every file searched; `--hostname-bin` runs one
    /// program. The last of `--pre`/`--no-pre` wins.
    pub(super) fn ripgrep(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let parsed = RG.parse(&args);
        let mut pre = None;
        for item in &parsed.items {
            if let Item::Opt { name, value, .. } = item {
                match name {
                    Name::Long("pre") => pre = value.clone(),
                    Name::UnknownLong(n) if n == "no-pre" => pre = None,
                    _ => {}
                }
            }
        }
        self.exec(name, args, assigns);
        match pre {
            Some(Arg::Static(program)) if !program.is_empty() => {
                self.dispatch_args(
                    vec![Arg::Static(program), Arg::Dynamic],
                    Vec::new(),
                    Stdin::Unseen,
                );
            }
            Some(Arg::Dynamic | Arg::Partial { .. }) => {
                self.unknown("`rg --pre` of a program computed at run time")
            }
            _ => {}
        }
        for program in parsed.values(&["hostname-bin"]) {
            match program {
                Some(Arg::Static(p)) if !p.is_empty() => {
                    self.dispatch_args(vec![Arg::Static(p.clone())], Vec::new(), Stdin::Unseen);
                }
                Some(Arg::Static(_)) => {}
                _ => self.unknown("`rg --hostname-bin` of a program computed at run time"),
            }
        }
    }

    /// `make --eval=TEXT` (`-E`) adds makefile text whose recipes are shell commands; a
    /// makefile read from standard input is not seen either.
    pub(super) fn make(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let parsed = MAKE.parse(&args);
        self.exec(name, args, assigns);
        if parsed.has(&["E", "eval"]) {
            self.unknown("`make --eval` runs makefile text whose commands the hook cannot check");
        }
        for file in parsed.values(&["f", "file", "makefile"]) {
            if matches!(file, Some(Arg::Static(f)) if f == "-" || f == "/dev/stdin") {
                self.unknown("`make -f -` reads a makefile the hook cannot see");
            }
        }
    }

    /// `cmake -E COMMAND …` is a portable coreutils: each command is judged as the tool it
    /// stands for (`rm`, `cp`, …), and `env`, `chdir`, `time` run a command.
    pub(super) fn cmake(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        if args.first() != Some(&Arg::Static("-E".into())) {
            return self.exec(name, args, assigns);
        }
        let Some(Arg::Static(command)) = args.get(1) else {
            if args.len() > 1 {
                return self.unknown("a `cmake -E` command computed at run time");
            }
            return self.exec(name, args, assigns);
        };
        let operands = args[2..].to_vec();
        let as_tool = |tool: &str, options: &[&str]| {
            let mut line: Vec<Arg> = std::iter::once(tool)
                .chain(options.iter().copied())
                .map(|w| Arg::Static(w.to_string()))
                .collect();
            line.extend(operands.iter().cloned());
            line
        };
        let line = match command.as_str() {
            "chdir" => {
                // `chdir DIR COMMAND…`
                if operands.len() < 2 {
                    return self.exec(name, args, assigns);
                }
                operands[1..].to_vec()
            }
            "time" => operands.clone(),
            "env" => as_tool("env", &[]),
            "cat" => as_tool("cat", &[]),
            "echo" | "echo_append" => as_tool("echo", &[]),
            "copy" | "copy_if_different" => as_tool("cp", &[]),
            "copy_directory" | "copy_directory_if_different" => as_tool("cp", &["-r"]),
            "rename" => as_tool("mv", &[]),
            "remove" | "rm" => as_tool("rm", &[]),
            "remove_directory" => as_tool("rm", &["-r"]),
            "make_directory" => as_tool("mkdir", &["-p"]),
            "touch" | "touch_nocreate" => as_tool("touch", &[]),
            "create_symlink" => as_tool("ln", &["-s"]),
            "create_hardlink" => as_tool("ln", &[]),
            "tar" => as_tool("tar", &[]),
            "sleep" => as_tool("sleep", &[]),
            "true" => as_tool("true", &[]),
            "false" => as_tool("false", &[]),
            "md5sum" => as_tool("md5sum", &[]),
            "sha1sum" => as_tool("sha1sum", &[]),
            "sha256sum" => as_tool("sha256sum", &[]),
            // capabilities, compare_files, environment, sha224sum, …: they read and print.
            _ => return self.exec(name, args, assigns),
        };
        if line.is_empty() {
            return self.exec(name, args, assigns);
        }
        self.dispatch_args(line, assigns, Stdin::Inherited);
    }

    /// `uv run COMMAND` and `uv tool run COMMAND` run COMMAND (a `.py` file through
    /// Python); other subcommands are uv itself.
    pub(super) fn uv(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let global = UV_GLOBAL.parse(&args);
        let rest = global.rest;
        match args.get(rest) {
            Some(Arg::Static(s)) if s == "run" => {
                self.uv_run(&args[rest + 1..], assigns, &UV_RUN, false)
            }
            Some(Arg::Static(s)) if s == "tool" => match args.get(rest + 1) {
                Some(Arg::Static(t)) if t == "run" => {
                    self.uv_run(&args[rest + 2..], assigns, &UV_TOOL_RUN, true)
                }
                _ => self.exec(name, args, assigns),
            },
            Some(Arg::Dynamic | Arg::Partial { .. }) => {
                self.unknown("uv's subcommand is computed at run time")
            }
            _ => self.exec(name, args, assigns),
        }
    }

    pub(super) fn uv_tool_run(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        if args.is_empty() {
            return self.exec(name, args, assigns);
        }
        self.uv_run(&args, assigns, &UV_TOOL_RUN, true);
    }

    /// The command after `uv run`'s or `uvx`'s options; `tool`: the first word is a package's
    /// command, maybe with a version (`ruff@0.6`).
    pub(super) fn uv_run(
        &mut self,
        args: &[Arg],
        assigns: Vec<String>,
        grammar: &Grammar,
        tool: bool,
    ) {
        let parsed = grammar.parse(args);
        let mut line: Vec<Arg> = args[parsed.rest..].to_vec();
        if let Some(Arg::Static(first)) = line.first_mut()
            && first == "--"
        {
            line.remove(0);
        }
        let python = |mut rest: Vec<Arg>, prefix: &[&str]| {
            let mut out: Vec<Arg> = prefix.iter().map(|w| Arg::Static(w.to_string())).collect();
            out.append(&mut rest);
            out
        };
        if !tool && parsed.has(&["m", "module"]) {
            line = python(line, &["python", "-m"]);
        } else if !tool && parsed.has(&["s", "script", "gui-script"]) {
            line = python(line, &["python"]);
        }
        match line.first_mut() {
            None => {
                return self.exec(
                    "uv".into(),
                    vec![Arg::Static(if tool { "tool" } else { "run" }.into())],
                    assigns,
                );
            }
            Some(Arg::Static(first)) => {
                if first == "-" || first.contains("://") {
                    return self.unknown(format!(
                        "`uv run {first}` runs a script the hook cannot see"
                    ));
                }
                if tool && let Some((command, _version)) = first.split_once('@') {
                    *first = command.to_string();
                } else if !tool && (first.ends_with(".py") || first.ends_with(".pyw")) {
                    line = python(line, &["python"]);
                }
            }
            Some(Arg::Dynamic | Arg::Partial { .. }) => {}
        }
        self.dispatch_args(line, assigns, Stdin::Inherited);
    }
}
