//! What of the agent's text a model verifier is shown. The diff of a step and the tails of its
//! evidence commands' output go to a model (outward, like an export): a secret the worker
//! planted in a file or printed from a test must not be echoed into the verifier's request.
//! What is shown as written is chosen by an **allow-list of shapes**, not by a list of secret
//! formats: every token (a run of letters, digits and `_-./+=:@~%`) of 16 characters or more is
//! shown only when each of its parts (split at those separators) is plainly not a secret — a
//! word in one case (`negative`, `NUMBERS`, `Parse`), a camel-case identifier of long humps
//! (`parseNegativeNumbers`), a number of at most 20 digits, or a short mix of at most 12
//! (`utf8`, `x86`, `a456`). Any other token — an API key, a token, a long hex or base64 run, a
//! private key's lines — is replaced by `[masked sha256:<12 hex>]` (the same token, the same
//! digest, so a verifier can still see that two places hold one value). Shorter tokens are
//! shown: a secret under 16 characters is not recognised by its shape.

use sha2::{Digest, Sha256};

/// Tokens shorter than this are shown as written.
pub const TOKEN_MIN: usize = 16;

fn separator(c: char) -> bool {
    matches!(c, '_' | '-' | '.' | '/' | '+' | '=' | ':' | '@' | '~' | '%')
}

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || separator(c)
}

/// `text` with every token that is not plainly a non-secret masked, and how many were.
pub fn mask(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut masked = 0;
    let mut rest = text;
    while let Some(start) = rest.find(token_char) {
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let end = rest.find(|c: char| !token_char(c)).unwrap_or(rest.len());
        let token = &rest[..end];
        if plain(token) {
            out.push_str(token);
        } else {
            masked += 1;
            out.push_str(&format!(
                "[masked sha256:{}]",
                &hex::encode(Sha256::digest(token.as_bytes()))[..12]
            ));
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    (out, masked)
}

/// Whether a token is shown as written.
fn plain(token: &str) -> bool {
    token.len() < TOKEN_MIN || token.split(separator).all(plain_part)
}

/// One part of a token between separators.
fn plain_part(part: &str) -> bool {
    let letters = part.chars().all(|c| c.is_ascii_alphabetic());
    let digits = part.chars().all(|c| c.is_ascii_digit());
    if part.is_empty() || (digits && part.len() <= 20) {
        return true;
    }
    if letters {
        return one_case(part) || long_humps(part);
    }
    part.len() <= 12
}

/// `word`, `WORD`, `Word`.
fn one_case(part: &str) -> bool {
    let rest = &part[1..];
    rest.chars().all(|c| c.is_ascii_lowercase()) || part.chars().all(|c| c.is_ascii_uppercase())
}

/// A camel-case identifier: its humps (a capital and the lower-case letters after it) are on
/// average at least four letters long, as words are; a random mix of cases is not.
fn long_humps(part: &str) -> bool {
    let humps = part
        .char_indices()
        .filter(|&(i, c)| i == 0 || c.is_ascii_uppercase())
        .count();
    let upper_runs = part
        .as_bytes()
        .windows(2)
        .filter(|w| w[0].is_ascii_uppercase() && w[1].is_ascii_uppercase())
        .count();
    upper_runs <= 1 && part.len() >= 4 * humps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_output_is_shown_as_written() {
        for text in [
            "FAILED tests/test_calc.py::test_parse_negative_numbers - assert 5 == 4",
            "  File \"/work/src/statistics/median_of_numbers.py\", line 12, in median",
            "test result: ok. 12 passed; 0 failed; finished in 0.03s",
            "error[E0308]: mismatched types --> src/parseNegativeNumbers.rs:4:5",
            "2026-12-07T16:58:46.123456789Z internationalization 1234567890123456",
            "id 123e4567-e89b-12d3-a456-426614174000 https://example.com/docs/getting-started",
            "CONFIGURATION_DIRECTORY=/home/user/.config/stepproof/profiles",
        ] {
            let (shown, n) = mask(text);
            assert_eq!((shown.as_str(), n), (text, 0));
        }
    }

    #[test]
    fn secret_shaped_tokens_are_masked_with_a_stable_digest() {
        for secret in [
            "sk-ant-api03-Xk9fQ2mZ7vR4tY1uI8oP3aS6dF0gH5jK",
            "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
            "AKIAIOSFODNN7EXAMPLE",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0In0.abc",
            "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
            "0123456789abcdef0123456789abcdef",
            "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
        ] {
            let text = format!("token: {secret} and again {secret} .");
            let (shown, n) = mask(&text);
            assert!(!shown.contains(secret), "{shown}");
            assert_eq!(n, 2, "{shown}");
            let digests: Vec<&str> = shown.matches("[masked sha256:").collect();
            assert_eq!(digests.len(), 2);
            let first = shown.find("[masked").unwrap();
            let second = shown.rfind("[masked").unwrap();
            assert_eq!(
                shown[first..first + 28],
                shown[second..second + 28],
                "{shown}"
            );
        }
    }
}
