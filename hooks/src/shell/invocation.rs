//! A command invoked: its name resolved, `cd`, `exec` and wrappers unwrapped, shells given a script
//! walked as one, and the tools' arguments dispatched to what each one does.

use super::{
    Effect, FOREIGN_SHELLS, Invocation, MAX_DEPTH, READ, SHELLS, Stdin, Walker, trusted_location,
};
use crate::pattern::{Arg, is_env_file};

impl Walker<'_> {
    /// Dispatches a normalised simple command: wrappers are peeled, shells and `eval` have
    /// their scripts parsed, everything else is an `Exec` for the rules.
    pub(super) fn invocation(
        &mut self,
        name: String,
        args: Vec<Arg>,
        assigns: Vec<String>,
        stdin: Stdin,
    ) {
        // A program the agent may have written is never a wrapper or shell to look through,
        // whatever its name: `./env sudo id` runs `./env`.
        if name.contains('/') && !trusted_location(&name) {
            return self.exec(name, args, assigns);
        }
        let name = basename(&name).to_string();
        let statics = || -> Vec<Option<&str>> {
            args.iter()
                .map(|a| match a {
                    Arg::Static(s) => Some(s.as_str()),
                    Arg::Dynamic | Arg::Partial { .. } => None,
                })
                .collect()
        };
        match name.as_str() {
            n if super::wrappers::is_wrapper(n) => self.wrapper(name, args, assigns, stdin),
            "eval" => {
                self.assigns_only(assigns);
                match statics().into_iter().collect::<Option<Vec<_>>>() {
                    Some(parts) => self.script(&parts.join(" ")),
                    None => self.unknown("eval of text computed at run time"),
                }
            }
            "trap" => {
                self.assigns_only(assigns);
                let rest = skip_options(&args, &[]);
                match args.get(rest) {
                    Some(Arg::Static(action)) if args.len() > rest + 1 => self.script(action),
                    Some(Arg::Dynamic | Arg::Partial { .. }) => {
                        self.unknown("a trap action computed at run time")
                    }
                    _ => {}
                }
            }
            "read" | "printf" | "getopts" => {
                // Names these builtins assign a value read at run time to.
                let parsed = READ.parse(&args);
                let names: Vec<&str> = match name.as_str() {
                    "read" => parsed
                        .operands()
                        .into_iter()
                        .chain(parsed.values(&["a"]).flatten())
                        .filter_map(|a| match a {
                            Arg::Static(s) => Some(s.as_str()),
                            Arg::Dynamic | Arg::Partial { .. } => None,
                        })
                        .collect(),
                    "printf" => match (args.first(), args.get(1)) {
                        (Some(Arg::Static(v)), Some(Arg::Static(n))) if v == "-v" => vec![n],
                        _ => Vec::new(),
                    },
                    _ => match args.get(1) {
                        Some(Arg::Static(n)) => vec![n.as_str()],
                        _ => Vec::new(),
                    },
                };
                let watched: Vec<String> = names
                    .into_iter()
                    .filter(|n| super::variables::runs_programs(n))
                    .map(str::to_string)
                    .collect();
                for variable in watched {
                    self.program_variable(&variable, &Arg::Dynamic);
                }
                self.exec(name, args, assigns);
            }
            "cd" | "pushd" | "popd" => {
                self.change_directory(&args);
                self.exec(name, args, assigns);
            }
            "source" | "." => {
                self.assigns_only(assigns);
                // `source .env` reads the secrets into the shell (and is judged so first).
                let script = args.iter().find(|a| !a.static_prefix().starts_with('-'));
                if let Some(Arg::Static(path)) = script
                    && is_env_file(basename(path))
                {
                    self.file(Some(path.clone()), false);
                }
                self.unknown(format!("`{name}` runs a script file the hook cannot see"));
            }
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                // `export X=1` sets the environment of later commands.
                let mut assigns = assigns;
                for a in &args {
                    if let Arg::Static(s) = a
                        && !s.starts_with('-')
                    {
                        assigns.push(s.split('=').next().unwrap_or_default().to_string());
                    }
                }
                self.exec(name, args, assigns);
            }
            n if SHELLS.contains(&n) => self.shell(name, args, assigns, stdin),
            n if FOREIGN_SHELLS.contains(&n) => {
                self.exec(name.clone(), args.clone(), assigns);
                self.unknown(format!("`{name}` runs a script this hook cannot parse"));
            }
            _ => self.tool(name, args, assigns),
        }
    }

    fn change_directory(&mut self, args: &[Arg]) {
        let operands: Vec<&Arg> = args
            .iter()
            .filter(|a| !matches!(a, Arg::Static(s) if s.starts_with('-') && s.len() > 1))
            .collect();
        match operands.as_slice() {
            [Arg::Static(dir)] if dir != "-" => {
                self.cd = Some(match &self.cd {
                    Some(prev) if !dir.starts_with('/') => format!("{prev}/{dir}"),
                    _ => dir.clone(),
                });
            }
            // `cd` alone goes home.
            [] => self.cd = Some(self.home.to_string()),
            _ => self.lost = true,
        }
    }

    /// Keeps the environment assignments of a command that is otherwise transparent, so
    /// that `CLAUDE_CODE_SIMPLE=1 eval …` is still seen.
    pub(super) fn assigns_only(&mut self, assigns: Vec<String>) {
        if !assigns.is_empty() {
            self.exec(String::new(), Vec::new(), assigns);
        }
    }

    pub(super) fn exec(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        self.exec_changing(name, args, assigns, None, Vec::new());
    }

    /// `exec` of a command known to change something (`change` says what), writing or
    /// removing `writes` (the caller judges each as a file effect of its own).
    pub(super) fn exec_changing(
        &mut self,
        name: String,
        args: Vec<Arg>,
        assigns: Vec<String>,
        change: Option<&'static str>,
        writes: Vec<Arg>,
    ) {
        let untrusted_path = name.contains('/') && !trusted_location(&name);
        let writes = writes
            .into_iter()
            .map(|w| match w {
                Arg::Static(path) => self.after_cd(path),
                Arg::Dynamic | Arg::Partial { .. } => None,
            })
            .collect();
        self.push(Effect::Exec(Invocation {
            name: basename(&name).to_string(),
            args,
            assigns,
            untrusted_path,
            program: name,
            changes: change,
            writes,
        }));
    }

    /// Continues with the command that starts at `args[rest]`, or checks the wrapper itself
    /// when nothing follows (`env` alone prints the environment).
    pub(super) fn unwrap_rest(
        &mut self,
        name: String,
        args: Vec<Arg>,
        rest: usize,
        assigns: Vec<String>,
        stdin: Stdin,
    ) {
        if rest >= args.len() {
            self.exec(name, args, assigns);
        } else {
            self.dispatch_args(args[rest..].to_vec(), assigns, stdin);
        }
    }

    /// Treats `args[0]` as a command name and the rest as its arguments.
    pub(super) fn dispatch_args(&mut self, mut args: Vec<Arg>, assigns: Vec<String>, stdin: Stdin) {
        if self.depth >= MAX_DEPTH {
            self.unknown("commands nested too deeply to check");
            return;
        }
        match args.first() {
            Some(Arg::Static(name)) if !name.is_empty() => {
                let name = name.clone();
                args.remove(0);
                self.depth += 1;
                self.invocation(name, args, assigns, stdin);
                self.depth -= 1;
            }
            _ => self.unknown("the command name is computed at run time"),
        }
    }

    fn shell(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>, stdin: Stdin) {
        let mut command_mode = false;
        let mut i = 0;
        while i < args.len() {
            match &args[i] {
                Arg::Static(s) if s == "--" || s == "-" => {
                    i += 1;
                    break;
                }
                Arg::Static(s) if s.starts_with("--") => {
                    i += if matches!(s.as_str(), "--rcfile" | "--init-file") {
                        2
                    } else {
                        1
                    };
                }
                Arg::Static(s) if (s.starts_with('-') || s.starts_with('+')) && s.len() > 1 => {
                    let flags = &s[1..];
                    if flags.contains('c') {
                        command_mode = true;
                    }
                    i += 1;
                    if flags.contains('o') || flags.contains('O') {
                        i += 1;
                    }
                }
                _ => break,
            }
        }
        // The shell itself is transparent: what it runs is checked instead.
        self.assigns_only(assigns.clone());
        if command_mode {
            match args.get(i) {
                Some(Arg::Static(text)) => self.script(&assignment_prefix(&assigns, text)),
                Some(Arg::Dynamic | Arg::Partial { .. }) => {
                    self.unknown(format!("`{name} -c` of text computed at run time"))
                }
                None => self.unknown(format!("`{name} -c` without a command")),
            }
        } else if i < args.len() {
            self.unknown(format!("`{name}` runs a script file the hook cannot see"));
        } else {
            match stdin {
                Stdin::Static(text) => self.script(&assignment_prefix(&assigns, &text)),
                Stdin::Inherited | Stdin::Unseen => {
                    self.unknown(format!("`{name}` reads a script the hook cannot see"))
                }
            }
        }
    }
}

/// Deepest nesting of `open`…`close` in the raw text (quotes not considered: an overestimate
/// is safe). For `(`; and for `[` (array subscripts, tests): brush-parser 0.4's word parser is
/// exponential in nested subscripts (`${a[${a[${a[1]}]}]}` takes seconds at depth 6; found by
/// cargo-fuzz).
pub(super) fn pair_depth(text: &str, open: u8, close: u8) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    for c in text.bytes() {
        if c == open {
            depth += 1;
            deepest = deepest.max(depth);
        } else if c == close {
            depth = depth.saturating_sub(1);
        }
    }
    deepest
}

/// Rough nesting depth of compound constructs (`{`, `(`, `$(`, `if`, `case`, loops),
/// counted over the raw text without parsing. Both the parser and the walk recurse once per
/// level, and a stack overflow aborts the process instead of failing closed with a reason;
/// quotes are not considered, so the estimate errs high (towards unknown).
pub(super) fn nesting_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b.is_ascii_alphabetic() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            match &text[start..i] {
                "if" | "case" | "for" | "while" | "until" | "select" => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                "fi" | "esac" | "done" => depth = depth.saturating_sub(1),
                _ => {}
            }
            continue;
        }
        match b {
            b'{' | b'(' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b'}' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    deepest
}

/// Re-applies environment prefixes to a nested script so that `CLAUDE_CODE_SIMPLE=1 sh -c
/// 'claude'` still shows the assignment on the inner command.
pub(super) fn assignment_prefix(assigns: &[String], text: &str) -> String {
    if assigns.is_empty() {
        return text.to_string();
    }
    // The nested script's own commands carry the names; the values do not matter to rules.
    let mut out = String::new();
    for name in assigns {
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.is_empty() {
            out.push_str("export ");
            out.push_str(name);
            out.push_str("=1; ");
        }
    }
    out.push_str(text);
    out
}

pub(super) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The builtins whose `NAME=value` arguments are assignments.
pub(super) fn is_declaration(name: &str) -> bool {
    matches!(
        basename(name),
        "export" | "declare" | "typeset" | "local" | "readonly"
    )
}

pub(super) fn is_assignment(s: &str) -> bool {
    match s.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && !name.starts_with(|c: char| c.is_ascii_digit())
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// Index of the first operand after options; `with_value` lists options that take the next
/// argument (`--opt=value` forms take none).
pub(super) fn skip_options(args: &[Arg], with_value: &[&str]) -> usize {
    let mut i = 0;
    while i < args.len() {
        match &args[i] {
            Arg::Static(s) if s == "--" => return i + 1,
            Arg::Static(s) if s.starts_with('-') && s.len() > 1 => {
                let takes_value = with_value.contains(&s.as_str());
                i += if takes_value { 2 } else { 1 };
            }
            _ => return i,
        }
    }
    // An option missing its value at the end must not point past the arguments.
    i.min(args.len())
}

/// An operand of a removal (`rm`, `find -delete`) as the rules see it: the root written `/`
/// however it is spelt (`//`, `/.`, `/usr/..`), a glob in the root's first level written
/// `/*` (`/*`, `/.*`, `/[a-z]*`, `/{bin,usr}`), a computed operand written `…` (where it
/// writes is a `ComputedWrite`; it is not taken for the root), anything else as it is.
pub(super) fn removal_operand(arg: &Arg) -> Arg {
    let Arg::Static(path) = arg else {
        return Arg::Static(format!("{}…{}", arg.static_prefix(), arg.static_suffix()));
    };
    if !path.starts_with('/') {
        return arg.clone();
    }
    let normalized = crate::pattern::normalize(std::path::Path::new(path)).unwrap_or_default();
    if normalized == "/" {
        return Arg::Static("/".into());
    }
    // A system directory however spelt (`/usr/`, `/usr/../etc`), for the rules.
    if !normalized.contains(['*', '?', '[', '{']) {
        return Arg::Static(normalized);
    }
    let first = normalized
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default();
    if first.contains(['*', '?', '[']) || (first.contains('{') && first.contains('}')) {
        return Arg::Static("/*".into());
    }
    arg.clone()
}

/// The last path component: `/usr/bin/rm` and `./rm` name the command `rm`.
pub fn basename(name: &str) -> &str {
    let trimmed = name.trim_end_matches('/');
    trimmed
        .rsplit('/')
        .next()
        .filter(|b| !b.is_empty())
        .unwrap_or(name)
}
