//! What known tools do with their arguments beyond being themselves: the programs their
//! options start (`rg --pre`, `make --eval`, `cmake -E`, `uv run`, `sort --compress-program`),
//! each judged as itself; the files they write or remove (`sort -o`, `uniq IN OUT`, `tee`,
//! `cp`, `mv`, `rm`, `sed -i`, sed's `w`, awk's `print > F`), each judged as a write; what sed
//! and awk scripts run; and the project `.env` files a reader names, judged as read. Option
//! tables follow each tool's manual and `--help` (GNU coreutils 9, GNU sed 4.9, gawk 5).

use super::options::{Grammar, Item, Name};
use super::{Stdin, Walker, awk, sed};
use crate::pattern::{Arg, is_env_file, wildcard};

mod editors;
mod runners;
mod writers;

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
