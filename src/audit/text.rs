//! Paths in records, reports and messages. A path is bytes; JSON is UTF-8. A path that is UTF-8
//! is written as it is; one that is not is written with each byte that is not part of valid
//! UTF-8 as `\xNN`, so a record never fails to serialize and the reader still sees which bytes
//! the name has. (A UTF-8 name that itself contains `\xNN` reads the same: the escape is for
//! people, not for parsing back.)

use serde::Serializer;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A command's words as a person would type them: a plain word as it is, any other
/// single-quoted (`grep -qx 'Hello, world' greeting.txt`).
pub fn command_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|w| shell_word(w.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `word` as a shell would need it written: as it is when it is plain, single-quoted otherwise.
pub fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The path as text: itself when it is UTF-8, else with `\xNN` for the bytes that are not.
pub fn path(p: &Path) -> Cow<'_, str> {
    let bytes = p.as_os_str().as_bytes();
    match std::str::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => Cow::Owned(escape(bytes)),
    }
}

/// The path on one line, for messages: as [`path`], with control characters (a newline, a
/// tab, an escape) written as `\n`, `\t`, `\u{1b}`, so a name cannot break or fake a line.
pub fn one_line(p: &Path) -> Cow<'_, str> {
    let text = path(p);
    if !text.chars().any(char::is_control) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn escape(mut bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() + 8);
    while !bytes.is_empty() {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(text);
                break;
            }
            Err(e) => {
                let (valid, rest) = bytes.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(valid).unwrap_or_default());
                let bad = e.error_len().unwrap_or(rest.len());
                for b in &rest[..bad] {
                    out.push_str(&format!("\\x{b:02x}"));
                }
                bytes = &rest[bad..];
            }
        }
    }
    out
}

/// `#[serde(serialize_with = "crate::audit::text::serialize")]` for a path field.
pub fn serialize<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&path(p))
}

/// The same for an optional path.
pub fn serialize_opt<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&path(p)),
        None => s.serialize_none(),
    }
}

/// The same for a list of paths.
pub fn serialize_all<S: Serializer>(paths: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(paths.iter().map(|p| path(p)))
}

/// Control characters, C1 controls and bidirectional overrides escaped as `\u{…}`.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c.is_control() || bidi {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn one_line_keeps_a_path_on_one_line() {
        let p = std::path::Path::new("/tmp/a\nb\tc\u{1b}[2Jd");
        assert_eq!(super::one_line(p), "/tmp/a\\nb\\tc\\u{1b}[2Jd");
        assert_eq!(super::one_line(std::path::Path::new("/tmp/ok")), "/tmp/ok");
    }

    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn utf8_paths_are_themselves_and_other_bytes_are_escaped() {
        assert_eq!(path(Path::new("/w/ü.rs")), "/w/ü.rs");
        let odd = Path::new(OsStr::from_bytes(b"/w/ws\xff/a\xfe\xc3\xa9b"));
        assert_eq!(path(odd), "/w/ws\\xff/a\\xfeéb");
        let value = serde_json::to_value(Finding {
            path: odd.to_path_buf(),
        })
        .unwrap();
        assert_eq!(value["path"], "/w/ws\\xff/a\\xfeéb");
    }

    #[derive(serde::Serialize)]
    struct Finding {
        #[serde(serialize_with = "serialize")]
        path: PathBuf,
    }
}
