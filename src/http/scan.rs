//! Looking for a credential in what a service answers. The gateway and the terminating proxy add
//! a real credential to requests; a service that hands it back (an API that echoes the request,
//! a debug endpoint, an error page quoting the headers) gives it to the agent. [`EchoNeedles`]
//! are the spellings of one secret an answer could carry, made in one place; [`EchoScan`] looks
//! for them in an answer as it is relayed, keeping only the last (longest spelling − 1) bytes
//! between pieces, so a spelling split across two reads or two chunks is still found, in bounded
//! memory and without holding a body back. Neither type ever shows a spelling: their `Debug`
//! says how many there are, and nothing else prints them.

use base64::Engine as _;
use memchr::memmem::Finder;
use std::fmt;

/// The spellings of one secret an answer could carry back, ready to search for.
#[derive(Default)]
pub struct EchoNeedles {
    finders: Vec<Finder<'static>>,
    /// The longest spelling's length minus one: how much of a stream is kept between pieces.
    overlap: usize,
}

impl fmt::Debug for EchoNeedles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EchoNeedles({} spellings, redacted)", self.finders.len())
    }
}

impl EchoNeedles {
    /// Every spelling of `secret` a service could hand back, for a credential sent as the
    /// secret itself in a header (`x-api-key: S`, `Authorization: Bearer S`, any `name: format`
    /// with the secret in it) or, with `basic_user`, as `Authorization: Basic base64(user:S)`:
    ///
    /// * the secret as it is (which also finds the header value that was added: it holds the
    ///   secret verbatim, so it needs no spelling of its own);
    /// * for basic auth, `base64(user:S)` without its padding (the header value holds it, and a
    ///   service that decodes and re-encodes it writes the same letters);
    /// * each of these as a JSON string holds it when it has `"` or `\` (`\"`, `\\`), and with
    ///   `/` also escaped (`\/`, as PHP and some Java encoders write it) when it has `/`;
    /// * each percent-encoded, when it has a byte other than a letter, digit, `-`, `.`, `_` or
    ///   `~` (upper-case hex digits, as RFC 3986 recommends and the common encoders write).
    ///
    /// Not searched for: lower-case percent escapes, `+` for a space, `\u` escapes (non-ASCII
    /// characters, Go's `\u003c` for `<`), other encodings of the value (base64 of the secret
    /// alone, hashes). A short secret is still searched for; below about 8 bytes a service's
    /// ordinary output may hold it by chance, and the record then says it was handed back when
    /// it was not.
    pub fn of_secret(secret: &str, basic_user: Option<&str>) -> EchoNeedles {
        let mut bases = vec![secret.as_bytes().to_vec()];
        if let Some(user) = basic_user {
            bases.push(
                base64::engine::general_purpose::STANDARD_NO_PAD
                    .encode(format!("{user}:{secret}"))
                    .into_bytes(),
            );
        }
        let mut spellings: Vec<Vec<u8>> = Vec::new();
        for base in bases {
            let json = json_escaped(&base, false);
            let json_slash = json_escaped(&base, true);
            let percent = percent_encoded(&base);
            for spelling in [base, json, json_slash, percent] {
                if !spelling.is_empty() && !spellings.contains(&spelling) {
                    spellings.push(spelling);
                }
            }
        }
        let overlap = spellings.iter().map(Vec::len).max().unwrap_or(1) - 1;
        EchoNeedles {
            finders: spellings
                .iter()
                .map(|s| Finder::new(s).into_owned())
                .collect(),
            overlap,
        }
    }

    /// How many spellings there are (none: nothing to look for).
    pub fn len(&self) -> usize {
        self.finders.len()
    }

    pub fn is_empty(&self) -> bool {
        self.finders.is_empty()
    }

    /// Whether `bytes` hold a spelling.
    fn found_in(&self, bytes: &[u8]) -> bool {
        self.finders.iter().any(|f| f.find(bytes).is_some())
    }

    /// `text` with every spelling replaced by `<redacted>`: for a message made partly of what a
    /// service sent (a header value quoted in an error), before it goes into a record.
    pub fn redact(&self, text: String) -> String {
        if !self.found_in(text.as_bytes()) {
            return text;
        }
        let mut bytes = text.into_bytes();
        for finder in &self.finders {
            let needle_len = finder.needle().len();
            let mut out = Vec::with_capacity(bytes.len());
            let mut rest = &bytes[..];
            // Searched from after each replacement: `<redacted>` may itself hold a short secret.
            while let Some(at) = finder.find(rest) {
                out.extend_from_slice(&rest[..at]);
                out.extend_from_slice(b"<redacted>");
                rest = &rest[at + needle_len..];
            }
            out.extend_from_slice(rest);
            bytes = out;
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// `bytes` as a JSON string's contents hold them: `"` and `\` escaped, and `/` too when
/// `slash`. (The secrets searched for have no control characters.)
fn json_escaped(bytes: &[u8], slash: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b == b'"' || b == b'\\' || (slash && b == b'/') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// `bytes` percent-encoded: every byte but RFC 3986's unreserved ones as `%XX` (upper case).
fn percent_encoded(bytes: &[u8]) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
    out
}

/// A search of one answer, as it is relayed, for the spellings of the credential its request
/// carried.
#[derive(Default)]
pub struct EchoScan {
    needles: EchoNeedles,
    /// The last [`EchoNeedles::overlap`] bytes fed (fewer at the start).
    tail: Vec<u8>,
    /// Scratch: the tail and the start of the next piece, searched for a spelling across them.
    seam: Vec<u8>,
    found: bool,
    unchecked: Option<String>,
}

/// The content codings a record names as such; any other is `other`.
const KNOWN_CODINGS: &[&str] = &[
    "gzip",
    "x-gzip",
    "deflate",
    "br",
    "zstd",
    "compress",
    "x-compress",
    "dcb",
    "dcz",
];
/// The most codings a record names (a hostile upstream could list thousands).
const CODINGS_SHOWN: usize = 4;

impl fmt::Debug for EchoScan {
    // The tail holds the answer's last bytes: perhaps most of the secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EchoScan")
            .field("needles", &self.needles)
            .field("found", &self.found)
            .field("unchecked", &self.unchecked)
            .finish_non_exhaustive()
    }
}

impl EchoScan {
    /// A scan for `needles` (none: every piece passes unlooked at).
    pub fn new(needles: EchoNeedles) -> EchoScan {
        EchoScan {
            needles,
            ..EchoScan::default()
        }
    }

    /// Looks at the next bytes of the answer as relayed.
    pub fn feed(&mut self, piece: &[u8]) {
        if self.found || self.needles.is_empty() || piece.is_empty() {
            return;
        }
        let overlap = self.needles.overlap;
        if !self.tail.is_empty() {
            // A spelling that starts in what came before and ends in this piece.
            self.seam.clear();
            self.seam.extend_from_slice(&self.tail);
            self.seam
                .extend_from_slice(&piece[..piece.len().min(overlap)]);
            if self.needles.found_in(&self.seam) {
                self.found = true;
                return;
            }
        }
        if self.needles.found_in(piece) {
            self.found = true;
            return;
        }
        if piece.len() >= overlap {
            self.tail.clear();
            self.tail.extend_from_slice(&piece[piece.len() - overlap..]);
        } else {
            self.tail.extend_from_slice(piece);
            let extra = self.tail.len().saturating_sub(overlap);
            self.tail.drain(..extra);
        }
    }

    /// Notes the `Content-Encoding` values of a final response whose body is relayed: a body
    /// in a content coding (gzip, br, …) cannot be searched as it passes, and the scan says so
    /// rather than that nothing was found. (Not for a HEAD, 204 or 304: no body.)
    pub fn note_content_codings<'a>(&mut self, values: impl IntoIterator<Item = &'a [u8]>) {
        if self.needles.is_empty() {
            return;
        }
        let mut codings: Vec<&str> = Vec::new();
        for value in values {
            for coding in value.split(|b| *b == b',') {
                let coding = String::from_utf8_lossy(coding).trim().to_ascii_lowercase();
                if coding.is_empty() || coding == "identity" {
                    continue;
                }
                // Only names from a fixed list go into the record: the header is the service's
                // to write, and a service that echoes the credential could echo it here too.
                let shown = KNOWN_CODINGS
                    .iter()
                    .find(|k| **k == coding)
                    .copied()
                    .unwrap_or("other");
                if !codings.contains(&shown) && codings.len() < CODINGS_SHOWN {
                    codings.push(shown);
                }
            }
        }
        if !codings.is_empty() {
            self.unchecked = Some(format!("content-encoding {}", codings.join(", ")));
        }
    }

    /// Whether a spelling of the credential was in what was fed.
    pub fn found(&self) -> bool {
        self.found
    }

    /// Why the body could not be searched (`content-encoding gzip`), if it could not; what was
    /// fed was searched all the same (the head is never encoded).
    pub fn unchecked(&self) -> Option<&str> {
        self.unchecked.as_deref()
    }

    /// See [`EchoNeedles::redact`].
    pub fn redact(&self, text: String) -> String {
        self.needles.redact(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_pieces(needles: EchoNeedles, pieces: &[&[u8]]) -> bool {
        let mut scan = EchoScan::new(needles);
        for piece in pieces {
            scan.feed(piece);
        }
        scan.found()
    }

    #[test]
    fn a_spelling_is_found_whatever_the_boundaries() {
        let secret = "sk-REAL-0123456789abcdef";
        let text = format!("HTTP/1.1 200 OK\r\n\r\n{{\"seen\":\"x-api-key: {secret}\"}} and more");
        let bytes = text.as_bytes();
        // One boundary at every position.
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert!(
                scan_pieces(EchoNeedles::of_secret(secret, None), &[a, b]),
                "cut at {cut}"
            );
        }
        // Two boundaries at every pair of positions (pieces shorter than the secret included).
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let pieces = [&bytes[..i], &bytes[i..j], &bytes[j..]];
                assert!(
                    scan_pieces(EchoNeedles::of_secret(secret, None), &pieces),
                    "cuts at {i} and {j}"
                );
            }
        }
        // One byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert!(scan_pieces(EchoNeedles::of_secret(secret, None), &singles));
    }

    #[test]
    fn a_prefix_or_a_near_miss_is_not_a_find() {
        let secret = "ghs_REAL-token-4f9a";
        let needles = || EchoNeedles::of_secret(secret, Some("x-access-token"));
        // Everything but the last byte, split at every position, then more text.
        let almost = format!(
            "{}! and then ghs_REAL-token-4f9b",
            &secret[..secret.len() - 1]
        );
        let bytes = almost.as_bytes();
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert!(!scan_pieces(needles(), &[a, b]), "cut at {cut}");
        }
        // The prefix at the end of one piece and the rest of something else after it.
        assert!(!scan_pieces(
            needles(),
            &[b"...ghs_REAL-tok", b"EN-4f9a", b"ghs_REAL-token-4f9"]
        ));
        // No needles: nothing is ever found.
        assert!(!scan_pieces(EchoNeedles::default(), &[secret.as_bytes()]));
    }

    #[test]
    fn every_spelling_is_searched_for() {
        let secret = "a/b\"c\\d+e:f ~-._0Z";
        let needles = || EchoNeedles::of_secret(secret, Some("user"));
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("user:{secret}"));
        let json = serde_json::to_string(secret).unwrap();
        let spellings = [
            secret.to_string(),
            basic.clone(),
            // serde_json, JavaScript, Ruby: `"` and `\` escaped.
            json[1..json.len() - 1].to_string(),
            // PHP: `/` too.
            "a\\/b\\\"c\\\\d+e:f ~-._0Z".to_string(),
            "a%2Fb%22c%5Cd%2Be%3Af%20~-._0Z".to_string(),
            // The basic value, JSON-escaped with `\/` and percent-encoded.
            basic.replace('/', "\\/"),
            basic
                .replace('/', "%2F")
                .replace('+', "%2B")
                .replace('=', "%3D"),
        ];
        for spelling in &spellings {
            let text = format!("{{\"echo\":\"{spelling}\"}}");
            let bytes = text.as_bytes();
            for cut in 0..=bytes.len() {
                let (a, b) = bytes.split_at(cut);
                assert!(scan_pieces(needles(), &[a, b]), "{spelling} cut at {cut}");
            }
        }
        // Each spelling once: the raw form, three escaped forms, and the basic value's forms.
        assert!(needles().len() <= 8, "{:?}", needles());
        // A plain token has one spelling (two with basic auth).
        assert_eq!(EchoNeedles::of_secret("ghp_abc123XYZ", None).len(), 1);
        assert_eq!(
            EchoNeedles::of_secret("ghp_abc123XYZ", Some("x-access-token")).len(),
            2
        );
        // Several secrets' spellings in one answer: the first find ends the search.
        assert!(scan_pieces(
            needles(),
            &[
                b"nothing here, then ",
                basic.as_bytes(),
                b" and ",
                secret.as_bytes()
            ]
        ));
    }

    #[test]
    fn no_spelling_is_ever_shown() {
        let secret = "sk-ant-REAL-do-not-show";
        let needles = EchoNeedles::of_secret(secret, Some("u"));
        let mut scan = EchoScan::new(needles);
        // All but the last byte: held in the tail, never shown.
        scan.feed(&secret.as_bytes()[..secret.len() - 1]);
        assert!(!scan.found());
        let shown = format!("{scan:?}");
        assert!(!shown.contains("REAL"), "{shown}");
        scan.feed(b"w");
        assert!(scan.found());
        // A replacement never makes a new find: a short secret inside `<redacted>`.
        let short = EchoNeedles::of_secret("edact", None);
        assert_eq!(short.redact("xedacty".into()), "x<redacted>y");
        let redacted = scan.redact(format!(
            "bad Content-Length `{secret}` and `{secret}` again"
        ));
        assert_eq!(
            redacted,
            "bad Content-Length `<redacted>` and `<redacted>` again"
        );
    }

    #[test]
    fn an_encoded_body_is_said_to_be_unchecked() {
        let mut scan = EchoScan::new(EchoNeedles::of_secret("secret-value", None));
        scan.note_content_codings([&b"identity"[..], b" "]);
        assert_eq!(scan.unchecked(), None);
        scan.note_content_codings([&b"GZIP, secret-value"[..], b"br,gzip"]);
        assert_eq!(scan.unchecked(), Some("content-encoding gzip, other, br"));
        // Without a credential there is nothing to check.
        let mut idle = EchoScan::default();
        idle.note_content_codings([&b"gzip"[..]]);
        assert_eq!(idle.unchecked(), None);
    }
}
