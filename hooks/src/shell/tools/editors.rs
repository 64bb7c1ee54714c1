//! The text tools that can edit or run: sed (in place, `e`, `w`) and awk (`system`, pipes,
//! redirections), and what either does to the files it names.

use super::*;

impl Walker<'_> {
    /// sed: what its scripts do besides printing (`w`, `r`, `e`, `s///w`, `s///e`) and, with
    /// `-i`, its files rewritten in place, each judged as such; sed itself is then a reader.
    pub(super) fn sed(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let parsed = SED.parse(&args);
        let mut scripts: Vec<Arg> = parsed
            .values(&["e", "expression"])
            .map(|v| v.cloned().unwrap_or(Arg::Static(String::new())))
            .collect();
        let script_file = parsed.has(&["f", "file"]);
        let mut files: Vec<Arg> = parsed.operands().into_iter().cloned().collect();
        if scripts.is_empty() && !script_file && !files.is_empty() {
            scripts.push(files.remove(0));
        }
        let in_place = parsed.has(&["i", "in-place"]);
        let shown = super::super::render_words(&name, &args);
        let mut effects = sed::SedEffects::default();
        let mut unseen = Vec::new();
        for script in &scripts {
            match script {
                Arg::Static(text) => {
                    if sed::analyze(text, &mut effects).is_none() {
                        unseen.push(format!("a sed script the hook cannot follow: `{text}`"));
                    }
                }
                _ => unseen.push("a sed script computed at run time".into()),
            }
        }
        let mut written: Vec<Arg> = effects
            .writes
            .iter()
            .filter(|w| !is_output_stream(w))
            .cloned()
            .map(Arg::Static)
            .collect();
        if in_place {
            written.extend(files.iter().filter(|f| f.as_static() != Some("-")).cloned());
        }
        let change = (!written.is_empty()).then_some("writes files");
        self.exec_changing(name, parsed.canonical(), assigns, change, written);
        if script_file {
            self.unknown("`sed -f` runs a script file the hook cannot see");
        }
        if parsed.computed_option {
            self.unknown(format!(
                "a word computed at run time stands where sed reads options (it may be -i, -e or -f): `{shown}`; put `--` before computed file names"
            ));
        }
        for why in unseen {
            self.unknown(why);
        }
        self.text_tool_effects(
            "sed",
            effects.reads,
            effects.writes,
            effects.commands,
            effects.runs_input.then(|| {
                "sed's e command runs text from its input, which the hook cannot see".into()
            }),
        );
        if in_place {
            for file in files {
                match file {
                    Arg::Static(path) if path != "-" => self.file(Some(path), true),
                    Arg::Static(_) => {}
                    Arg::Dynamic | Arg::Partial { .. } => self.computed_write(&shown),
                }
            }
        }
    }

    /// awk: what its program does besides printing (redirections, pipes, `system()`,
    /// `getline < FILE`, gawk's `@load`) and the files `-d`, `-o`, `-p` write; awk itself is
    /// then a reader.
    pub(super) fn awk(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let parsed = AWK.parse(&args);
        let mut programs: Vec<Arg> = parsed
            .values(&["e", "source"])
            .map(|v| v.cloned().unwrap_or(Arg::Static(String::new())))
            .collect();
        // `-W NAME[=VALUE]` spells gawk's long options (`-Wsource=…`, `-Wfile=…`) and mawk's own
        // (`-W exec FILE`): only those that change no input or output are followed.
        let w_other = parsed.values(&["W"]).any(|value| match value {
            Some(Arg::Static(v)) => {
                let name = v.split('=').next().unwrap_or_default();
                !AWK_W_HARMLESS.contains(&name)
            }
            _ => true,
        });
        let program_file =
            w_other || parsed.has(&["f", "file", "E", "exec", "i", "include", "l", "load"]);
        // Options end at the program (or the first file): what follows is awk's ARGV.
        let operands: Vec<Arg> = args.get(parsed.rest..).unwrap_or_default().to_vec();
        if programs.is_empty() && !program_file {
            programs.extend(operands.first().cloned());
        }
        let mut writes: Vec<String> = Vec::new();
        for (option, default) in [
            (["d", "dump-variables"], "awkvars.out"),
            (["o", "pretty-print"], "awkprof.out"),
            (["p", "profile"], "awkprof.out"),
        ] {
            for value in parsed.values(&option) {
                match value {
                    None => writes.push(default.into()),
                    Some(Arg::Static(file)) => writes.push(file.clone()),
                    Some(_) => writes.push(String::new()),
                }
            }
        }
        let shown = super::super::render_words(&name, &args);
        let mut canonical = parsed.canonical();
        canonical.extend(operands);
        let (mut reads, mut commands, mut unseen) = (Vec::new(), Vec::new(), Vec::new());
        for program in &programs {
            match program {
                Arg::Static(text) => match awk::analyze(text) {
                    Some(effects) => {
                        reads.extend(effects.reads);
                        writes.extend(effects.writes);
                        commands.extend(effects.commands);
                        unseen.extend(effects.unseen);
                        if effects.computed_write {
                            writes.push(String::new());
                        }
                    }
                    None => unseen.push(format!("an awk program the hook cannot follow: `{text}`")),
                },
                _ => unseen.push("an awk program computed at run time".into()),
            }
        }
        let written: Vec<Arg> = writes
            .iter()
            .filter(|w| !is_output_stream(w))
            .map(|w| {
                if w.is_empty() {
                    Arg::Dynamic
                } else {
                    Arg::Static(w.clone())
                }
            })
            .collect();
        let change = (!written.is_empty()).then_some("writes files");
        self.exec_changing(name, canonical, assigns, change, written);
        if program_file {
            self.unknown(
                "`awk -f` (or -E, -i, -l, -W) runs program files or options the hook cannot see",
            );
        }
        if parsed.computed_option {
            self.unknown(format!(
                "a word computed at run time stands where awk reads options (it may be -f or -o): `{shown}`; put `--` before the program"
            ));
        }
        for why in unseen {
            self.unknown(why);
        }
        if writes.iter().any(String::is_empty) {
            self.computed_write(&shown);
        }
        writes.retain(|w| !w.is_empty());
        self.text_tool_effects("awk", reads, writes, commands, None);
    }

    /// The files a sed or awk script reads and writes and the commands it runs, each judged as
    /// itself (`/dev/stdout` and `/dev/stderr` are the output, not files).
    pub(super) fn text_tool_effects(
        &mut self,
        tool: &str,
        reads: Vec<String>,
        writes: Vec<String>,
        commands: Vec<String>,
        unseen: Option<String>,
    ) {
        for path in reads {
            if path != "/dev/stdin" && path != "-" {
                self.file(Some(path), false);
            }
        }
        for path in writes {
            if !is_output_stream(&path) {
                self.file(Some(path), true);
            }
        }
        for command in commands {
            if command.trim().is_empty() {
                self.unknown(format!("{tool} runs an empty command"));
            } else {
                self.script(&command);
            }
        }
        if let Some(why) = unseen {
            self.unknown(why);
        }
    }
}
