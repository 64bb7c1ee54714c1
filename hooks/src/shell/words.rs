//! Words: what a word says when it can be known without running anything (quotes, parameters, brace
//! expansions and sequences), and where it cannot.

use super::{MAX_BRACE_WORDS, Walker, decode_ansi_c, guarded, parser_options};
use crate::pattern::Arg;
use brush_parser::word::{self, ParameterExpr, WordPiece, WordPieceWithSource};

impl Walker<'_> {
    /// A redirection target: static text, or `None` when it is computed or globbed.
    pub(super) fn path_word(&mut self, text: &str) -> Option<String> {
        match self.word(text) {
            Arg::Static(s) if !has_unquoted_expansion_chars(text) => Some(s),
            _ => None,
        }
    }

    /// A command name: static (still a path when written as one), or `None` when computed.
    pub(super) fn command_name(&mut self, text: &str) -> Option<String> {
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
    pub(super) fn static_word(&mut self, text: &str) -> Option<String> {
        match self.word(text) {
            Arg::Static(s) => Some(s),
            Arg::Dynamic | Arg::Partial { .. } => None,
        }
    }

    /// Walks the substitutions inside a word and returns its value when static.
    pub(super) fn word(&mut self, text: &str) -> Arg {
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
                WordPiece::ParameterExpansion(expr) if self.known_parameter(expr).is_some() => {
                    out.push(self.known_parameter(expr))
                }
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
    pub(super) fn pieces(
        &mut self,
        pieces: &[WordPieceWithSource],
        in_double_quotes: bool,
    ) -> Option<String> {
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
                WordPiece::ParameterExpansion(expr) => match self.known_parameter(expr) {
                    Some(value) => Some(value),
                    None => {
                        self.parameter(expr);
                        None
                    }
                },
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

    /// The value of a parameter known before the command runs: `$TMPDIR` when the walk was
    /// told it (see `analyze_with_tmpdir`).
    fn known_parameter(&self, expr: &ParameterExpr) -> Option<String> {
        match expr {
            ParameterExpr::Parameter {
                parameter: word::Parameter::Named(name),
                indirect: false,
            } if name == "TMPDIR" => self.tmpdir.clone(),
            _ => None,
        }
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

pub(super) fn is_fd_word(s: &str) -> bool {
    s == "-" || (!s.is_empty() && s.chars().all(|c| c.is_ascii_digit()))
}

/// Whether unquoted text in a word would be expanded at run time by globbing or brace
/// expansion (`r*`, `{rm,-rf}`), which makes a command name or path unknowable. Quoted parts
/// are skipped by walking the parser's pieces, not by scanning the raw text.
pub(super) fn has_unquoted_expansion_chars(text: &str) -> bool {
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
pub(super) fn is_brace_expansion(text: &str) -> bool {
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

/// The words an unquoted, plain brace expansion produces, in bash's order (`a{b,c}d` → `abd
/// acd`, `x{1..3}` → `x1 x2 x3`, nested braces expanded in turn); `None` when the word is not
/// plain text (quotes, `$`, backslashes) or expands to too many words.
pub(super) fn expand_braces(text: &str) -> Option<Vec<String>> {
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
pub(super) fn brace_alternatives(word: &str) -> Option<Option<Vec<String>>> {
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
pub(super) enum Sequence {
    /// It is not one: the braces stay as they are.
    Not,
    /// It makes more words than the hook expands.
    TooLong,
}

/// `1..5`, `5..1`, `a..e`, with an optional `..STEP`: the items bash makes.
pub(super) fn sequence(inner: &str) -> Result<Vec<String>, Sequence> {
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
pub(super) fn unescape(escape: &str, in_double_quotes: bool) -> String {
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
