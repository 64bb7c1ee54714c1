//! The tools that write or remove files: the writers (sort -o, tee, cp, mv, ln, mkdir, touch),
//! tar (a listing, or what it creates and extracts), rm, chmod.

use super::*;

impl Walker<'_> {
    /// Commands that write the files their options or operands name: each file is judged
    /// as a write (a computed one by the profile's default, except for `mkdir`, `touch` and
    /// `chmod`, which lose no data).
    pub(super) fn writer(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let grammar = match name.as_str() {
            "sort" => &SORT,
            "uniq" => &UNIQ,
            "tee" => &TEE,
            "cp" => &CP,
            "mv" => &MV,
            "ln" => &LN,
            "mkdir" => &MKDIR,
            "touch" => &TOUCH,
            _ => return self.chmod(name, args, assigns),
        };
        let parsed = grammar.parse(&args);
        let operands = parsed.operands();
        let target_dir: Vec<Option<&Arg>> = parsed.values(&["t", "target-directory"]).collect();
        let mut writes: Vec<Arg> = Vec::new();
        let mut reads: Vec<Arg> = Vec::new();
        // `sort --compress-program=PROG` runs PROG (and `PROG -d`) on its temporary files.
        let mut programs: Vec<Option<Arg>> = Vec::new();
        match name.as_str() {
            "sort" => {
                programs.extend(parsed.values(&["compress-program"]).map(|v| v.cloned()));
                writes.extend(parsed.values(&["o", "output"]).flatten().cloned());
                // Temporary files go there (and are removed).
                writes.extend(
                    parsed
                        .values(&["T", "temporary-directory"])
                        .flatten()
                        .cloned(),
                );
                reads.extend(
                    parsed
                        .values(&["files0-from", "random-source"])
                        .flatten()
                        .cloned(),
                );
            }
            "uniq" => writes.extend(operands.get(1).map(|a| (*a).clone())),
            "tee" | "mkdir" | "touch" => writes.extend(operands.iter().map(|a| (*a).clone())),
            "mv" => {
                // The sources are removed and the target written.
                writes.extend(operands.iter().map(|a| (*a).clone()));
                writes.extend(target_dir.iter().flatten().map(|a| (*a).clone()));
            }
            _ => {
                // cp, ln: the target is `-t DIR`, or the last of several operands; `ln TARGET`
                // alone links into the current directory under the target's name.
                if let Some(dir) = target_dir.last() {
                    writes.extend(dir.cloned());
                } else if operands.len() >= 2 {
                    writes.extend(operands.last().map(|a| (*a).clone()));
                } else if name == "ln"
                    && let Some(Arg::Static(only)) = operands.first()
                {
                    writes.push(Arg::Static(super::super::basename(only).to_string()));
                }
            }
        }
        let computed_is_asked = !matches!(name.as_str(), "mkdir" | "touch");
        let shown = super::super::render_words(&name, &args);
        writes.retain(|w| w.as_static() != Some("-"));
        let change = match name.as_str() {
            _ if writes.is_empty() => None,
            "mv" => Some("moves files"),
            "mkdir" => Some("creates directories"),
            _ => Some("writes files"),
        };
        self.exec_changing(name, args, assigns, change, writes.clone());
        for path in writes {
            match path {
                Arg::Static(p) if p == "-" => {}
                Arg::Static(p) => self.file(Some(p), true),
                Arg::Dynamic | Arg::Partial { .. } if computed_is_asked => {
                    self.computed_write(&shown)
                }
                Arg::Dynamic | Arg::Partial { .. } => {}
            }
        }
        for path in reads {
            if let Arg::Static(p) = path {
                self.file(Some(p), false);
            }
        }
        for program in programs {
            match program {
                Some(Arg::Static(program)) => self.dispatch_args(
                    vec![Arg::Static(program), Arg::Dynamic],
                    Vec::new(),
                    Stdin::Unseen,
                ),
                _ => self.unknown("`sort --compress-program` of a program computed at run time"),
            }
        }
    }

    /// tar: a listing (`tar -tf a.tar`, `tar tvf a.tar`, `tar --list --file=a.tar`) is written
    /// `tar --list …` for the rules, and changes nothing; any other mode writes (an archive, or
    /// the files it extracts), and options that run programs (`-I`, `--to-command`,
    /// `--checkpoint-action`, `--info-script`, `--rsh-command`, an archive on `host:file`) or
    /// write files of their own (`-g`, `--index-file`, `--volno-file`) keep it from being a
    /// listing. GNU tar 1.35 (`tar --help`).
    pub(super) fn tar(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        /// Short options taking a value (the next word, or the rest of a dashed cluster).
        const VALUED: &str = "bCfFgHIKLNTVX";
        const MODES: &[(&str, char)] = &[
            ("list", 't'),
            ("create", 'c'),
            ("extract", 'x'),
            ("get", 'x'),
            ("append", 'r'),
            ("update", 'u'),
            ("diff", 'd'),
            ("compare", 'd'),
            ("delete", 'D'),
            ("concatenate", 'A'),
            ("catenate", 'A'),
            ("test-label", 'L'),
        ];
        const RISKY: &[&str] = &[
            "use-compress-program",
            "to-command",
            "checkpoint-action",
            "info-script",
            "new-volume-script",
            "rsh-command",
            "rmt-command",
            "listed-incremental",
            "index-file",
            "volno-file",
        ];
        let mut modes = std::collections::BTreeSet::new();
        let mut risky = false;
        let mut archives: Vec<Arg> = Vec::new();
        let mut i = 0;
        while let Some(arg) = args.get(i) {
            i += 1;
            let Arg::Static(text) = arg else {
                // A computed word may be any option.
                risky |= i == 1 || arg.static_prefix().starts_with('-');
                continue;
            };
            if let Some(long) = text.strip_prefix("--") {
                let (option, value) = match long.split_once('=') {
                    Some((o, v)) => (o, Some(v)),
                    None => (long, None),
                };
                if let Some((_, mode)) = MODES.iter().find(|(m, _)| *m == option) {
                    modes.insert(*mode);
                } else if RISKY
                    .iter()
                    // tar takes any unambiguous abbreviation: `--rs=/bin/sh` is
                    // `--rsh-command`, `--rm` `--rmt-command`, `--vo` `--volno-file`.
                    .any(|r| r.starts_with(option) && option.len() >= 2)
                {
                    risky = true;
                } else if option == "file" {
                    archives.push(match value {
                        Some(v) => Arg::Static(v.to_string()),
                        None => {
                            i += 1;
                            args.get(i - 1).cloned().unwrap_or(Arg::Dynamic)
                        }
                    });
                }
                continue;
            }
            // The first word is an old-style cluster (`tvf`) also without its dash.
            let (cluster, old_style) = match text.strip_prefix('-') {
                Some(c) => (c, false),
                None if i == 1 => (text.as_str(), true),
                None => continue,
            };
            for (at, letter) in cluster.char_indices() {
                match letter {
                    't' => {
                        modes.insert('t');
                    }
                    'c' | 'x' | 'r' | 'u' | 'd' | 'A' => {
                        modes.insert(letter);
                    }
                    'I' | 'F' | 'g' => risky = true,
                    _ => {}
                }
                if VALUED.contains(letter) {
                    let attached = &cluster[at + letter.len_utf8()..];
                    let value = if old_style || attached.is_empty() {
                        i += 1;
                        args.get(i - 1).cloned().unwrap_or(Arg::Dynamic)
                    } else {
                        Arg::Static(attached.to_string())
                    };
                    if letter == 'f' {
                        archives.push(value);
                    }
                    if !old_style {
                        break;
                    }
                }
            }
        }
        // `host:file` is reached over rsh (unless --force-local); `-` is standard input.
        let remote = archives.iter().any(|a| match a {
            Arg::Static(a) => a.split('/').next().is_some_and(|first| first.contains(':')),
            _ => true,
        });
        let listing = modes.len() == 1 && modes.contains(&'t') && !risky && !remote;
        if listing {
            let mut written = vec![Arg::Static("--list".into())];
            written.extend(args);
            return self.exec(name, written, assigns);
        }
        self.exec_changing(
            name,
            args,
            assigns,
            Some("writes an archive or the files it holds"),
            Vec::new(),
        );
    }

    /// `rm`: its options written out (`-rf` is `-r -f`) and its operands as removals are
    /// (the root `/` however spelt, a glob in the root's first level `/*`), each operand judged
    /// as a write (a computed one by the profile's default: where it removes is not known).
    pub(super) fn remove(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let mut parsed = RM.parse(&args);
        let operands: Vec<Arg> = parsed.operands().into_iter().cloned().collect();
        for item in &mut parsed.items {
            if let Item::Operand(operand) = item {
                *operand = super::super::removal_operand(operand);
            }
        }
        let canonical = parsed.canonical();
        let shown = super::super::render_words(&name, &canonical);
        let change = (!operands.is_empty()).then_some("removes files");
        self.exec_changing(name, canonical, assigns, change, operands.clone());
        for operand in operands {
            match operand {
                Arg::Static(path) => self.file(Some(path), true),
                Arg::Dynamic | Arg::Partial { .. } => self.computed_write(&shown),
            }
        }
    }

    /// `chmod MODE FILE…` (a mode may look like an option: `-w`, `-x`) or
    /// `chmod --reference=RFILE FILE…`: the files are written.
    pub(super) fn chmod(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let mut files = Vec::new();
        let mut mode_seen = args
            .iter()
            .any(|a| matches!(a, Arg::Static(s) if s.starts_with("--ref")));
        let mut after_dashes = false;
        for arg in &args {
            match arg {
                Arg::Static(s) if s == "--" && !after_dashes => after_dashes = true,
                Arg::Static(s) if !after_dashes && s.starts_with("--") => {}
                Arg::Static(s)
                    if !after_dashes
                        && s.starts_with('-')
                        && s[1..].chars().all(|c| "cfvR".contains(c)) => {}
                _ if !mode_seen => mode_seen = true,
                other => files.push(other.clone()),
            }
        }
        let change = (!files.is_empty()).then_some("changes file modes");
        self.exec_changing(name, args, assigns, change, files.clone());
        for file in files {
            if let Arg::Static(p) = file {
                self.file(Some(p), true);
            }
        }
    }
}
