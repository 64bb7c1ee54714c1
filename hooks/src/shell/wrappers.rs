//! Commands that run another command: `env`, `nice`, `timeout`, `xargs`, `find -exec`, `sudo`
//! and the like. Each is looked through with its own option grammar (checked against its
//! manual and `--help`), so that the command it runs is judged as itself.

use super::options::{Grammar, Item, Name};
use super::{Stdin, Walker, is_assignment, shell_quote};
use crate::pattern::Arg;

/// GNU env 9: `env [-i0v] [-u NAME] [-C DIR] [-S STRING] [NAME=VALUE]… [COMMAND [ARG]…]`.
const ENV: Grammar = Grammar {
    short: "+0iu:C:S:v",
    long: "ignore-environment null unset= chdir= split-string= block-signal? \
        default-signal? ignore-signal? list-signal-handling debug help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// bash's `command [-pVv] COMMAND` and `builtin`.
const COMMAND: Grammar = Grammar {
    short: "pvV",
    long: "",
    abbreviations: false,
    stop_at_operand: true,
};

/// bash's `exec [-cl] [-a NAME] COMMAND`.
const EXEC: Grammar = Grammar {
    short: "cla:",
    long: "",
    abbreviations: false,
    stop_at_operand: true,
};

/// GNU nohup: only `--help` and `--version`.
const NOHUP: Grammar = Grammar {
    short: "+",
    long: "help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// util-linux setsid: `-c`, `-f`, `-w`.
const SETSID: Grammar = Grammar {
    short: "+cfw",
    long: "ctty fork wait help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// GNU nice: `-n N` (the obsolete `-N` is a switch-like word here, which also ends it).
const NICE: Grammar = Grammar {
    short: "+n:",
    long: "adjustment= help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// GNU stdbuf: `-i`, `-o`, `-e MODE`.
const STDBUF: Grammar = Grammar {
    short: "+i:o:e:",
    long: "input= output= error= help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// util-linux ionice.
const IONICE: Grammar = Grammar {
    short: "+c:n:p:P:tu:",
    long: "class= classdata= pid= pgid= ignore uid= help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// GNU time 1.9 (`/usr/bin/time`) and bash's `time -p`.
const TIME: Grammar = Grammar {
    short: "+af:o:pqvV",
    long: "append format= output= portability quiet verbose help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// GNU timeout: options, then DURATION, then the command.
const TIMEOUT: Grammar = Grammar {
    short: "+fk:ps:v",
    long: "foreground kill-after= preserve-status signal= verbose help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// GNU xargs 4.9 (findutils' optstring `+0a:E:e::i::I:l::L:n:oprs:txP:d:`): `-e`, `-i` and
/// `-l` take only an attached value, as do `--eof`, `--replace` and `--max-lines`.
const XARGS: Grammar = Grammar {
    short: "+0a:E:e::i::I:l::L:n:oprs:txP:d:",
    long: "null arg-file= delimiter= eof? replace? max-lines? max-args= open-tty \
        interactive no-run-if-empty max-chars= show-limits verbose exit max-procs= \
        process-slot-var= help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// sudo 1.9 (its optstring `+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv`); doas, run0 and
/// pkexec take a subset of the same letters.
const SUDO: Grammar = Grammar {
    short: "+Aa:BbC:c:D:Eeg:Hh::iKklNnPp:R:r:SsT:t:U:u:Vv",
    long: "askpass auth-type= background bell close-from= login-class= chdir= chroot= \
        preserve-env? edit group= set-home help host= login remove-timestamp \
        reset-timestamp list no-update non-interactive preserve-groups prompt= role= \
        shell stdin command-timeout= type= other-user= user= version validate setenv= \
        unit= property= description= slice= nice= machine= background-color= \
        disable-internal-agent keep-cwd",
    abbreviations: true,
    stop_at_operand: true,
};

/// procps watch 4: without `-x` the words are joined and run by `sh -c`.
const WATCH: Grammar = Grammar {
    short: "+bcCd::eghn:pq:rtwxv",
    long: "beep color no-color differences? errexit chgexit equexit= interval= precise \
        no-rerun no-title no-wrap exec help version",
    abbreviations: true,
    stop_at_operand: true,
};

/// The wrappers `Walker::wrapper` looks through.
pub(super) fn is_wrapper(name: &str) -> bool {
    matches!(
        name,
        "env"
            | "command"
            | "builtin"
            | "exec"
            | "nohup"
            | "setsid"
            | "nice"
            | "stdbuf"
            | "ionice"
            | "time"
            | "timeout"
            | "xargs"
            | "busybox"
            | "sudo"
            | "doas"
            | "run0"
            | "pkexec"
            | "find"
            | "watch"
    )
}

impl Walker<'_> {
    /// Looks through a wrapper (`is_wrapper`) to the command it runs.
    pub(super) fn wrapper(
        &mut self,
        name: String,
        args: Vec<Arg>,
        assigns: Vec<String>,
        stdin: Stdin,
    ) {
        let grammar = match name.as_str() {
            "env" => return self.unwrap_env(args, assigns, stdin),
            "xargs" => return self.unwrap_xargs(args, assigns),
            "find" => return self.unwrap_find(name, args, assigns),
            "watch" => return self.unwrap_watch(name, args, assigns),
            "busybox" => {
                if args.is_empty() {
                    return self.exec(name, args, assigns);
                }
                // The applet is the command; through the depth-limited dispatch, since
                // `busybox busybox …` can repeat.
                return self.dispatch_args(args, assigns, stdin);
            }
            "command" | "builtin" => &COMMAND,
            "exec" => &EXEC,
            "nohup" => &NOHUP,
            "setsid" => &SETSID,
            "nice" => &NICE,
            "stdbuf" => &STDBUF,
            "ionice" => &IONICE,
            "time" => &TIME,
            "timeout" => &TIMEOUT,
            _ => &SUDO,
        };
        let parsed = grammar.parse(&args);
        let mut rest = parsed.rest;
        match name.as_str() {
            // `command -v x` only looks a name up; it is checked as `command` itself.
            "command" | "builtin" if parsed.has(&["v", "V"]) => {
                return self.exec(name, args, assigns);
            }
            "time" => {
                for out in parsed.values(&["o", "output"]) {
                    let path = match out {
                        Some(Arg::Static(p)) => Some(p.clone()),
                        _ => None,
                    };
                    self.file(path, true);
                }
            }
            // The first operand is the duration.
            "timeout" if rest < args.len() => rest += 1,
            "sudo" | "doas" | "run0" | "pkexec" => {
                // Checked as itself (denied by default) and for what it would run.
                self.exec(name.clone(), args.clone(), assigns);
                if rest < args.len() {
                    self.dispatch_args(args[rest..].to_vec(), Vec::new(), stdin);
                }
                return;
            }
            _ => {}
        }
        self.unwrap_rest(name, args, rest, assigns, stdin);
    }

    fn unwrap_env(&mut self, args: Vec<Arg>, mut assigns: Vec<String>, stdin: Stdin) {
        let parsed = ENV.parse(&args);
        let mut i = parsed.rest;
        let mut assigned = Vec::new();
        while let Some(Arg::Static(s)) = args.get(i) {
            if !is_assignment(s) {
                break;
            }
            let (variable, value) = s.split_once('=').unwrap_or_default();
            assigns.push(variable.to_string());
            assigned.push((variable.to_string(), value.to_string()));
            i += 1;
        }
        // `env -S 'cmd args'` splits a string into a command line, before the operands.
        if let Some(split) = parsed.values(&["S", "split-string"]).last() {
            match split {
                Some(Arg::Static(text)) => {
                    let tail = &args[i..];
                    if tail.iter().any(|a| a.is_computed()) {
                        self.unknown("env -S with arguments computed at run time");
                        return;
                    }
                    let mut line = text.clone();
                    for a in tail {
                        if let Arg::Static(a) = a {
                            line.push(' ');
                            line.push_str(&shell_quote(a));
                        }
                    }
                    self.script(&super::assignment_prefix(&assigns, &line));
                }
                _ => self.unknown("env -S of text computed at run time"),
            }
        } else if i >= args.len() {
            self.exec("env".into(), args, assigns);
        } else {
            self.dispatch_args(args[i..].to_vec(), assigns, stdin);
        }
        // After the command, so that a message names the command first.
        for (variable, value) in assigned {
            self.program_variable(&variable, &Arg::Static(value));
        }
    }

    fn unwrap_xargs(&mut self, args: Vec<Arg>, assigns: Vec<String>) {
        let parsed = XARGS.parse(&args);
        for file in parsed.values(&["a", "arg-file"]) {
            let path = match file {
                Some(Arg::Static(p)) => Some(p.clone()),
                _ => None,
            };
            self.file(path, false);
        }
        // `--process-slot-var=VAR` sets VAR in the environment of what xargs runs.
        for variable in parsed.values(&["process-slot-var"]) {
            match variable {
                Some(Arg::Static(v)) => self.program_variable(v, &Arg::Static("0".into())),
                _ => self.unknown("xargs --process-slot-var of a name computed at run time"),
            }
        }
        // With -I R (-i, --replace: R is `{}` unless attached), R in the initial arguments is
        // replaced by what xargs reads: those arguments are unknown before running.
        let replace: Option<Option<String>> =
            parsed.items.iter().rev().find_map(|item| match item {
                Item::Opt {
                    name: Name::Short('I' | 'i') | Name::Long("replace"),
                    value,
                    ..
                } => Some(match value {
                    Some(Arg::Static(r)) => Some(r.clone()),
                    Some(Arg::Dynamic | Arg::Partial { .. }) => None,
                    None => Some("{}".to_string()),
                }),
                _ => None,
            });
        let mut command: Vec<Arg> = if parsed.rest < args.len() {
            args[parsed.rest..].to_vec()
        } else {
            vec![Arg::Static("echo".into())]
        };
        match replace {
            Some(Some(r)) if !r.is_empty() => {
                for (index, arg) in command.iter_mut().enumerate() {
                    if let Arg::Static(s) = arg
                        && s.contains(&r)
                    {
                        if index == 0 {
                            self.unknown("xargs -I replaces the command name with its input");
                        }
                        *arg = Arg::Dynamic;
                    }
                }
            }
            Some(_) => {
                self.unknown("xargs -I with a replacement string computed at run time");
            }
            // xargs appends what it reads from stdin: arguments unknown before running.
            None => command.push(Arg::Dynamic),
        }
        self.dispatch_args(command, assigns, Stdin::Unseen);
    }

    fn unwrap_watch(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let parsed = WATCH.parse(&args);
        let rest = parsed.rest;
        if rest >= args.len() {
            return self.exec(name, args, assigns);
        }
        if parsed.has(&["x", "exec"]) {
            return self.dispatch_args(args[rest..].to_vec(), assigns, Stdin::Inherited);
        }
        let statics: Option<Vec<&str>> = args[rest..]
            .iter()
            .map(|a| match a {
                Arg::Static(s) => Some(s.as_str()),
                Arg::Dynamic | Arg::Partial { .. } => None,
            })
            .collect();
        match statics {
            Some(parts) => self.script(&parts.join(" ")),
            None => self.unknown("watch of a command computed at run time"),
        }
    }

    fn unwrap_find(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let mut own = Vec::new();
        let mut nested = Vec::new();
        let mut writes = Vec::new();
        let mut i = 0;
        while i < args.len() {
            match &args[i] {
                Arg::Static(s) if matches!(s.as_str(), "-exec" | "-execdir" | "-ok" | "-okdir") => {
                    own.push(args[i].clone());
                    let start = i + 1;
                    let mut end = start;
                    while end < args.len()
                        && !matches!(&args[end], Arg::Static(t) if t == ";" || t == "+")
                    {
                        end += 1;
                    }
                    let sub: Vec<Arg> = args[start..end]
                        .iter()
                        .map(|a| match a {
                            // `{}` alone is resolved below, once the starting points are known.
                            Arg::Static(s) if s.contains("{}") && s != "{}" => Arg::Dynamic,
                            other => other.clone(),
                        })
                        .collect();
                    nested.push(sub);
                    i = end + 1;
                }
                Arg::Static(s)
                    if matches!(s.as_str(), "-fprint" | "-fprint0" | "-fls" | "-fprintf") =>
                {
                    own.push(args[i].clone());
                    own.extend(args.get(i + 1).cloned());
                    let target = match args.get(i + 1) {
                        Some(Arg::Static(p)) => Some(p.clone()),
                        _ => None,
                    };
                    writes.push(target);
                    i += 2;
                }
                other => {
                    own.push(other.clone());
                    i += 1;
                }
            }
        }
        // What `{}` stands for in -exec and -ok commands: a file under the starting points,
        // written as the starting point itself when there is one (the write rules judge the
        // tree it heads: `find build -exec rm {} +` removes inside `build`); otherwise computed.
        let single_start = match find_start_positions(&own).as_slice() {
            [j] => match &own[*j] {
                Arg::Static(start) => Some(Arg::Static(start.clone())),
                _ => None,
            },
            [] => Some(Arg::Static(".".into())),
            _ => None,
        };
        for sub in &mut nested {
            for arg in sub.iter_mut() {
                if matches!(arg, Arg::Static(s) if s == "{}") {
                    *arg = single_start.clone().unwrap_or(Arg::Dynamic);
                }
            }
        }
        // `-delete` removes what it finds under the starting points (`.` when none).
        let deletes = own
            .iter()
            .any(|a| matches!(a, Arg::Static(s) if s == "-delete"));
        let positions = find_start_positions(&own);
        let mut starts: Vec<Arg> = positions.iter().map(|&j| own[j].clone()).collect();
        if deletes {
            for &j in &positions {
                // Written as removals are (`/` and `/*` for the root).
                own[j] = super::removal_operand(&own[j]);
            }
        }
        if starts.is_empty() {
            starts.push(Arg::Static(".".into()));
        }
        let shown = super::render_words(&name, &own);
        let mut written: Vec<Arg> = writes
            .iter()
            .map(|w: &Option<String>| w.clone().map_or(Arg::Dynamic, Arg::Static))
            .collect();
        let change = if deletes {
            written.extend(starts.iter().cloned());
            Some("removes files")
        } else if written.is_empty() {
            None
        } else {
            Some("writes files")
        };
        // find itself first, so that a message names it rather than what it runs.
        self.exec_changing(name, own, assigns, change, written);
        if deletes {
            for start in starts {
                match start {
                    Arg::Static(path) => self.file(Some(path), true),
                    Arg::Dynamic | Arg::Partial { .. } => self.computed_write(&shown),
                }
            }
        }
        for sub in nested {
            self.dispatch_args(sub, Vec::new(), Stdin::Inherited);
        }
        for target in writes {
            self.file(target, true);
        }
    }
}

/// Where find's starting points are among its arguments: before the first option or
/// expression (`-H`, `-L`, `-P`, `-D x`, `-O3` come before them).
fn find_start_positions(own: &[Arg]) -> Vec<usize> {
    let mut positions = Vec::new();
    let mut j = 0;
    while let Some(arg) = own.get(j) {
        match arg {
            Arg::Static(s) if s == "-D" => j += 2,
            Arg::Static(s) if matches!(s.as_str(), "-H" | "-L" | "-P") || s.starts_with("-O") => {
                j += 1
            }
            Arg::Static(s) if s.starts_with('-') || s == "(" || s == "!" => break,
            _ => {
                positions.push(j);
                j += 1;
            }
        }
    }
    positions
}
