//! What a sed script does besides reading its input and printing (GNU sed 4.9's grammar): the
//! files its `r`/`R` commands read, the files `w`/`W` and the `w` flag of `s` write, and the
//! commands `e` and the `e` flag of `s` run. A script this parser does not follow is reported
//! as such, never guessed at.

/// What a sed script does beyond printing.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SedEffects {
    /// Files read by `r FILE`, `R FILE`.
    pub reads: Vec<String>,
    /// Files written by `w FILE`, `W FILE`, `s///w FILE`.
    pub writes: Vec<String>,
    /// Command lines run by `e COMMAND`.
    pub commands: Vec<String>,
    /// `e` alone or `s///e`: runs the pattern space, which the hook cannot see.
    pub runs_input: bool,
}

/// Reads one script (an `-e` argument or the script operand). `None` when it does not follow
/// the grammar; sed refuses most such scripts, and the caller treats the rest as unknown.
pub(super) fn analyze(script: &str, effects: &mut SedEffects) -> Option<()> {
    let chars: Vec<char> = script.chars().collect();
    let mut i = 0;
    loop {
        // Separators, blanks and closing braces between commands.
        while i < chars.len() && matches!(chars[i], ' ' | '\t' | '\n' | ';' | '}') {
            i += 1;
        }
        if i >= chars.len() {
            return Some(());
        }
        i = address(&chars, i)?;
        if chars.get(i) == Some(&',') {
            i = address(&chars, i + 1)?;
        }
        while i < chars.len() && matches!(chars[i], ' ' | '\t' | '!') {
            i += 1;
        }
        let command = *chars.get(i)?;
        i += 1;
        match command {
            '{' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x' | 'z'
            | 'F' => {}
            // An optional number (line length, exit code).
            'l' | 'L' | 'q' | 'Q' => {
                while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == ' ') {
                    i += 1;
                }
            }
            // Labels and version end at a newline or `;`.
            ':' | 'b' | 't' | 'T' | 'v' => {
                while i < chars.len() && !matches!(chars[i], '\n' | ';') {
                    i += 1;
                }
            }
            '#' => i = line_end(&chars, i),
            // Text to the end of the line (a trailing backslash continues it).
            'a' | 'i' | 'c' => {
                while i < chars.len() && chars[i] != '\n' {
                    if chars[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            'r' | 'R' | 'w' | 'W' | 'e' => {
                let end = line_end(&chars, i);
                let argument: String = chars[i..end].iter().collect();
                let argument = argument.trim().to_string();
                i = end;
                match (command, argument.is_empty()) {
                    ('e', true) => effects.runs_input = true,
                    ('e', false) => effects.commands.push(argument),
                    (_, true) => return None,
                    ('r' | 'R', false) => effects.reads.push(argument),
                    _ => effects.writes.push(argument),
                }
            }
            's' => i = substitute(&chars, i, effects)?,
            'y' => {
                let delimiter = *chars.get(i)?;
                i = delimited(&chars, i + 1, delimiter)?;
                i = delimited(&chars, i, delimiter)?;
            }
            _ => return None,
        }
    }
}

/// `s/REGEX/REPLACEMENT/FLAGS` from just after the `s`; returns the index after the flags.
fn substitute(chars: &[char], start: usize, effects: &mut SedEffects) -> Option<usize> {
    let delimiter = *chars.get(start)?;
    if matches!(delimiter, '\n' | '\\') {
        return None;
    }
    let mut i = delimited(chars, start + 1, delimiter)?;
    i = delimited(chars, i, delimiter)?;
    while let Some(&flag) = chars.get(i) {
        match flag {
            'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9' => i += 1,
            'e' => {
                effects.runs_input = true;
                i += 1;
            }
            'w' => {
                let end = line_end(chars, i + 1);
                let file: String = chars[i + 1..end].iter().collect();
                let file = file.trim().to_string();
                if file.is_empty() {
                    return None;
                }
                effects.writes.push(file);
                return Some(end);
            }
            _ => return Some(i),
        }
    }
    Some(i)
}

/// An optional address from `start`: a line number, `$`, `first~step`, `+N`/`~N` (second
/// address), `/REGEX/` or `\cREGEXc` with `I`/`M` flags. Returns the index after it.
fn address(chars: &[char], start: usize) -> Option<usize> {
    let mut i = start;
    match chars.get(i) {
        Some('/') => {
            i = delimited(chars, i + 1, '/')?;
            while matches!(chars.get(i), Some('I' | 'M')) {
                i += 1;
            }
        }
        Some('\\') => {
            let delimiter = *chars.get(i + 1)?;
            i = delimited(chars, i + 2, delimiter)?;
            while matches!(chars.get(i), Some('I' | 'M')) {
                i += 1;
            }
        }
        Some('$') => i += 1,
        Some(c) if c.is_ascii_digit() || *c == '+' || *c == '~' => {
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_digit() || chars[i] == '~') {
                i += 1;
            }
        }
        _ => {}
    }
    Some(i)
}

/// The index after the closing `delimiter` of a part that starts at `start` (a backslash
/// escapes the next character; a newline ends the script line: an error).
fn delimited(chars: &[char], start: usize, delimiter: char) -> Option<usize> {
    let mut i = start;
    while let Some(&c) = chars.get(i) {
        if c == '\\' {
            i += 2;
            continue;
        }
        if c == delimiter {
            return Some(i + 1);
        }
        if c == '\n' {
            return None;
        }
        i += 1;
    }
    None
}

/// The index of the end of the line from `start` (`r`, `w`, `e` take the rest of the line as
/// their argument, semicolons included).
fn line_end(chars: &[char], start: usize) -> usize {
    chars[start.min(chars.len())..]
        .iter()
        .position(|&c| c == '\n')
        .map_or(chars.len(), |p| start + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn effects(script: &str) -> Option<SedEffects> {
        let mut found = SedEffects::default();
        analyze(script, &mut found).map(|()| found)
    }

    #[test]
    fn reading_scripts_have_no_effects() {
        for script in [
            "1,80p",
            "$p",
            "45,50p",
            "/start/,/end/p",
            "1~2p",
            "10q",
            "s/hello/world/",
            "s/(foo)+/bar/g",
            "/^$/d",
            "=",
            "y/abc/xyz/",
            "/^fn /=",
            "s|a|b|2",
            ":a;s/l/L/;ta",
            "1{p;p}",
            "/x/I,+2d",
            "\\,h,d",
            "0,/re/s//X/",
            "a foo;p",
            "s/a/b/;s/c/d/",
            "/x/!d",
            "l 40",
            "q5",
            "$!N;P;D",
            "s/x\\/y/z/",
            "# note\np",
        ] {
            assert_eq!(effects(script), Some(SedEffects::default()), "{script}");
        }
    }

    #[test]
    fn writes_reads_and_commands_are_found() {
        let e = effects("s/h/j/w out1;p").unwrap_or_default();
        assert_eq!(e.writes, ["out1;p"]);
        let e = effects("1w /etc/x\np").unwrap_or_default();
        assert_eq!(e.writes, ["/etc/x"]);
        let e = effects("/a/W log").unwrap_or_default();
        assert_eq!(e.writes, ["log"]);
        let e = effects("r .env").unwrap_or_default();
        assert_eq!(e.reads, [".env"]);
        let e = effects("1e rm -rf ~").unwrap_or_default();
        assert_eq!(e.commands, ["rm -rf ~"]);
        assert!(effects("e").unwrap_or_default().runs_input);
        assert!(effects("s/.*/date/e").unwrap_or_default().runs_input);
        assert!(effects("s/x/y/ge").unwrap_or_default().runs_input);
    }

    #[test]
    fn no_prefix_of_a_script_panics() {
        let scripts =
            "s/é/ü/w f\n1,$!{/a\\/b/I,+3d};y/ab/cd/;:x;tx;e ls;r /x;a\\\ntext;\\,x,p;0~4W o";
        let chars: Vec<char> = scripts.chars().collect();
        for end in 0..=chars.len() {
            for start in 0..end {
                let script: String = chars[start..end].iter().collect();
                let _ = effects(&script);
            }
        }
    }

    #[test]
    fn what_is_not_followed_is_none() {
        for script in ["s/a/b", "k", "w", "y/ab/", "s\na\nb\n"] {
            assert_eq!(effects(script), None, "{script}");
        }
    }
}
