//! What a Bash command does, found by parsing it (brush-parser) and walking the syntax tree.
//!
//! The walk flattens every construct (pipelines, lists, subshells, groups, loops, `case`,
//! functions, command and process substitutions, here-documents, `sh -c` strings, `eval`) into
//! a list of `Effect`s: the simple commands that would run, with wrappers such as `env` or
//! `timeout` peeled off, and the files redirections touch. Anything the hook cannot know
//! before the command runs becomes `Effect::Unknown`, which the policy judges with its
//! `unknown` decision: being unsure never turns into an allow.

use std::collections::BTreeSet;

use brush_parser::ast;
use brush_parser::word;

use crate::pattern::Arg;

mod awk;
mod git;
mod invocation;
mod options;
mod sed;
mod tools;
mod variables;
mod words;
mod wrappers;

pub use invocation::basename;
use invocation::{
    assignment_prefix, is_assignment, is_declaration, nesting_depth, pair_depth, removal_operand,
    shell_quote,
};
pub use variables::program_variables;
pub(crate) use words::render_words;
use words::{expand_braces, has_unquoted_expansion_chars, is_brace_expansion, is_fd_word};

/// One thing a command line would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// A simple command that would run.
    Exec(Invocation),
    /// A file a redirection reads (`< path`).
    Read(String),
    /// A file a redirection writes (`> path`, `>> path`, `&> path`).
    Write(String),
    /// Something that cannot be known statically; the text says what, for the model.
    Unknown(String),
    /// A file written or removed whose path is computed at run time (`rm "$f"`): the command
    /// is known, where it writes is not, so the profile's default decides. The text names
    /// the command.
    ComputedWrite(String),
}

/// A simple command after normalisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The command name as a basename (`/usr/bin/rm`, `\rm`, `"rm"` → `rm`); empty for a
    /// line that only assigns variables.
    pub name: String,
    /// The arguments after the name.
    pub args: Vec<Arg>,
    /// Names of the environment variables assigned for this command (`X=1 cmd`,
    /// `env X=1 cmd`, `export X=1`).
    pub assigns: Vec<String>,
    /// The name was a path outside the system's program directories (`./ls`,
    /// `/work/project/cargo`): a program the agent may have written. Deny and ask rules
    /// still see its basename; allow rules do not vouch for it.
    pub untrusted_path: bool,
    /// The name as written, before it became a basename (`/run/stepproof/stepproof`).
    pub program: String,
    /// What the command is known to change (`"removes files"`, `"deletes a branch"`); `None`
    /// when the analysis knows of no change. A rule marked `changes_nothing` never vouches for
    /// a command that changes something, so that its reason ("reading … changes nothing") stays
    /// true.
    pub changes: Option<&'static str>,
    /// The paths the command writes or removes, as the file rules judge them (a relative one as
    /// written, after a `cd` the walk followed); `None` for one computed at run time. A rule
    /// marked `except_disposable` looks at them.
    pub writes: Vec<Option<String>>,
}

/// Directories whose programs are the system's (read-only in the sandbox), so that
/// `/usr/bin/git` is `git` for allow rules too.
const TRUSTED_DIRS: &[&str] = &[
    "/bin",
    "/sbin",
    "/usr/bin",
    "/usr/sbin",
    "/usr/local/bin",
    "/usr/local/sbin",
];

/// Whether a path-qualified command name lies in a system program directory (after `..`);
/// `~/…` stays symbolic (see `analyze`), so the home's program directories are matched as
/// written.
fn trusted_location(path: &str) -> bool {
    let (in_home, absolute) = match path.strip_prefix("~/") {
        Some(rest) => (true, format!("/{rest}")),
        None => (false, path.to_string()),
    };
    let Some(normalized) = crate::pattern::normalize(std::path::Path::new(&absolute)) else {
        return false;
    };
    let dir = normalized.rsplit_once('/').map_or("", |(d, _)| d);
    let dir = if dir.is_empty() { "/" } else { dir };
    if in_home {
        ["/.cargo/bin", "/.local/bin", "/go/bin"].contains(&dir)
    } else {
        TRUSTED_DIRS.contains(&dir)
    }
}

/// How deep `sh -c`, `eval` and substitutions may nest before the hook gives up (unknown).
const MAX_DEPTH: usize = 24;
/// How many effects one command line may produce before the hook gives up (unknown).
const MAX_EFFECTS: usize = 4096;
/// Deepest parenthesis nesting the parser is given (see `Walker::script`).
const MAX_PAREN_DEPTH: usize = 10;
/// Deepest `[` nesting the parser is given (see `pair_depth`).
const MAX_BRACKET_DEPTH: usize = 3;
/// Deepest nesting of compound constructs the parser is given (see `nesting_depth`).
const MAX_NESTING: usize = 48;

/// bash's `read [-ers] [-a ARRAY] [-d DELIM] [-i TEXT] [-n N] [-N N] [-p PROMPT] [-t T]
/// [-u FD] [NAME…]`.
const READ: options::Grammar = options::Grammar {
    short: "ersa:d:i:n:N:p:t:u:",
    long: "",
    abbreviations: false,
    stop_at_operand: false,
};

const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "posh", "yash",
];
/// Shells whose syntax differs too much from bash for the parser to vouch for a `-c` string.
const FOREIGN_SHELLS: &[&str] = &["fish", "csh", "tcsh", "nu", "elvish", "xonsh", "pwsh"];

/// Where a command's standard input comes from, which matters for shells reading a script.
#[derive(Debug, Clone)]
enum Stdin {
    /// Inherited from the tool (nothing the hook can see).
    Inherited,
    /// The text of a here-document or here-string known before running.
    Static(String),
    /// A pipe, a file or an expanded here-document: not known.
    Unseen,
}

/// Analyses a command line; it never fails: errors become `Effect::Unknown`. A tilde stays
/// symbolic (`~/x` is the text `~/x`, `cd` alone goes to `~`): the policy resolves `~/` in
/// paths against the home it was compiled for, and the analysis needs nothing from the
/// policy, so the hook can run it before loading the policy (to load only what it needs).
pub fn analyze(command: &str) -> Vec<Effect> {
    analyze_with_tmpdir(command, None)
}

/// `analyze`, with `$TMPDIR` (plain, or `${TMPDIR}`) standing for `tmpdir`, the sandbox's
/// value, which the Bash tool's shell shares with the hook. Only when the line never assigns,
/// reads into, unsets or otherwise names TMPDIR (so its value is the environment's), and the
/// value is an absolute path a shell would not split or glob.
pub fn analyze_with_tmpdir(command: &str, tmpdir: Option<&str>) -> Vec<Effect> {
    let plain = |value: &&str| {
        value.starts_with('/')
            && value.len() > 1
            && !value.contains(|c: char| c.is_whitespace() || "*?[]{}$`\\'\"".contains(c))
    };
    let only_expanded = command.match_indices("TMPDIR").all(|(at, _)| {
        let before = &command[..at];
        before.ends_with('$') || before.ends_with("${")
    }) && !command.contains("${TMPDIR:")
        && !command.contains("${TMPDIR[");
    let tmpdir = tmpdir.filter(plain).filter(|_| only_expanded);
    let mut walker = Walker {
        home: "~",
        tmpdir: tmpdir.map(str::to_string),
        effects: Vec::new(),
        functions: BTreeSet::new(),
        depth: 0,
        cd: None,
        lost: false,
        simple_start: 0,
        source: String::new(),
    };
    walker.script(command);
    let Walker {
        mut effects,
        functions,
        ..
    } = walker;
    // A call to a function defined in the same line is checked through its body, which the
    // walk already flattened; the call itself runs nothing else.
    effects.retain(|e| !matches!(e, Effect::Exec(inv) if functions.contains(&inv.name)));
    effects
}

struct Walker<'a> {
    home: &'a str,
    /// What `$TMPDIR` stands for (see `analyze_with_tmpdir`); `None`: computed.
    tmpdir: Option<String>,
    effects: Vec<Effect>,
    functions: BTreeSet<String>,
    depth: usize,
    /// Where `cd` moved the shell: `Some(prefix)` for a static move (relative redirections
    /// are resolved against it), `None` before any `cd` or after one the hook cannot follow
    /// (then `lost` is set and relative redirections become unknown).
    cd: Option<String>,
    lost: bool,
    /// Index of the first effect of the simple command being walked.
    simple_start: usize,
    /// The script being walked, to look at the source of ambiguous nodes.
    source: String,
}

/// Runs a brush-parser call, turning a panic inside it into `None` (cargo-fuzz found an
/// `unwrap` on an overflowing fd number): the caller then reports the text as unknown.
fn guarded<T>(parse: impl FnOnce() -> Option<T>) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or(None)
}

fn parser_options() -> brush_parser::ParserOptions {
    brush_parser::ParserOptions::default()
}

impl Walker<'_> {
    fn push(&mut self, effect: Effect) {
        if self.effects.len() < MAX_EFFECTS {
            self.effects.push(effect);
        } else if !matches!(self.effects.last(), Some(Effect::Unknown(_))) {
            self.effects.push(Effect::Unknown(
                "the command line is too large to check".into(),
            ));
        }
    }

    fn unknown(&mut self, why: impl Into<String>) {
        self.push(Effect::Unknown(why.into()));
    }

    /// A write or removal at a path computed at run time, by the command `shown`.
    fn computed_write(&mut self, shown: &str) {
        self.push(Effect::ComputedWrite(shown.to_string()));
    }

    /// Parses and walks a whole script (the tool's command, a `-c` string, a here-document).
    fn script(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            self.unknown("commands nested too deeply to check");
            return;
        }
        // brush-parser 0.4 backtracks exponentially on unclosed parentheses (found by
        // cargo-fuzz: `(( x=((((((…` takes minutes; depth 15 in a here-document took 0.2 s).
        // No real command nests this deep, so a resource guard, not a judgement of meaning:
        // too deep is unknown.
        if pair_depth(text, b'(', b')') > MAX_PAREN_DEPTH
            || nesting_depth(text) > MAX_NESTING
            || pair_depth(text, b'[', b']') > MAX_BRACKET_DEPTH
        {
            self.unknown("constructs nested too deeply to check");
            return;
        }
        // brush-parser 0.4's tokenizer loops forever (growing memory) on an unterminated
        // `${` while a here-document is pending (cargo-fuzz: `$(<< <${`). Such text cannot be
        // valid shell, so refusing it before the parser sees it loses nothing.
        if text.contains("<<") && text.matches("${").count() > text.matches('}').count() {
            self.unknown("an unterminated ${…} the hook cannot parse");
            return;
        }
        self.depth += 1;
        let parsed = guarded(|| {
            brush_parser::Parser::new(std::io::Cursor::new(text.as_bytes()), &parser_options())
                .parse_program()
                .ok()
        });
        match parsed {
            Some(program) => {
                let outer = std::mem::replace(&mut self.source, text.to_string());
                for complete in &program.complete_commands {
                    self.compound_list(complete);
                }
                self.source = outer;
            }
            None => self.unknown("the shell command does not parse"),
        }
        self.depth -= 1;
    }

    fn compound_list(&mut self, list: &ast::CompoundList) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) {
        for (index, command) in pipeline.seq.iter().enumerate() {
            let stdin = if index == 0 {
                Stdin::Inherited
            } else {
                Stdin::Unseen
            };
            self.command(command, stdin);
        }
    }

    fn command(&mut self, command: &ast::Command, stdin: Stdin) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, stdin),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound);
                if let Some(redirects) = redirects {
                    for r in &redirects.0 {
                        self.redirect(r);
                    }
                }
            }
            ast::Command::Function(def) => {
                match self.static_word(&def.fname.value) {
                    Some(name) => {
                        self.functions.insert(name);
                    }
                    None => self.unknown("a function name is computed at run time"),
                }
                let ast::FunctionBody(body, redirects) = &def.body;
                if let Some(redirects) = redirects {
                    for r in &redirects.0 {
                        self.redirect(r);
                    }
                }
                self.compound(body);
            }
            ast::Command::ExtendedTest(test, redirects) => {
                if let Some(redirects) = redirects {
                    for r in &redirects.0 {
                        self.redirect(r);
                    }
                }
                self.extended_test(&test.expr);
            }
        }
    }

    fn extended_test(&mut self, expr: &ast::ExtendedTestExpr) {
        match expr {
            ast::ExtendedTestExpr::And(a, b) | ast::ExtendedTestExpr::Or(a, b) => {
                self.extended_test(a);
                self.extended_test(b);
            }
            ast::ExtendedTestExpr::Not(a) | ast::ExtendedTestExpr::Parenthesized(a) => {
                self.extended_test(a)
            }
            ast::ExtendedTestExpr::UnaryTest(_, w) => {
                self.word(&w.value);
            }
            ast::ExtendedTestExpr::BinaryTest(_, a, b) => {
                self.word(&a.value);
                self.word(&b.value);
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand) {
        match compound {
            ast::CompoundCommand::Arithmetic(a) => {
                self.arithmetic(&a.expr.value);
                // brush-parser 0.4 reads nested subshells `( ( cmd ) )` as arithmetic
                // `((cmd))`; bash runs them. Unless the source really has `((`, walk the text
                // as the commands it may be.
                let really_arithmetic = a.loc.start.index == 0 && self.source.starts_with("((")
                    || self
                        .source
                        .chars()
                        .skip(a.loc.start.index)
                        .take(2)
                        .eq("((".chars());
                if !really_arithmetic {
                    // Re-read the original text minus the outer parentheses: the expression
                    // text alone lost here-documents and quoting.
                    let (start, end) = (a.loc.start.index, a.loc.end.index);
                    let inner: String = self
                        .source
                        .chars()
                        .skip(start + 1)
                        .take(end.saturating_sub(start + 2))
                        .collect();
                    let text = if end > start + 1 && inner.trim_end().ends_with(')') {
                        inner
                    } else {
                        a.expr.value.clone()
                    };
                    self.script(&text);
                }
            }
            ast::CompoundCommand::ArithmeticForClause(f) => {
                for e in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&e.value);
                }
                self.compound_list(&f.body.list);
            }
            ast::CompoundCommand::BraceGroup(g) => self.compound_list(&g.list),
            ast::CompoundCommand::Subshell(s) => self.compound_list(&s.list),
            ast::CompoundCommand::ForClause(f) => {
                // `for PAGER in …` assigns each value in turn (`for x;` the arguments).
                let watched = variables::runs_programs(&f.variable_name);
                if watched && f.values.is_none() {
                    self.program_variable(&f.variable_name, &Arg::Dynamic);
                }
                for w in f.values.iter().flatten() {
                    let value = self.word(&w.value);
                    if watched {
                        let value = if has_unquoted_expansion_chars(&w.value) {
                            Arg::Dynamic
                        } else {
                            value
                        };
                        self.program_variable(&f.variable_name, &value);
                    }
                }
                self.compound_list(&f.body.list);
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        self.word(&p.value);
                    }
                    if let Some(cmd) = &item.cmd {
                        self.compound_list(cmd);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.compound_list(&i.condition);
                self.compound_list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.compound_list(c);
                    }
                    self.compound_list(&e.body);
                }
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                self.compound_list(&w.0);
                self.compound_list(&w.1.list);
            }
            ast::CompoundCommand::Coprocess(c) => self.command(&c.body, Stdin::Unseen),
        }
    }

    /// An arithmetic expression runs no command, except through substitutions inside it.
    fn arithmetic(&mut self, text: &str) {
        self.word(text);
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, stdin: Stdin) {
        // The command's own effects are moved before those of its words and redirections, so
        // that a message names `git commit` rather than the `cat` inside its `$(…)`.
        let saved = std::mem::replace(&mut self.simple_start, self.effects.len());
        self.simple_unordered(simple, stdin);
        self.simple_start = saved;
    }

    fn simple_unordered(&mut self, simple: &ast::SimpleCommand, stdin: Stdin) {
        let mut stdin = stdin;
        let mut assigns = Vec::new();
        let mut words: Vec<Arg> = Vec::new();
        let mut name: Option<Option<String>> = None;
        // Assignments after the name (`export X=…`): the value as the walk saw it.
        let mut declared: Vec<(String, Arg)> = Vec::new();
        let mut items: Vec<&ast::CommandPrefixOrSuffixItem> = Vec::new();
        if let Some(prefix) = &simple.prefix {
            items.extend(prefix.0.iter());
        }
        let prefix_len = items.len();
        if let Some(suffix) = &simple.suffix {
            items.extend(suffix.0.iter());
        }
        for (index, item) in items.into_iter().enumerate() {
            if index == prefix_len
                && let Some(w) = &simple.word_or_name
            {
                name = Some(self.command_name(&w.value));
            }
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => {
                    if let Some(input) = self.redirect(r) {
                        stdin = input;
                    }
                }
                ast::CommandPrefixOrSuffixItem::Word(w) => {
                    let arg = self.word(&w.value);
                    // `{main,+main}` is several words: expanded when the word is plain text,
                    // computed otherwise.
                    if w.value.contains('{') && is_brace_expansion(&w.value) {
                        match expand_braces(&w.value) {
                            Some(expanded) => words.extend(expanded.into_iter().map(Arg::Static)),
                            None => words.push(Arg::Dynamic),
                        }
                    } else {
                        words.push(arg);
                    }
                }
                ast::CommandPrefixOrSuffixItem::AssignmentWord(assignment, w) => {
                    let value = self.assignment(assignment);
                    let (ast::AssignmentName::VariableName(n)
                    | ast::AssignmentName::ArrayElementName(n, _)) = &assignment.name;
                    if name.is_some() {
                        // After the name (`export X=1`, `declare X=1`) it is an argument too.
                        words.push(self.word(&w.value));
                        declared.push((n.clone(), value));
                    } else {
                        self.program_variable(n, &value);
                        assigns.push(n.clone());
                    }
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.subshell_script(&sub.list);
                    words.push(Arg::Dynamic);
                }
            }
        }
        if name.is_none()
            && let Some(w) = &simple.word_or_name
        {
            name = Some(self.command_name(&w.value));
        }
        let words_end = self.effects.len();
        match name {
            None => {
                // Only assignments and redirections: nothing runs, but an assignment can
                // still matter (CLAUDE_CODE_SIMPLE=1 before a later launch).
                self.assigns_only(assigns);
            }
            Some(None) => self.unknown("the command name is computed at run time"),
            Some(Some(name)) => {
                if is_declaration(&name) {
                    for (variable, value) in &declared {
                        self.program_variable(variable, value);
                    }
                }
                self.invocation(name, words, assigns, stdin)
            }
        }
        if let Some(own) = self.effects.get_mut(self.simple_start..) {
            own.rotate_left(words_end - self.simple_start);
        }
    }

    fn subshell_script(&mut self, list: &ast::CompoundList) {
        if self.depth >= MAX_DEPTH {
            self.unknown("commands nested too deeply to check");
            return;
        }
        self.depth += 1;
        self.compound_list(list);
        self.depth -= 1;
    }

    /// Walks an assignment's words; returns its value when it is a static scalar.
    fn assignment(&mut self, assignment: &ast::Assignment) -> Arg {
        if let ast::AssignmentName::ArrayElementName(_, index) = &assignment.name {
            self.word(index);
        }
        match &assignment.value {
            ast::AssignmentValue::Scalar(w) if !assignment.append => self.word(&w.value),
            ast::AssignmentValue::Scalar(w) => {
                self.word(&w.value);
                Arg::Dynamic
            }
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        self.word(&k.value);
                    }
                    self.word(&v.value);
                }
                Arg::Dynamic
            }
        }
    }

    /// Records the file access of a redirection; returns the new standard input when the
    /// redirection replaces it.
    fn redirect(&mut self, redirect: &ast::IoRedirect) -> Option<Stdin> {
        use ast::{IoFileRedirectKind as Kind, IoFileRedirectTarget as Target};
        match redirect {
            ast::IoRedirect::File(fd, kind, target) => {
                let is_stdin = matches!(fd, None | Some(0));
                match target {
                    Target::Filename(w) => {
                        let path = self.path_word(&w.value);
                        match kind {
                            Kind::Read => {
                                self.file(path, false);
                                return is_stdin.then_some(Stdin::Unseen);
                            }
                            Kind::ReadAndWrite => {
                                self.file(path.clone(), false);
                                self.file(path, true);
                                return is_stdin.then_some(Stdin::Unseen);
                            }
                            Kind::Write | Kind::Append | Kind::Clobber => self.file(path, true),
                            Kind::DuplicateInput | Kind::DuplicateOutput => {
                                // `>&word` with a non-number word writes to a file.
                                if !matches!(&path, Some(p) if is_fd_word(p)) {
                                    self.file(path, true);
                                }
                            }
                        }
                    }
                    Target::Fd(_) => {}
                    Target::Duplicate(w) => {
                        let target = self.path_word(&w.value);
                        if !matches!(&target, Some(p) if is_fd_word(p)) {
                            self.file(target, true);
                        }
                    }
                    Target::ProcessSubstitution(_, sub) => {
                        self.subshell_script(&sub.list);
                        if matches!(kind, Kind::Read) && is_stdin {
                            return Some(Stdin::Unseen);
                        }
                    }
                }
                None
            }
            ast::IoRedirect::HereDocument(fd, doc) => {
                let is_stdin = matches!(fd, None | Some(0));
                let text = if doc.requires_expansion {
                    self.heredoc_body(&doc.doc.value)
                } else {
                    Some(doc.doc.value.clone())
                };
                is_stdin.then(|| text.map_or(Stdin::Unseen, Stdin::Static))
            }
            ast::IoRedirect::HereString(fd, w) => {
                let is_stdin = matches!(fd, None | Some(0));
                let text = match self.word(&w.value) {
                    Arg::Static(s) => Stdin::Static(s),
                    Arg::Dynamic | Arg::Partial { .. } => Stdin::Unseen,
                };
                is_stdin.then_some(text)
            }
            ast::IoRedirect::OutputAndError(w, _append) => {
                let path = self.path_word(&w.value);
                self.file(path, true);
                None
            }
        }
    }

    /// A path as it is after the `cd`s the walk followed; `None` for a relative one after a
    /// `cd` it could not follow.
    fn after_cd(&self, path: String) -> Option<String> {
        if path.starts_with('/') {
            Some(path)
        } else if self.lost {
            None
        } else {
            Some(match &self.cd {
                Some(dir) => format!("{dir}/{path}"),
                None => path,
            })
        }
    }

    fn file(&mut self, path: Option<String>, write: bool) {
        // A relative path is relative to where an earlier `cd` went, not to the tool's cwd.
        let path = match path {
            Some(p) if !p.starts_with('/') && self.lost => {
                self.unknown("a relative redirection after a `cd` the hook cannot follow");
                return;
            }
            Some(p) if !p.starts_with('/') => match &self.cd {
                Some(dir) => Some(format!("{dir}/{p}")),
                None => Some(p),
            },
            other => other,
        };
        match path {
            Some(p) if write => self.push(Effect::Write(p)),
            Some(p) => self.push(Effect::Read(p)),
            None => self.unknown("a redirection's file name is computed at run time"),
        }
    }

    /// The static text of an expanding here-document, walking substitutions inside it.
    fn heredoc_body(&mut self, body: &str) -> Option<String> {
        match guarded(|| word::parse_heredoc(body, &parser_options()).ok()) {
            Some(pieces) => self.pieces(&pieces, false),
            None => {
                self.unknown("a here-document does not parse");
                None
            }
        }
    }
}

/// Most words a brace expansion may produce before the hook calls the word computed.
const MAX_BRACE_WORDS: usize = 256;

/// Decodes `$'…'` text; `None` for escapes this hook does not decode (treated as computed).
fn decode_ansi_c(raw: &str) -> Option<String> {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        match e {
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            'x' => {
                let mut hex = String::new();
                while hex.len() < 2 && chars.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                    hex.extend(chars.next());
                }
                out.push(char::from(u8::from_str_radix(&hex, 16).ok()?));
            }
            '0'..='7' => {
                let mut oct = e.to_string();
                while oct.len() < 3 && chars.peek().is_some_and(|c| ('0'..='7').contains(c)) {
                    oct.extend(chars.next());
                }
                let value = u32::from_str_radix(&oct, 8).ok()?;
                out.push(char::from(u8::try_from(value).ok()?));
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
