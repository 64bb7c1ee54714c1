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
use brush_parser::word::{self, ParameterExpr, WordPiece, WordPieceWithSource};

use crate::pattern::{Arg, is_env_file};

mod awk;
mod git;
mod options;
mod sed;
mod tools;
mod variables;
pub use variables::program_variables;
mod wrappers;

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
    let mut walker = Walker {
        home: "~",
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

    /// A redirection target: static text, or `None` when it is computed or globbed.
    fn path_word(&mut self, text: &str) -> Option<String> {
        match self.word(text) {
            Arg::Static(s) if !has_unquoted_expansion_chars(text) => Some(s),
            _ => None,
        }
    }

    /// A command name: static (still a path when written as one), or `None` when computed.
    fn command_name(&mut self, text: &str) -> Option<String> {
        if has_unquoted_expansion_chars(text) {
            self.word(text);
            return None;
        }
        match self.word(text) {
            Arg::Static(s) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// A word's static value, without walking (for names that cannot hold substitutions).
    fn static_word(&mut self, text: &str) -> Option<String> {
        match self.word(text) {
            Arg::Static(s) => Some(s),
            Arg::Dynamic | Arg::Partial { .. } => None,
        }
    }

    /// Walks the substitutions inside a word and returns its value when static.
    fn word(&mut self, text: &str) -> Arg {
        if !text.contains(['$', '`', '\\', '\'', '"', '~', '<', '>']) {
            return Arg::Static(text.to_string());
        }
        match guarded(|| word::parse(text, &parser_options()).ok()) {
            Some(pieces) => match self.pieces(&pieces, false) {
                Some(s) => Arg::Static(s),
                None => self.partial(&pieces),
            },
            None => {
                self.unknown("a word does not parse");
                Arg::Dynamic
            }
        }
    }

    /// A computed word with the static text around its computed parts (`Arg::Partial`), or
    /// `Arg::Dynamic` when there is none, or when an unquoted expansion may split it into
    /// several words (`x$Y` may be `x +main`: only the first word would start with `x`).
    fn partial(&self, pieces: &[WordPieceWithSource]) -> Arg {
        let mut atoms = Vec::new();
        if !self.atoms(pieces, false, &mut atoms) {
            return Arg::Dynamic;
        }
        let prefix: String = atoms.iter().map_while(|a| a.as_deref()).collect();
        let mut suffix: Vec<&str> = atoms.iter().rev().map_while(|a| a.as_deref()).collect();
        suffix.reverse();
        let suffix = suffix.concat();
        if prefix.is_empty() && suffix.is_empty() {
            Arg::Dynamic
        } else {
            Arg::Partial { prefix, suffix }
        }
    }

    /// A word's pieces as static texts and computed parts (`None`), quotes looked into;
    /// `false` when a computed part stands outside double quotes (it may split the word).
    fn atoms(
        &self,
        pieces: &[WordPieceWithSource],
        in_double_quotes: bool,
        out: &mut Vec<Option<String>>,
    ) -> bool {
        let mut one_word = true;
        for piece in pieces {
            match &piece.piece {
                WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => out.push(Some(t.clone())),
                WordPiece::AnsiCQuotedText(t) => out.push(decode_ansi_c(t)),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    one_word &= self.atoms(inner, true, out)
                }
                WordPiece::TildeExpansion(word::TildeExpr::Home) => {
                    out.push(Some(self.home.to_string()))
                }
                WordPiece::EscapeSequence(e) => out.push(Some(unescape(e, in_double_quotes))),
                WordPiece::TildeExpansion(_) => out.push(None),
                WordPiece::ParameterExpansion(_)
                | WordPiece::CommandSubstitution(_)
                | WordPiece::BackquotedCommandSubstitution(_)
                | WordPiece::ArithmeticExpression(_) => {
                    one_word &= in_double_quotes;
                    out.push(None);
                }
            }
        }
        one_word
    }

    /// Concatenates word pieces; `None` as soon as one is computed at run time (but keeps
    /// walking so that every substitution is checked).
    fn pieces(&mut self, pieces: &[WordPieceWithSource], in_double_quotes: bool) -> Option<String> {
        let mut out = Some(String::new());
        for piece in pieces {
            let value = match &piece.piece {
                WordPiece::Text(t) => Some(t.clone()),
                WordPiece::SingleQuotedText(t) => Some(t.clone()),
                WordPiece::AnsiCQuotedText(t) => decode_ansi_c(t),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => self.pieces(inner, true),
                WordPiece::TildeExpansion(word::TildeExpr::Home) => Some(self.home.to_string()),
                WordPiece::TildeExpansion(_) => None,
                WordPiece::EscapeSequence(e) => Some(unescape(e, in_double_quotes)),
                WordPiece::ParameterExpansion(expr) => {
                    self.parameter(expr);
                    None
                }
                WordPiece::CommandSubstitution(s) | WordPiece::BackquotedCommandSubstitution(s) => {
                    self.script(s);
                    None
                }
                WordPiece::ArithmeticExpression(e) => {
                    self.word(&e.value);
                    None
                }
            };
            out = match (out, value) {
                (Some(mut acc), Some(v)) => {
                    acc.push_str(&v);
                    Some(acc)
                }
                _ => None,
            };
        }
        out
    }

    /// Parameter expansions can hold words (`${x:-$(cmd)}`): walk them.
    fn parameter(&mut self, expr: &ParameterExpr) {
        let words: Vec<&str> = match expr {
            ParameterExpr::UseDefaultValues { default_value, .. }
            | ParameterExpr::AssignDefaultValues { default_value, .. } => {
                default_value.as_deref().into_iter().collect()
            }
            ParameterExpr::IndicateErrorIfNullOrUnset { error_message, .. } => {
                error_message.as_deref().into_iter().collect()
            }
            ParameterExpr::UseAlternativeValue {
                alternative_value, ..
            } => alternative_value.as_deref().into_iter().collect(),
            ParameterExpr::RemoveSmallestSuffixPattern { pattern, .. }
            | ParameterExpr::RemoveLargestSuffixPattern { pattern, .. }
            | ParameterExpr::RemoveSmallestPrefixPattern { pattern, .. }
            | ParameterExpr::RemoveLargestPrefixPattern { pattern, .. }
            | ParameterExpr::UppercaseFirstChar { pattern, .. }
            | ParameterExpr::UppercasePattern { pattern, .. }
            | ParameterExpr::LowercaseFirstChar { pattern, .. }
            | ParameterExpr::LowercasePattern { pattern, .. } => {
                pattern.as_deref().into_iter().collect()
            }
            ParameterExpr::Substring { offset, length, .. } => {
                std::iter::once(offset.value.as_str())
                    .chain(length.as_ref().map(|l| l.value.as_str()))
                    .collect()
            }
            ParameterExpr::ReplaceSubstring {
                pattern,
                replacement,
                ..
            } => std::iter::once(pattern.as_str())
                .chain(replacement.as_deref())
                .collect(),
            ParameterExpr::Parameter { .. }
            | ParameterExpr::ParameterLength { .. }
            | ParameterExpr::Transform { .. }
            | ParameterExpr::VariableNames { .. }
            | ParameterExpr::MemberKeys { .. } => Vec::new(),
        };
        for w in words {
            self.word(w);
        }
        let parameter = match expr {
            ParameterExpr::Parameter { parameter, .. }
            | ParameterExpr::UseDefaultValues { parameter, .. }
            | ParameterExpr::AssignDefaultValues { parameter, .. }
            | ParameterExpr::IndicateErrorIfNullOrUnset { parameter, .. }
            | ParameterExpr::UseAlternativeValue { parameter, .. }
            | ParameterExpr::ParameterLength { parameter, .. }
            | ParameterExpr::RemoveSmallestSuffixPattern { parameter, .. }
            | ParameterExpr::RemoveLargestSuffixPattern { parameter, .. }
            | ParameterExpr::RemoveSmallestPrefixPattern { parameter, .. }
            | ParameterExpr::RemoveLargestPrefixPattern { parameter, .. }
            | ParameterExpr::Substring { parameter, .. }
            | ParameterExpr::Transform { parameter, .. }
            | ParameterExpr::UppercaseFirstChar { parameter, .. }
            | ParameterExpr::UppercasePattern { parameter, .. }
            | ParameterExpr::LowercaseFirstChar { parameter, .. }
            | ParameterExpr::LowercasePattern { parameter, .. }
            | ParameterExpr::ReplaceSubstring { parameter, .. } => Some(parameter),
            ParameterExpr::VariableNames { .. } | ParameterExpr::MemberKeys { .. } => None,
        };
        // An array index is arithmetic and may hold a substitution: `${a[$(cmd)]}`.
        if let Some(word::Parameter::NamedWithIndex { index, .. }) = parameter {
            self.word(index);
        }
    }

    /// Dispatches a normalised simple command: wrappers are peeled, shells and `eval` have
    /// their scripts parsed, everything else is an `Exec` for the rules.
    fn invocation(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>, stdin: Stdin) {
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
            n if wrappers::is_wrapper(n) => self.wrapper(name, args, assigns, stdin),
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
                    .filter(|n| variables::runs_programs(n))
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
    fn assigns_only(&mut self, assigns: Vec<String>) {
        if !assigns.is_empty() {
            self.exec(String::new(), Vec::new(), assigns);
        }
    }

    fn exec(&mut self, name: String, args: Vec<Arg>, assigns: Vec<String>) {
        let untrusted_path = name.contains('/') && !trusted_location(&name);
        self.push(Effect::Exec(Invocation {
            name: basename(&name).to_string(),
            args,
            assigns,
            untrusted_path,
            program: name,
        }));
    }

    /// Continues with the command that starts at `args[rest]`, or checks the wrapper itself
    /// when nothing follows (`env` alone prints the environment).
    fn unwrap_rest(
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
    fn dispatch_args(&mut self, mut args: Vec<Arg>, assigns: Vec<String>, stdin: Stdin) {
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

/// Runs a brush-parser call, turning a panic inside it into `None` (cargo-fuzz found an
/// `unwrap` on an overflowing fd number): the caller then reports the text as unknown.
fn guarded<T>(parse: impl FnOnce() -> Option<T>) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or(None)
}

/// Deepest nesting of `open`…`close` in the raw text (quotes not considered: an overestimate
/// is safe). For `(`; and for `[` (array subscripts, tests): brush-parser 0.4's word parser is
/// exponential in nested subscripts (`${a[${a[${a[1]}]}]}` takes seconds at depth 6; found by
/// cargo-fuzz).
fn pair_depth(text: &str, open: u8, close: u8) -> usize {
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
fn nesting_depth(text: &str) -> usize {
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
fn assignment_prefix(assigns: &[String], text: &str) -> String {
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

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The builtins whose `NAME=value` arguments are assignments.
fn is_declaration(name: &str) -> bool {
    matches!(
        basename(name),
        "export" | "declare" | "typeset" | "local" | "readonly"
    )
}

fn is_assignment(s: &str) -> bool {
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
fn skip_options(args: &[Arg], with_value: &[&str]) -> usize {
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
fn removal_operand(arg: &Arg) -> Arg {
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

/// `name arg…` for a message, computed words as `…`.
pub(crate) fn render_words(name: &str, args: &[Arg]) -> String {
    let mut text = name.to_string();
    for arg in args {
        text.push(' ');
        match arg {
            Arg::Static(s) => text.push_str(s),
            Arg::Dynamic => text.push('…'),
            Arg::Partial { prefix, suffix } => {
                text.push_str(prefix);
                text.push('…');
                text.push_str(suffix);
            }
        }
        if text.len() > 80 {
            let mut cut = 77;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
            break;
        }
    }
    text
}

fn is_fd_word(s: &str) -> bool {
    s == "-" || (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
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

/// Whether unquoted text in a word would be expanded at run time by globbing or brace
/// expansion (`r*`, `{rm,-rf}`), which makes a command name or path unknowable. Quoted parts
/// are skipped by walking the parser's pieces, not by scanning the raw text.
fn has_unquoted_expansion_chars(text: &str) -> bool {
    if !text.contains(['*', '?', '[', '{', '}']) {
        return false;
    }
    match guarded(|| word::parse(text, &parser_options()).ok()) {
        Some(pieces) => {
            // Unquoted text only: quoting switches both globbing and brace expansion off.
            let unquoted: String = pieces
                .iter()
                .filter_map(|p| match &p.piece {
                    WordPiece::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            let globs = pieces.iter().any(|p| match &p.piece {
                WordPiece::Text(t) => {
                    t.contains(['*', '?'])
                        || t.find('[').is_some_and(|open| t[open..].contains(']'))
                }
                _ => false,
            });
            // A brace expansion may be split by quotes (`{'rm',x}`): judge the unquoted text
            // of the whole word.
            let braces = unquoted.contains('{')
                && unquoted.contains('}')
                && (unquoted.contains(',') || unquoted.contains(".."));
            globs || braces
        }
        None => true,
    }
}

/// Whether a word holds an unquoted brace expansion (`{a,b}`, `{1..3}`, `x{,.bak}`), which
/// makes it several words: a `{` and its `}` with a top-level comma or a `..` between them.
fn is_brace_expansion(text: &str) -> bool {
    let Some(pieces) = guarded(|| word::parse(text, &parser_options()).ok()) else {
        return true;
    };
    let unquoted: Vec<char> = pieces
        .iter()
        .map(|p| match &p.piece {
            WordPiece::Text(t) => t.as_str(),
            // A quoted part cannot open or close a brace expansion, but may sit inside one.
            _ => "x",
        })
        .collect::<String>()
        .chars()
        .collect();
    let mut opens: Vec<(usize, bool)> = Vec::new();
    let mut i = 0;
    while let Some(&c) = unquoted.get(i) {
        match c {
            '{' => opens.push((i, false)),
            ',' => {
                if let Some(last) = opens.last_mut() {
                    last.1 = true;
                }
            }
            '}' => {
                if let Some((start, comma)) = opens.pop() {
                    let inner: String = unquoted[start + 1..i].iter().collect();
                    if comma || (inner.contains("..") && !inner.contains('{')) {
                        return true;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// Most words a brace expansion may produce before the hook calls the word computed.
const MAX_BRACE_WORDS: usize = 256;

/// The words an unquoted, plain brace expansion produces, in bash's order (`a{b,c}d` → `abd
/// acd`, `x{1..3}` → `x1 x2 x3`, nested braces expanded in turn); `None` when the word is not
/// plain text (quotes, `$`, backslashes) or expands to too many words.
fn expand_braces(text: &str) -> Option<Vec<String>> {
    if text.contains(['\'', '"', '$', '`', '\\']) {
        return None;
    }
    let mut done = Vec::new();
    let mut pending = vec![text.to_string()];
    while let Some(word) = pending.pop() {
        match brace_alternatives(&word)? {
            Some(alternatives) => pending.extend(alternatives.into_iter().rev()),
            None => done.push(word),
        }
        if done.len() + pending.len() > MAX_BRACE_WORDS {
            return None;
        }
    }
    Some(done)
}

/// The words the first (outermost, leftmost) brace expansion of `word` makes (`Some(None)`
/// when it has none; `None` when it makes too many).
fn brace_alternatives(word: &str) -> Option<Option<Vec<String>>> {
    let chars: Vec<char> = word.chars().collect();
    for start in (0..chars.len()).filter(|&i| chars[i] == '{') {
        // The matching `}` and the top-level commas between.
        let (mut depth, mut commas, mut end) = (0usize, Vec::new(), None);
        for (i, &c) in chars.iter().enumerate().skip(start + 1) {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => commas.push(i),
                _ => {}
            }
        }
        let Some(end) = end else { continue };
        let prefix: String = chars[..start].iter().collect();
        let suffix: String = chars[end + 1..].iter().collect();
        let items: Vec<String> = if commas.is_empty() {
            let inner: String = chars[start + 1..end].iter().collect();
            match sequence(&inner) {
                Ok(items) => items,
                Err(Sequence::TooLong) => return None,
                Err(Sequence::Not) => continue,
            }
        } else {
            let mut bounds = vec![start];
            bounds.extend(&commas);
            bounds.push(end);
            bounds
                .windows(2)
                .map(|w| chars[w[0] + 1..w[1]].iter().collect())
                .collect()
        };
        return Some(Some(
            items
                .into_iter()
                .map(|item| format!("{prefix}{item}{suffix}"))
                .collect(),
        ));
    }
    Some(None)
}

/// Why `{…}` makes no sequence.
enum Sequence {
    /// It is not one: the braces stay as they are.
    Not,
    /// It makes more words than the hook expands.
    TooLong,
}

/// `1..5`, `5..1`, `a..e`, with an optional `..STEP`: the items bash makes.
fn sequence(inner: &str) -> Result<Vec<String>, Sequence> {
    let parts: Vec<&str> = inner.split("..").collect();
    let step = |text: &str| {
        text.parse::<i64>()
            .ok()
            .and_then(i64::checked_abs)
            .map(|s| s.max(1))
            .ok_or(Sequence::Not)
    };
    let (from, to, step) = match parts.as_slice() {
        [from, to] => (*from, *to, 1i64),
        [from, to, by] => (*from, *to, step(by)?),
        _ => return Err(Sequence::Not),
    };
    let (numbers, from, to) = match (from.parse::<i64>(), to.parse::<i64>()) {
        (Ok(a), Ok(b)) => (true, a, b),
        _ => {
            let (mut a, mut b) = (from.chars(), to.chars());
            match (a.next(), a.next(), b.next(), b.next()) {
                (Some(x), None, Some(y), None)
                    if x.is_ascii_alphabetic() && y.is_ascii_alphabetic() =>
                {
                    (false, x as i64, y as i64)
                }
                _ => return Err(Sequence::Not),
            }
        }
    };
    if from.abs_diff(to) / step.unsigned_abs() > MAX_BRACE_WORDS as u64 {
        return Err(Sequence::TooLong);
    }
    let mut items = Vec::new();
    let mut at = from;
    loop {
        items.push(if numbers {
            at.to_string()
        } else {
            u32::try_from(at)
                .ok()
                .and_then(char::from_u32)
                .ok_or(Sequence::Not)?
                .to_string()
        });
        if at == to {
            break;
        }
        let next = if from < to { at + step } else { at - step };
        if (from < to && next > to) || (from > to && next < to) {
            break;
        }
        at = next;
    }
    Ok(items)
}

/// Backslash escapes as the shell removes them: outside quotes `\x` is `x`; inside double
/// quotes only `\$`, `` \` ``, `\"`, `\\` and a newline lose the backslash.
fn unescape(escape: &str, in_double_quotes: bool) -> String {
    let rest = escape.strip_prefix('\\').unwrap_or(escape);
    if !in_double_quotes {
        if rest == "\n" {
            return String::new();
        }
        return rest.to_string();
    }
    match rest {
        "$" | "`" | "\"" | "\\" => rest.to_string(),
        "\n" => String::new(),
        _ => escape.to_string(),
    }
}

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
