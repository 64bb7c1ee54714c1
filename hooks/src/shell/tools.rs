//! What known tools do with their arguments beyond being themselves: the programs their
//! options start (`rg --pre`, `make --eval`, `cmake -E`, `uv run`, `sort --compress-program`),
//! each judged as itself; the files they write or remove (`sort -o`, `uniq IN OUT`, `tee`,
//! `cp`, `mv`, `rm`, `sed -i`, sed's `w`, awk's `print > F`), each judged as a write; what sed
//! and awk scripts run; and the project `.env` files a reader names, judged as read. Option
//! tables follow each tool's manual and `--help` (GNU coreutils 9, GNU sed 4.9, gawk 5).

use super::options::{Grammar, Item, Name};
use super::{Stdin, Walker, awk, sed};
use crate::pattern::{Arg, is_env_file, wildcard};

/// ripgrep 14 (crates/core/flags/defs.rs): the flags that take a value; ripgrep accepts
/// `--flag value` and `--flag=value`, and no abbreviations.
const RG: Grammar = Grammar {
    short: ".0FHILNPSUVXabchilnopqsuvwxzA:B:C:E:M:T:d:e:f:g:j:m:r:t:",
    long: "after-context= before-context= color= colors= context= context-separator= \
        dfa-size-limit= encoding= engine= field-context-separator= field-match-separator= \
        file= generate= glob= hostname-bin= hyperlink-format= iglob= ignore-file= \
        max-columns= max-count= max-depth= maxdepth= max-filesize= path-separator= pre= \
        pre-glob= regex-size-limit= regexp= replace= sort= sortr= threads= type= type-add= \
        type-clear= type-not=",
    abbreviations: false,
    stop_at_operand: false,
};

/// GNU make 4.3 (`make --help`).
const MAKE: Grammar = Grammar {
    short: "bmBC:dD::eE:f:hiI:j::kl::Lno:O::pqrRsStvwW:",
    long: "always-make directory= debug? environment-overrides eval= file= makefile= help \
        ignore-errors include-dir= jobs? keep-going load-average? max-load? \
        check-symlink-times just-print dry-run recon old-file= assume-old= output-sync? \
        print-data-base question no-builtin-rules no-builtin-variables silent quiet \
        no-silent no-keep-going stop touch trace version print-directory \
        no-print-directory what-if= new-file= assume-new= warn-undefined-variables",
    abbreviations: true,
    stop_at_operand: false,
};

/// uv's options that take a value and may stand before the subcommand (`uv --help`, uv 0.9).
const UV_GLOBAL: Grammar = Grammar {
    short: "+nqvV",
    long: "no-cache cache-dir= managed-python no-managed-python no-python-downloads quiet \
        verbose color= system-certs native-tls offline allow-insecure-host= \
        trusted-host= no-progress directory= project= config-file= no-config preview \
        no-preview isolated show-settings python-preference= help version",
    abbreviations: false,
    stop_at_operand: true,
};

/// `uv run [OPTIONS] [COMMAND]` (`uv run --help`): options end at the command.
const UV_RUN: Grammar = Grammar {
    short: "+mswUnqvp:w:i:f:P:C:",
    long: "extra= all-extras no-extra= no-dev only-dev dev group= no-group= no-default-groups \
        only-group= all-groups module no-editable no-editable-package= exact env-file= \
        no-env-file with= with-editable= with-requirements= isolated active no-active \
        no-sync locked frozen script gui-script all-packages package= no-project \
        python-platform= index= default-index= index-url= extra-index-url= find-links= \
        no-index index-strategy= keyring-provider= upgrade upgrade-package= upgrade-group= \
        resolution= prerelease= prerelease-package= fork-strategy= exclude-newer= \
        exclude-newer-package= no-sources no-sources-package= reinstall \
        reinstall-package= link-mode= compile-bytecode config-setting= \
        config-settings-package= no-build-isolation no-build-isolation-package= no-build \
        no-build-package= no-binary no-binary-package= require-build-hashes \
        no-require-build-hashes no-cache cache-dir= refresh refresh-package= python= \
        managed-python no-managed-python no-python-downloads quiet verbose color= \
        system-certs native-tls offline allow-insecure-host= no-progress directory= \
        project= config-file= no-config preview no-preview torch-backend= help",
    abbreviations: false,
    stop_at_operand: true,
};

/// `uv tool run` / `uvx [OPTIONS] [COMMAND]` (`uv tool run --help`).
const UV_TOOL_RUN: Grammar = Grammar {
    short: "+Unqvw:c:b:i:f:P:C:p:",
    long: "from= with= with-editable= with-requirements= constraints= build-constraints= \
        overrides= isolated env-file= no-env-file lfs python-platform= torch-backend= \
        index= default-index= index-url= extra-index-url= find-links= no-index \
        index-strategy= keyring-provider= upgrade upgrade-package= upgrade-group= \
        resolution= prerelease= prerelease-package= fork-strategy= exclude-newer= \
        exclude-newer-package= no-sources no-sources-package= reinstall reinstall-package= \
        link-mode= compile-bytecode config-setting= config-settings-package= \
        no-build-isolation no-build-isolation-package= no-build no-build-package= \
        no-binary no-binary-package= no-cache cache-dir= refresh refresh-package= python= \
        managed-python no-managed-python no-python-downloads quiet verbose color= \
        system-certs native-tls offline allow-insecure-host= no-progress directory= \
        project= config-file= no-config preview no-preview help",
    abbreviations: false,
    stop_at_operand: true,
};

const SORT: Grammar = Grammar {
    short: "bcCdfghik:mMno:rRsS:t:T:uVz",
    long: "ignore-leading-blanks dictionary-order ignore-case general-numeric-sort \
        ignore-nonprinting month-sort human-numeric-sort numeric-sort random-sort \
        random-source= reverse sort= version-sort batch-size= check? compress-program= debug \
        files0-from= key= merge output= stable buffer-size= field-separator= \
        temporary-directory= parallel= unique zero-terminated help version",
    abbreviations: true,
    stop_at_operand: false,
};

const UNIQ: Grammar = Grammar {
    short: "cdDf:is:uw:z",
    long: "count repeated all-repeated? skip-fields= group? ignore-case skip-chars= unique \
        zero-terminated check-chars= help version",
    abbreviations: true,
    stop_at_operand: false,
};

const TEE: Grammar = Grammar {
    short: "aip",
    long: "append ignore-interrupts output-error? help version",
    abbreviations: true,
    stop_at_operand: false,
};

const CP: Grammar = Grammar {
    short: "abdfHilLnPprRsS:t:TuvxZ",
    long: "archive attributes-only backup? copy-contents force interactive link dereference \
        no-clobber no-dereference preserve? no-preserve= parents recursive reflink? \
        remove-destination sparse= strip-trailing-slashes symbolic-link suffix= \
        target-directory= no-target-directory update? verbose one-file-system context? \
        keep-directory-symlink debug help version",
    abbreviations: true,
    stop_at_operand: false,
};

const MV: Grammar = Grammar {
    short: "bfinS:t:TuvZ",
    long: "backup? force interactive no-clobber no-copy strip-trailing-slashes suffix= \
        target-directory= no-target-directory update? verbose context exchange debug help \
        version",
    abbreviations: true,
    stop_at_operand: false,
};

const LN: Grammar = Grammar {
    short: "bdFfiLnPrsS:t:Tv",
    long: "backup? directory force interactive logical no-dereference physical relative \
        symbolic suffix= target-directory= no-target-directory verbose help version",
    abbreviations: true,
    stop_at_operand: false,
};

const MKDIR: Grammar = Grammar {
    short: "m:pvZ",
    long: "mode= parents verbose context? help version",
    abbreviations: true,
    stop_at_operand: false,
};

const TOUCH: Grammar = Grammar {
    short: "acd:fhmr:t:",
    long: "no-create date= no-dereference reference= time= help version",
    abbreviations: true,
    stop_at_operand: false,
};

/// GNU rm (coreutils 9): `--interactive[=WHEN]` and `--preserve-root[=all]` take an attached
/// value only.
const RM: Grammar = Grammar {
    short: "dfiIrRv",
    long: "force interactive? one-file-system no-preserve-root preserve-root? recursive dir \
        verbose help version",
    abbreviations: true,
    stop_at_operand: false,
};

/// GNU sed 4.9: `-i[SUFFIX]` and `--in-place[=SUFFIX]` take an attached value only.
const SED: Grammar = Grammar {
    short: "nrsuzEbe:f:i::l:",
    long: "quiet silent debug expression= file= follow-symlinks in-place? line-length= posix \
        regexp-extended separate sandbox unbuffered null-data zero-terminated binary help \
        version",
    abbreviations: true,
    stop_at_operand: false,
};

/// gawk 5 (and the POSIX options mawk and busybox share): `-d`, `-o`, `-p` write files
/// (`awkvars.out`, the pretty-printed program, `awkprof.out` unless named). Options end at
/// the program text (checked with mawk: `awk '{print}' -f` reads a file named `-f`).
const AWK: Grammar = Grammar {
    short: "F:v:f:e:E:i:l:bcCd::D::ghL::MnNo::O::p::PrsStVW:",
    long: "field-separator= assign= file= source= exec= include= load= characters-as-bytes \
        traditional copyright dump-variables? debug? gen-pot help lint? bignum use-lc-numeric \
        no-optimize optimize non-decimal-data pretty-print? profile? posix re-interval sandbox \
        lint-old version csv",
    abbreviations: true,
    stop_at_operand: true,
};

/// `awk -W` names that change no input or output (mawk's and gawk's).
const AWK_W_HARMLESS: &[&str] = &[
    "version",
    "help",
    "usage",
    "interactive",
    "posix_space",
    "posix",
    "traditional",
    "sandbox",
    "copyright",
    "csv",
    "re-interval",
    "characters-as-bytes",
    "lint",
    "lint-old",
    "no-optimize",
    "optimize",
    "bignum",
    "use-lc-numeric",
    "non-decimal-data",
    "random",
    "sprintf",
];

impl Walker<'_> {
    /// Judges a command that is not a wrapper or a shell: known tools are looked into, the
    /// rest is checked as itself.
    pub(super) fn tool(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        // First, so that a message names the secret rather than a rule about the tool.
        for path in env_file_operands(&name, &args) {
            self.file(Some(path), false);
        }
        self.tool_itself(name, args, assigns);
    }

    fn tool_itself(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let writes = reader_writes(&name, &args);
        if !writes.is_empty() {
            let shown = super::render_words(&name, &args);
            self.exec_changing(name, args, assigns, Some("writes files"), writes.clone());
            for path in writes {
                match path {
                    Arg::Static(path) => self.file(Some(path), true),
                    Arg::Dynamic | Arg::Partial { .. } => self.computed_write(&shown),
                }
            }
            return;
        }
        match name.as_str() {
            "git" => self.git(args, assigns),
            "rg" => self.ripgrep(name, args, assigns),
            "make" | "gmake" => self.make(name, args, assigns),
            "cmake" => self.cmake(name, args, assigns),
            "uv" => self.uv(name, args, assigns),
            "uvx" => self.uv_tool_run(name, args, assigns),
            "rm" => self.remove(name, args, assigns),
            "tar" => self.tar(name, args, assigns),
            "sed" => self.sed(name, args, assigns),
            "awk" | "gawk" | "mawk" | "nawk" => self.awk(name, args, assigns),
            "sort" | "uniq" | "tee" | "cp" | "mv" | "ln" | "mkdir" | "touch" | "chmod" => {
                self.writer(name, args, assigns)
            }
            _ => {
                let change = plain_change(&name, &args);
                self.exec_changing(name, args, assigns, change, Vec::new())
            }
        }
    }

    /// `rg --pre COMMAND` runs COMMAND on every file searched; `--hostname-bin` runs one
    /// program. The last of `--pre`/`--no-pre` wins.
    fn ripgrep(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
    fn make(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
    fn cmake(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
    fn uv(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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

    fn uv_tool_run(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        if args.is_empty() {
            return self.exec(name, args, assigns);
        }
        self.uv_run(&args, assigns, &UV_TOOL_RUN, true);
    }

    /// The command after `uv run`'s or `uvx`'s options; `tool`: the first word is a package's
    /// command, maybe with a version (`ruff@0.6`).
    fn uv_run(&mut self, args: &[Arg], assigns: Vec<String>, grammar: &Grammar, tool: bool) {
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

    /// Commands that write the files their options or operands name: each file is judged
    /// as a write (a computed one by the profile's default, except for `mkdir`, `touch` and
    /// `chmod`, which lose no data).
    fn writer(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
                    writes.push(Arg::Static(super::basename(only).to_string()));
                }
            }
        }
        let computed_is_asked = !matches!(name.as_str(), "mkdir" | "touch");
        let shown = super::render_words(&name, &args);
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
    fn tar(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
    fn remove(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let mut parsed = RM.parse(&args);
        let operands: Vec<Arg> = parsed.operands().into_iter().cloned().collect();
        for item in &mut parsed.items {
            if let Item::Operand(operand) = item {
                *operand = super::removal_operand(operand);
            }
        }
        let canonical = parsed.canonical();
        let shown = super::render_words(&name, &canonical);
        let change = (!operands.is_empty()).then_some("removes files");
        self.exec_changing(name, canonical, assigns, change, operands.clone());
        for operand in operands {
            match operand {
                Arg::Static(path) => self.file(Some(path), true),
                Arg::Dynamic | Arg::Partial { .. } => self.computed_write(&shown),
            }
        }
    }

    /// sed: what its scripts do besides printing (`w`, `r`, `e`, `s///w`, `s///e`) and, with
    /// `-i`, its files rewritten in place, each judged as such; sed itself is then a reader.
    fn sed(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
        let shown = super::render_words(&name, &args);
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
    fn awk(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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
        let shown = super::render_words(&name, &args);
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
    fn text_tool_effects(
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

    /// `chmod MODE FILE…` (a mode may look like an option: `-w`, `-x`) or
    /// `chmod --reference=RFILE FILE…`: the files are written.
    fn chmod(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
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

/// Whether a file a sed or awk script writes is its output rather than a file.
/// What a tool the analysis does not look into changes by its nature, so that a rule for
/// reading never vouches for it should a profile list it (the property test in
/// hooks/tests/reading_rules.rs). Where they write is not worked out: no rule allows them, so
/// the profile's default judges them as a whole.
fn plain_change(name: &str, args: &[Arg]) -> Option<&'static str> {
    match name {
        "rmdir" | "unlink" => Some("removes files"),
        "shred" => Some("overwrites or removes files"),
        "truncate" | "install" => Some("writes files"),
        "chown" | "chgrp" => Some("changes file owners"),
        // `dd` without `of=` writes to its standard output; a computed word may be `of=…`.
        "dd" if args
            .iter()
            .any(|a| a.as_static().is_none_or(|t| t.starts_with("of="))) =>
        {
            Some("writes files")
        }
        _ => None,
    }
}

fn is_output_stream(path: &str) -> bool {
    matches!(path, "/dev/stdout" | "/dev/stderr" | "-")
}

/// Commands that print, search, compare or copy the files they name: a project `.env` file
/// named as their operand is judged as read (file rules with `@env-files`). Programs that load
/// `.env` themselves and recursive searches are not seen (SECURITY.md).
const READS_OPERANDS: &[&str] = &[
    "cat",
    "tac",
    "nl",
    "head",
    "tail",
    "less",
    "more",
    "most",
    "bat",
    "batcat",
    "view",
    "grep",
    "egrep",
    "fgrep",
    "zgrep",
    "rg",
    "ag",
    "ack",
    "sed",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "cut",
    "sort",
    "uniq",
    "paste",
    "join",
    "comm",
    "diff",
    "cmp",
    "xxd",
    "od",
    "hexdump",
    "strings",
    "base64",
    "base32",
    "basenc",
    "jq",
    "yq",
    "column",
    "fold",
    "fmt",
    "pr",
    "expand",
    "unexpand",
    "iconv",
    "cp",
    "mv",
    "ln",
    "install",
    "rsync",
    "scp",
    "tar",
    "zip",
    "gzip",
    "bzip2",
    "xz",
    "zstd",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "vi",
    "vim",
    "nvim",
    "nano",
    "emacs",
];

/// Of `READS_OPERANDS`, those whose first operand is a pattern or a script unless an option
/// gives it (`grep PATTERN FILE`, `sed SCRIPT FILE`), with the options that do.
const PATTERN_FIRST: &[(&str, &str, &[&str])] = &[
    ("grep", "ef", &["regexp", "file"]),
    ("egrep", "ef", &["regexp", "file"]),
    ("fgrep", "ef", &["regexp", "file"]),
    ("zgrep", "ef", &["regexp", "file"]),
    ("rg", "ef", &["regexp", "file"]),
    ("ag", "", &[]),
    ("ack", "", &[]),
    ("sed", "ef", &["expression", "file"]),
    ("awk", "f", &["file", "source", "include", "exec"]),
    ("gawk", "f", &["file", "source", "include", "exec"]),
    ("mawk", "f", &["file"]),
    ("nawk", "f", &["file"]),
    ("jq", "", &["from-file"]),
];

/// The `.env` files `name` would read among its operands, as paths for `Walker::file`: a
/// static operand or value (`--file=.env`) whose name is one, a glob that can reach one
/// (`.env*`, `.e*`; written as the `.env` it reaches), a computed word whose static end names
/// one (`"$DIR/.env"`). Options are not parsed: every word is looked at, except the first
/// operand of a command that reads a pattern there.
fn env_file_operands(name: &str, args: &[Arg]) -> Vec<String> {
    if !READS_OPERANDS.contains(&name) {
        return Vec::new();
    }
    let mut skip_pattern = match PATTERN_FIRST.iter().find(|(n, _, _)| *n == name) {
        Some((_, letters, longs)) => !args.iter().any(|a| {
            let text = a.static_prefix();
            match text.strip_prefix("--") {
                Some(long) => {
                    let long = long.split('=').next().unwrap_or_default();
                    !long.is_empty() && longs.iter().any(|l| l.starts_with(long))
                }
                None => text.starts_with('-') && text.chars().skip(1).any(|c| letters.contains(c)),
            }
        }),
        None => false,
    };
    let mut found = Vec::new();
    let mut options_end = false;
    for arg in args {
        let text = match arg {
            Arg::Static(s) => s.clone(),
            Arg::Partial { prefix, suffix } if suffix.contains('/') => format!("{prefix}…{suffix}"),
            Arg::Partial { .. } | Arg::Dynamic => continue,
        };
        if !options_end && text == "--" {
            options_end = true;
            continue;
        }
        let candidate = if !options_end && text.starts_with('-') && text.len() > 1 {
            match text.split_once('=') {
                Some((_, value)) => value.to_string(),
                None => continue,
            }
        } else if std::mem::take(&mut skip_pattern) {
            continue;
        } else {
            text
        };
        if let Some(path) = env_file_path(&candidate) {
            found.push(path);
        }
    }
    found
}

/// `path` when its last component is a `.env` file or a glob that reaches one (then the path
/// of the `.env` it reaches).
fn env_file_path(path: &str) -> Option<String> {
    let (dir, name) = match path.rsplit_once('/') {
        Some((dir, name)) => (Some(dir), name),
        None => (None, path),
    };
    let reached = if is_env_file(name) {
        name
    } else if name.contains(['*', '?', '[']) {
        // A glob's `[…]` classes are not understood: taken as reaching the file (the
        // conservative side for a deny rule).
        [".env", ".env.local", ".env.production"]
            .into_iter()
            .find(|candidate| name.contains('[') || wildcard(name, candidate))?
    } else {
        return None;
    };
    Some(match dir {
        Some(dir) => format!("{dir}/{reached}"),
        None => reached.to_string(),
    })
}

/// The files readers write through an option or operand: `xxd IN OUT`, `tree -o FILE`,
/// `less -o FILE` / `--log-file=FILE` (`-O`, `--LOG-FILE` overwrite).
fn reader_writes(name: &str, args: &[Arg]) -> Vec<Arg> {
    let mut writes = Vec::new();
    match name {
        "xxd" => {
            // xxd's options are words of their own; these take the next one as a value.
            const VALUED: &[&str] = &[
                "-c",
                "-cols",
                "-g",
                "-groupsize",
                "-l",
                "-len",
                "-o",
                "-offset",
                "-s",
                "-seek",
                "-n",
                "-name",
            ];
            let mut operands = Vec::new();
            let mut i = 0;
            while let Some(arg) = args.get(i) {
                match arg.as_static() {
                    Some(text) if VALUED.contains(&text) => i += 1,
                    Some(text) if text.starts_with('-') && text.len() > 1 => {}
                    _ => operands.push(arg.clone()),
                }
                i += 1;
            }
            writes.extend(operands.into_iter().nth(1));
        }
        "tree" | "less" => {
            let (short, long): (&[&str], &[&str]) = if name == "tree" {
                (&["-o"], &[])
            } else {
                (&["-o", "-O"], &["--log-file", "--LOG-FILE"])
            };
            let mut i = 0;
            while let Some(arg) = args.get(i) {
                let text = arg.static_prefix();
                if arg
                    .as_static()
                    .is_some_and(|t| short.contains(&t) || long.contains(&t))
                {
                    writes.extend(args.get(i + 1).cloned());
                    i += 1;
                } else if let Some((option, _)) = text.split_once('=')
                    && long.contains(&option)
                {
                    writes.push(match arg {
                        Arg::Static(t) => Arg::Static(t[option.len() + 1..].to_string()),
                        _ => Arg::Dynamic,
                    });
                } else if let Some(attached) = short
                    .iter()
                    .find_map(|o| text.strip_prefix(o).filter(|rest| !rest.is_empty()))
                {
                    writes.push(match arg {
                        Arg::Static(_) => Arg::Static(attached.to_string()),
                        _ => Arg::Dynamic,
                    });
                }
                i += 1;
            }
        }
        _ => {}
    }
    writes
}
