//! What an awk program does besides reading its input and printing (POSIX awk and gawk 5): the
//! files `print > FILE`, `print >> FILE` and `printf … > FILE` write, the commands `system()`,
//! `print | CMD`, `CMD | getline` and gawk's `|&` run, and gawk's `@load`/`@include`. A token
//! scan, not a parser: `>` is a redirection only inside a `print`/`printf` statement outside
//! parentheses (POSIX's rule), and a `/` starts a regular expression where an operand is
//! expected. What it cannot place is reported as unseen, never guessed at.

/// What an awk program does beyond printing.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct AwkEffects {
    /// Files written by a redirection to a string literal.
    pub writes: Vec<String>,
    /// A redirection to a computed file name.
    pub computed_write: bool,
    /// Files read by `getline < "FILE"`.
    pub reads: Vec<String>,
    /// Command lines run, when written as string literals.
    pub commands: Vec<String>,
    /// Why something runs that the hook cannot see (`system(cmd)`, `print | cmd`, `@load`).
    pub unseen: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Word(String),
    Text(String),
    Regex,
    Number,
    Op(String),
    Newline,
}

/// Splits a program into tokens; `None` for an unterminated string or regular expression.
fn tokens(program: &str) -> Option<Vec<Token>> {
    let chars: Vec<char> = program.chars().collect();
    let mut out: Vec<Token> = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        match c {
            ' ' | '\t' | '\r' => i += 1,
            '\\' if chars.get(i + 1) == Some(&'\n') => i += 2,
            '\n' => {
                out.push(Token::Newline);
                i += 1;
            }
            '#' => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '"' => {
                let mut text = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None | Some('\n') => return None,
                        Some('"') => break,
                        Some('\\') => {
                            text.push(*chars.get(i + 1)?);
                            i += 2;
                        }
                        Some(&other) => {
                            text.push(other);
                            i += 1;
                        }
                    }
                }
                i += 1;
                out.push(Token::Text(text));
            }
            '/' if regex_may_start(out.last()) => {
                i += 1;
                let mut in_class = false;
                loop {
                    match chars.get(i) {
                        None | Some('\n') => return None,
                        Some('\\') => i += 2,
                        Some('[') => {
                            in_class = true;
                            i += 1;
                        }
                        Some(']') => {
                            in_class = false;
                            i += 1;
                        }
                        Some('/') if !in_class => break,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
                out.push(Token::Regex);
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == '@' => {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                out.push(Token::Word(chars[start..i].iter().collect()));
            }
            c if c.is_ascii_digit() || c == '.' => {
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                out.push(Token::Number);
            }
            _ => {
                // Two-character operators that matter here: `>>`, `|&`, `||`, `&&`.
                let pair: String = chars[i..(i + 2).min(chars.len())].iter().collect();
                if matches!(
                    pair.as_str(),
                    ">>" | "|&" | "||" | "&&" | ">=" | "<=" | "==" | "!="
                ) {
                    out.push(Token::Op(pair));
                    i += 2;
                } else {
                    out.push(Token::Op(c.to_string()));
                    i += 1;
                }
            }
        }
    }
    Some(out)
}

/// Whether a `/` after `previous` starts a regular expression (an operand is expected) rather
/// than dividing.
fn regex_may_start(previous: Option<&Token>) -> bool {
    match previous {
        None | Some(Token::Newline) => true,
        Some(Token::Op(op)) => !matches!(op.as_str(), ")" | "]"),
        Some(Token::Word(word)) => {
            matches!(word.as_str(), "print" | "printf" | "return" | "in" | "case")
        }
        Some(Token::Text(_) | Token::Regex | Token::Number) => false,
    }
}

/// Reads one awk program. `None` when it does not even split into tokens (awk refuses it).
pub(super) fn analyze(program: &str) -> Option<AwkEffects> {
    let tokens = tokens(program)?;
    let mut effects = AwkEffects::default();
    let mut depth = 0usize;
    // The parenthesis depth a print statement started at, while in one.
    let mut print_depth: Option<usize> = None;
    let mut i = 0;
    while let Some(token) = tokens.get(i) {
        match token {
            Token::Op(op) if op == "(" => depth += 1,
            Token::Op(op) if op == ")" => depth = depth.saturating_sub(1),
            Token::Op(op) if matches!(op.as_str(), ";" | "{" | "}") => print_depth = None,
            Token::Newline => print_depth = None,
            Token::Word(word) if word == "print" || word == "printf" => print_depth = Some(depth),
            Token::Word(word) if word == "system" => {
                match (tokens.get(i + 1), tokens.get(i + 2), tokens.get(i + 3)) {
                    (Some(Token::Op(open)), Some(Token::Text(command)), Some(Token::Op(close)))
                        if open == "(" && close == ")" =>
                    {
                        effects.commands.push(command.clone());
                    }
                    _ => effects
                        .unseen
                        .push("awk's system() runs a command computed at run time".into()),
                }
            }
            Token::Word(word) if word.starts_with('@') && word != "@namespace" => {
                effects.unseen.push(format!(
                    "gawk's {word} loads code from a file the hook cannot see"
                ));
            }
            Token::Op(op) if op == "|" || op == "|&" => {
                let next = tokens.get(i + 1);
                let previous = i.checked_sub(1).and_then(|p| tokens.get(p));
                if matches!(next, Some(Token::Word(w)) if w == "getline") {
                    // `CMD | getline`: the command is what stands before the pipe.
                    match previous {
                        Some(Token::Text(command)) if op == "|" => {
                            effects.commands.push(command.clone())
                        }
                        _ => effects
                            .unseen
                            .push("awk's `| getline` runs a command computed at run time".into()),
                    }
                } else if print_depth == Some(depth) || op == "|&" {
                    match next {
                        Some(Token::Text(command)) if op == "|" => {
                            effects.commands.push(command.clone())
                        }
                        _ => effects.unseen.push(
                            "awk pipes its output into a command computed at run time".into(),
                        ),
                    }
                }
            }
            Token::Op(op) if (op == ">" || op == ">>") && print_depth == Some(depth) => {
                match (tokens.get(i + 1), tokens.get(i + 2)) {
                    (Some(Token::Text(file)), None | Some(Token::Newline | Token::Op(_))) => {
                        effects.writes.push(file.clone())
                    }
                    _ => effects.computed_write = true,
                }
            }
            Token::Op(op) if op == "<" => {
                // `getline < FILE` or `getline VAR < FILE`.
                let is_getline = |back: usize| {
                    i.checked_sub(back)
                        .and_then(|p| tokens.get(p))
                        .is_some_and(|t| matches!(t, Token::Word(w) if w == "getline"))
                };
                let after_getline = is_getline(1)
                    || (is_getline(2)
                        && matches!(
                            i.checked_sub(1).and_then(|p| tokens.get(p)),
                            Some(Token::Word(_))
                        ));
                if after_getline && let Some(Token::Text(file)) = tokens.get(i + 1) {
                    effects.reads.push(file.clone());
                }
            }
            _ => {}
        }
        i += 1;
    }
    // gawk's special files `/inet/…`, `/inet4/…`, `/inet6/…` are network connections.
    let is_network = |path: &String| path.starts_with("/inet");
    if effects.reads.iter().chain(&effects.writes).any(is_network) {
        effects.reads.retain(|p| !is_network(p));
        effects.writes.retain(|p| !is_network(p));
        effects
            .unseen
            .push("gawk's /inet special files open network connections".into());
    }
    Some(effects)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_programs_have_no_effects() {
        for program in [
            "{print $1}",
            "/li/ { print $0 }",
            "length($0) > 80",
            "NF > 0",
            "{ if (length($0) > max) max = length($0) } END { print max }",
            "BEGIN { for (i = 1; i <= 7; i++) print int(101 * rand()) }",
            "{ nlines++ } END { print nlines }",
            "END { print NR }",
            "{ print NR, $0 }",
            "$3 > 5",
            "{ sum += $3 } END { print sum }",
            "NR <= n",
            "BEGIN { FS = \",\" } { print $2 }",
            "{ $3 = \"\"; print }",
            "length > 72",
            "/foo/ { n++ } END { printf \"%d\\n\", n }",
            "{ print ($1 > 2) }",
            "{ x = $1 / 2; y = $2 / 3; print x, y }",
            "$1 ~ /a\\/b/",
            "{ print $1 > 2 ? \"a\" : \"b\" }",
        ] {
            let found = analyze(program);
            let clean = match program {
                // POSIX: `>` in a print statement is a redirection, even here (to a computed
                // file): awk writes a file named by the value.
                "{ print $1 > 2 ? \"a\" : \"b\" }" => continue,
                _ => Some(AwkEffects::default()),
            };
            assert_eq!(found, clean, "{program}");
        }
    }

    #[test]
    fn no_prefix_of_a_program_panics() {
        let program = "BEGIN{\"é\"|getline d;while((getline l<\"f\")>0)print l>\"o\"}\n$1~/a\\/[/]b/{print|&\"c\";system($0)}@load \"x\"#c\n{print($1>2)>>$2}";
        let chars: Vec<char> = program.chars().collect();
        for end in 0..=chars.len() {
            for start in 0..end {
                let text: String = chars[start..end].iter().collect();
                let _ = analyze(&text);
            }
        }
    }

    #[test]
    fn writes_and_commands_are_found() {
        let e = analyze("{ print > \"/etc/x\" }").unwrap_or_default();
        assert_eq!(e.writes, ["/etc/x"]);
        let e = analyze("{ printf \"%s\", $1 >> \"out.txt\" }").unwrap_or_default();
        assert_eq!(e.writes, ["out.txt"]);
        assert!(analyze("{ print > $2 }").unwrap_or_default().computed_write);
        let e = analyze("BEGIN { system(\"rm -rf ~\") }").unwrap_or_default();
        assert_eq!(e.commands, ["rm -rf ~"]);
        assert_eq!(
            analyze("{ system($0) }").unwrap_or_default().unseen.len(),
            1
        );
        let e = analyze("{ print | \"sort -u\" }").unwrap_or_default();
        assert_eq!(e.commands, ["sort -u"]);
        let e = analyze("BEGIN { \"date\" | getline d; print d }").unwrap_or_default();
        assert_eq!(e.commands, ["date"]);
        assert_eq!(
            analyze("{ $0 | getline }").unwrap_or_default().unseen.len(),
            1
        );
        assert_eq!(
            analyze("{ print |& \"cat\" }")
                .unwrap_or_default()
                .unseen
                .len(),
            1
        );
        assert_eq!(analyze("@load \"x\"").unwrap_or_default().unseen.len(), 1);
        let e = analyze("BEGIN { while ((getline l < \".env\") > 0) print l }").unwrap_or_default();
        assert_eq!(e.reads, [".env"]);
        assert_eq!(analyze("{ print \"x"), None);
        let e = analyze("BEGIN { getline l < \"/inet/tcp/0/example.com/80\" }").unwrap_or_default();
        assert_eq!((e.reads.len(), e.unseen.len()), (0, 1));
    }
}
