//! The one chunked transfer coding of the supervisor (RFC 9112 §7.1), for every place that reads
//! a chunked body: the relay of the proxy, the gateway and the terminating proxy (line by line,
//! [`size_line`] and [`trailer_line`]) and the clients that read an answer whole ([`dechunk`]:
//! the login refresh, server-managed settings, the export). Built on `httparse`'s chunk-size
//! parser, with what it lets through refused here, so that no two readers of the same bytes at
//! the boundary can disagree on where a body ends:
//!
//! * a line ends in CRLF; a bare LF (which RFC 9112 lets a recipient accept) is refused, in a
//!   size line, after a chunk's data and in the trailer section;
//! * a size is 1 to 15 hex digits (`httparse` reads an empty size as 0: refused);
//! * a chunk extension is `;` and then visible characters, spaces and tabs only (no control
//!   character: `httparse` takes any byte there, a bare LF included);
//! * a chunk's data is followed by exactly CRLF;
//! * a trailer line is a field (`name:` with a token name), never obs-fold (a line starting
//!   with a space or a tab); the section ends with an empty line;
//! * whole-body readers also refuse a size beyond their cap and bytes after the end.

use std::fmt;

/// Why a chunked body was refused: each rule of the module's list has its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkError {
    /// A line ended in LF without CR.
    BareLf,
    /// A size line with no hex digit before its end or extension.
    NoSize,
    /// A size line that is not hex digits, optional whitespace and extensions.
    BadSize,
    /// A size of more than 15 hex digits, or beyond what the reader takes.
    Oversize,
    /// A chunk extension holding a control character.
    BadExtension,
    /// A chunk's data not followed by CRLF.
    NoCrlfAfterData,
    /// A trailer line that is not a field, or an obs-fold continuation.
    BadTrailer,
    /// The body ended before its last chunk and trailer section.
    CutShort,
    /// A line longer than [`MAX_LINE`].
    LineTooLong,
    /// Bytes after the end of the body (a whole-body reader).
    TrailingBytes,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::BareLf => "a line ends in LF without CR",
            ChunkError::NoSize => "a chunk size line without a size",
            ChunkError::BadSize => "a bad chunk size",
            ChunkError::Oversize => "a chunk size too large",
            ChunkError::BadExtension => "a chunk extension with a control character",
            ChunkError::NoCrlfAfterData => "a chunk's data not followed by CRLF",
            ChunkError::BadTrailer => "a trailer line that is not a field (or an obs-fold)",
            ChunkError::CutShort => "the body ended before its last chunk",
            ChunkError::LineTooLong => "a chunk line too long",
            ChunkError::TrailingBytes => "bytes after the end of the body",
        })
    }
}

impl std::error::Error for ChunkError {}

/// The longest size or trailer line taken (its CRLF included).
pub const MAX_LINE: usize = 4096;

/// The size a chunk-size line announces. `line` is the whole line, CRLF included.
pub fn size_line(line: &[u8]) -> Result<u64, ChunkError> {
    let body = crlf_line(line)?;
    if !body.first().is_some_and(u8::is_ascii_hexdigit) {
        return Err(ChunkError::NoSize);
    }
    let digits = body.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits > 15 {
        return Err(ChunkError::Oversize);
    }
    if let Some(semicolon) = body.iter().position(|&b| b == b';')
        && body[semicolon..]
            .iter()
            .any(|&b| b != b'\t' && (b < 0x20 || b == 0x7f))
    {
        return Err(ChunkError::BadExtension);
    }
    match httparse::parse_chunk_size(line) {
        Ok(httparse::Status::Complete((used, size))) if used == line.len() => Ok(size),
        _ => Err(ChunkError::BadSize),
    }
}

/// A line of the trailer section (CRLF included): `Ok(true)` for the empty line that ends the
/// body, `Ok(false)` for a field.
pub fn trailer_line(line: &[u8]) -> Result<bool, ChunkError> {
    let body = crlf_line(line)?;
    if body.is_empty() {
        return Ok(true);
    }
    let colon = body
        .iter()
        .position(|&b| b == b':')
        .ok_or(ChunkError::BadTrailer)?;
    let name_ok = colon > 0 && body[..colon].iter().all(|&b| is_tchar(b));
    let value_ok = body[colon + 1..]
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f));
    if name_ok && value_ok {
        Ok(false)
    } else {
        Err(ChunkError::BadTrailer)
    }
}

/// The end of a chunk's data: exactly CRLF.
pub fn data_end(bytes: &[u8]) -> Result<(), ChunkError> {
    match bytes {
        b"\r\n" => Ok(()),
        [b'\n', ..] => Err(ChunkError::BareLf),
        _ => Err(ChunkError::NoCrlfAfterData),
    }
}

/// A line without its CRLF; a bare LF or a CR elsewhere is refused.
fn crlf_line(line: &[u8]) -> Result<&[u8], ChunkError> {
    if line.len() > MAX_LINE {
        return Err(ChunkError::LineTooLong);
    }
    let Some(body) = line.strip_suffix(b"\r\n") else {
        return Err(if line.ends_with(b"\n") {
            ChunkError::BareLf
        } else {
            ChunkError::CutShort
        });
    };
    if body.contains(&b'\n') {
        return Err(ChunkError::BareLf);
    }
    if body.contains(&b'\r') {
        return Err(ChunkError::BadSize);
    }
    Ok(body)
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The next line of `data` (through its LF), if a whole one is there.
fn next_line(data: &[u8]) -> Result<Option<&[u8]>, ChunkError> {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => Ok(Some(&data[..=i])),
        None if data.len() > MAX_LINE => Err(ChunkError::LineTooLong),
        None => Ok(None),
    }
}

/// A whole chunked body decoded: its payload, at most `max` bytes. The body must end with its
/// last chunk and trailer section, and nothing may follow.
pub fn dechunk(mut data: &[u8], max: usize) -> Result<Vec<u8>, ChunkError> {
    let mut out = Vec::new();
    loop {
        let line = next_line(data)?.ok_or(ChunkError::CutShort)?;
        let size = size_line(line)?;
        data = &data[line.len()..];
        if size == 0 {
            loop {
                let line = next_line(data)?.ok_or(ChunkError::CutShort)?;
                data = &data[line.len()..];
                if trailer_line(line)? {
                    return if data.is_empty() {
                        Ok(out)
                    } else {
                        Err(ChunkError::TrailingBytes)
                    };
                }
            }
        }
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s <= max.saturating_sub(out.len()))
            .ok_or(ChunkError::Oversize)?;
        let chunk = data.get(..size).ok_or(ChunkError::CutShort)?;
        out.extend_from_slice(chunk);
        data = &data[size..];
        if data.len() < 2 && b"\r\n".starts_with(data) {
            return Err(ChunkError::CutShort);
        }
        data_end(&data[..2.min(data.len())])?;
        data = &data[2..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_rfc_9112_allows_is_read() {
        assert_eq!(
            dechunk(b"3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n", 100).unwrap(),
            b"abcde"
        );
        assert_eq!(
            dechunk(b"A \t;ext\r\n0123456789\r\n0\r\n\r\n", 100)
                .unwrap()
                .len(),
            10
        );
        assert_eq!(
            dechunk(b"1\r\nx\r\n0\r\nExpires: never\r\n\r\n", 100).unwrap(),
            b"x"
        );
        assert_eq!(dechunk(b"0\r\n\r\n", 0).unwrap(), b"");
    }

    #[test]
    fn each_rule_refuses_with_its_own_reason() {
        let cases: &[(&[u8], ChunkError)] = &[
            (b"3\nabc\r\n0\r\n\r\n", ChunkError::BareLf),
            (b"3\r\nabc\n0\r\n\r\n", ChunkError::BareLf),
            (b"3\r\nabc\r\n0\r\n\n", ChunkError::BareLf),
            (b"3;a\nb\r\nabc\r\n0\r\n\r\n", ChunkError::BareLf),
            (b"\r\n", ChunkError::NoSize),
            (b";ext\r\n\r\n", ChunkError::NoSize),
            (b"+3\r\nabc\r\n0\r\n\r\n", ChunkError::NoSize),
            (b"3x\r\nabc\r\n0\r\n\r\n", ChunkError::BadSize),
            (b"3 4\r\nabc\r\n0\r\n\r\n", ChunkError::BadSize),
            (b"3\r\r\nabc\r\n0\r\n\r\n", ChunkError::BadSize),
            (b"1000000000000000\r\n", ChunkError::Oversize),
            (b"3;\x00\r\nabc\r\n0\r\n\r\n", ChunkError::BadExtension),
            (b"3\r\nabcd\r\n0\r\n\r\n", ChunkError::NoCrlfAfterData),
            (b"0\r\n folded\r\n\r\n", ChunkError::BadTrailer),
            (b"0\r\nno colon\r\n\r\n", ChunkError::BadTrailer),
            (b"3\r\nab", ChunkError::CutShort),
            (b"3\r\nabc\r\n", ChunkError::CutShort),
            (b"0\r\n", ChunkError::CutShort),
            (
                b"0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
                ChunkError::TrailingBytes,
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                dechunk(input, 1 << 20),
                Err(*want),
                "{}",
                String::from_utf8_lossy(input).escape_debug()
            );
        }
        assert_eq!(
            dechunk(b"5\r\nabcde\r\n0\r\n\r\n", 4),
            Err(ChunkError::Oversize)
        );
    }

    /// The three decoders the supervisor had (the login's, the export's, and the relay's line
    /// rules), as they were before this module, driven with the same inputs as [`dechunk`].
    mod before {
        /// `supervisor::net::login::dechunk` (server settings, the login refresh).
        pub fn login(mut body: &[u8]) -> Result<Vec<u8>, String> {
            let mut out = Vec::new();
            loop {
                let line_end = body
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .ok_or("a chunk size line without its end")?;
                let size_text = String::from_utf8_lossy(&body[..line_end]);
                let size_text = size_text.split(';').next().unwrap_or_default().trim();
                let size = usize::from_str_radix(size_text, 16).map_err(|_| "a bad chunk size")?;
                body = &body[line_end + 2..];
                if size == 0 {
                    return Ok(out);
                }
                if body.len() < size + 2 {
                    return Err("a chunk cut short".into());
                }
                out.extend_from_slice(&body[..size]);
                body = &body[size + 2..];
            }
        }

        /// `audit::export_http::dechunk` (the collector's answer): never fails.
        pub fn export(mut data: &[u8]) -> Result<Vec<u8>, String> {
            let mut out = Vec::new();
            while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
                let size = std::str::from_utf8(&data[..end]).ok().and_then(|s| {
                    usize::from_str_radix(s.split(';').next().unwrap_or("").trim(), 16).ok()
                });
                let Some(size) = size.filter(|&s| s > 0) else {
                    break;
                };
                let start = end + 2;
                let Some(chunk) = data.get(start..start + size) else {
                    break;
                };
                out.extend_from_slice(chunk);
                data = data.get(start + size + 2..).unwrap_or_default();
            }
            Ok(out)
        }

        /// `http::io::relay_chunked`'s rules (the proxy, the gateway, the terminating proxy),
        /// over a whole body: lines end at LF, the size before `;`/CR/LF trimmed of spaces and
        /// tabs, 1 to 15 hex digits, the data's end CRLF or LF, the trailer section ends at an
        /// empty line (what follows is the next message on the connection, not the body's).
        pub fn relay(data: &[u8]) -> Result<Vec<u8>, String> {
            fn line<'a>(data: &'a [u8], pos: &mut usize) -> Result<&'a [u8], String> {
                let i = data[*pos..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .ok_or("chunked body ended early")?;
                let l = &data[*pos..=*pos + i];
                *pos += i + 1;
                Ok(l)
            }
            let mut pos = 0;
            let mut out = Vec::new();
            loop {
                let l = line(data, &mut pos)?;
                let text = l
                    .split(|b| *b == b';' || *b == b'\r' || *b == b'\n')
                    .next()
                    .unwrap_or_default();
                let text = std::str::from_utf8(text)
                    .map_err(|_| "bad chunk size")?
                    .trim_matches(|c| c == ' ' || c == '\t');
                if text.is_empty()
                    || text.len() > 15
                    || !text.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    return Err("bad chunk size".into());
                }
                let size = usize::from_str_radix(text, 16).map_err(|_| "bad chunk size")?;
                if size == 0 {
                    loop {
                        let l = line(data, &mut pos)?;
                        if l == b"\r\n" || l == b"\n" {
                            return Ok(out);
                        }
                    }
                }
                let chunk = data
                    .get(pos..pos + size)
                    .ok_or("chunked body ended early")?;
                out.extend_from_slice(chunk);
                pos += size;
                let end = line(data, &mut pos)?;
                if end != b"\r\n" && end != b"\n" {
                    return Err("missing CRLF after chunk data".into());
                }
            }
        }
    }

    /// Inputs near well-formed bodies: each of a few bodies with one byte replaced, inserted or
    /// removed at every position, by the bytes framing turns on.
    fn near_misses() -> Vec<Vec<u8>> {
        let bodies: &[&[u8]] = &[
            b"3\r\nabc\r\n0\r\n\r\n",
            b"5;ext=v\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
            b"a\r\n0123456789\r\n1\r\n!\r\n0\r\n\r\n",
        ];
        let bytes = b"\r\n \t;:=0af+g\x00\x7f";
        let mut out = Vec::new();
        for body in bodies {
            out.push(body.to_vec());
            for i in 0..=body.len() {
                for &b in bytes {
                    let mut v = body.to_vec();
                    v.insert(i, b);
                    out.push(v);
                    if i < body.len() {
                        let mut v = body.to_vec();
                        v[i] = b;
                        out.push(v);
                    }
                }
                if i < body.len() {
                    let mut v = body.to_vec();
                    v.remove(i);
                    out.push(v);
                }
            }
        }
        let extra: &[&[u8]] = &[
            b"3\nabc\n0\n\n",
            b"+3\r\nabc\r\n0\r\n\r\n",
            b"3;a\nb\r\nabc\r\n0\r\n\r\n",
            b";x\r\n\r\n",
            b"\r\n\r\n",
            b"0000000000000003\r\nabc\r\n0\r\n\r\n",
            b"3\r\nabc\r\n0\r\n folded\r\n\r\n",
            b"3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
            b"3\r\nabc",
            b"0\r\n",
        ];
        out.extend(extra.iter().map(|e| e.to_vec()));
        out
    }

    /// The differential test of issue 40: the old decoders and the new one over the same
    /// malformed inputs. Where the old copies disagreed among themselves (a body one of them
    /// reads one way, another another way or not at all), the new codec refuses; where it
    /// accepts, every old copy read the same payload. The kinds of disagreement found are
    /// printed (`cargo test --lib chunked -- --nocapture`).
    #[test]
    fn where_the_old_decoders_disagreed_the_new_one_refuses() {
        let mut disagreements: std::collections::BTreeMap<String, String> = Default::default();
        let inputs = near_misses();
        for input in &inputs {
            let old = [
                ("login", before::login(input).ok()),
                ("export", before::export(input).ok()),
                ("relay", before::relay(input).ok()),
            ];
            let new = dechunk(input, 1 << 20);
            let shown = String::from_utf8_lossy(input).escape_debug().to_string();
            if let Ok(payload) = &new {
                for (name, got) in &old {
                    assert_eq!(
                        got.as_ref(),
                        Some(payload),
                        "the new codec accepts {shown} but the old {name} read it otherwise"
                    );
                }
            }
            let first = &old[0].1;
            if old.iter().any(|(_, got)| got != first) {
                assert!(
                    new.is_err(),
                    "the old decoders disagree on {shown} and the new one accepts it"
                );
                let kind = old
                    .iter()
                    .map(|(name, got)| match got {
                        Some(p) => format!("{name}=ok({})", p.len()),
                        None => format!("{name}=refused"),
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let class = format!("{kind} new={}", new.unwrap_err());
                disagreements.entry(class).or_insert(shown);
            }
        }
        for (class, example) in &disagreements {
            println!("{class}: e.g. \"{example}\"");
        }
        assert!(
            disagreements.len() >= 5,
            "{} inputs, {} kinds of disagreement",
            inputs.len(),
            disagreements.len()
        );
    }
}
