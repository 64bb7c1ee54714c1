//! One layer's text: TOML (or a built-in's JSON form) into a `ProfileFile`, the checks a single
//! layer can fail (reserved paths, keys StepProof owns), and placing a problem at its
//! file, line and column.

use super::paths::PathSpec;
use super::{ProfileError, ProfileFile, RESERVED_PATHS, claude_settings};
use crate::audit::STATE_DIR;
use std::path::Path;

/// Refuses, with file and line, `read_only`, `writable` and `hidden` entries that cover a
/// reserved path, and writable entries that cover StepProof's own state in the home.
pub(super) fn check_reserved_paths(
    origin: &str,
    text: &str,
    file: &ProfileFile,
) -> Result<(), ProfileError> {
    let fs = &file.filesystem;
    let lists = [
        ("read_only", &fs.read_only),
        ("writable", &fs.writable),
        ("hidden", &fs.hidden),
    ];
    for (key, list) in lists {
        for spec in list.iter() {
            let covered = match spec {
                PathSpec::Absolute(rel) => {
                    let path = Path::new("/").join(rel);
                    RESERVED_PATHS
                        .iter()
                        .find(|r| Path::new(r).starts_with(&path) || path.starts_with(r))
                        .map(|r| r.to_string())
                }
                PathSpec::Home(rel) if key == "writable" => {
                    let state = Path::new(STATE_DIR);
                    (state.starts_with(rel) || rel.starts_with(state))
                        .then(|| format!("~/{} (StepProof's audit logs)", state.display()))
                }
                _ => None,
            };
            if let Some(reserved) = covered {
                let spelled = String::from(spec.clone());
                let (line, column) = text
                    .find(&format!("\"{spelled}\""))
                    .or_else(|| text.find(&format!("'{spelled}'")))
                    .map(|at| line_column(text, at + 1))
                    .unwrap_or((1, 1));
                return Err(ProfileError::Syntax {
                    origin: origin.to_string(),
                    line,
                    column,
                    message: format!(
                        "filesystem.{key}: {spelled:?} covers {reserved}, which StepProof places itself; \
                         the entry would remove it (and with it the hook or the record): name a path that does not contain it"
                    ),
                });
            }
        }
    }
    Ok(())
}

pub(super) fn owned_key_message(key: &str) -> String {
    format!(
        "claude.managed_settings.{key}: StepProof owns this key (it keeps StepProof's hook installed and running); profiles may add other keys only"
    )
}

/// Refuses, with file and line, managed-settings keys StepProof owns and variables that would
/// switch Claude Code's managed hooks off or point it at other managed settings.
pub(super) fn check_claude_keys(
    origin: &str,
    text: &str,
    file: &ProfileFile,
) -> Result<(), ProfileError> {
    let at = |needle: &str, message: String| {
        let (line, column) = text
            .find(needle)
            .map(|at| line_column(text, at))
            .unwrap_or((1, 1));
        ProfileError::Syntax {
            origin: origin.to_string(),
            line,
            column,
            message,
        }
    };
    if let Some(claude) = &file.claude
        && let Some(key) = claude_settings::owned_keys_in(&claude.managed_settings).first()
    {
        let last = key.rsplit('.').next().unwrap_or(key);
        return Err(at(last, owned_key_message(key)));
    }
    let process = &file.process;
    for (key, name) in process
        .env
        .iter()
        .map(|n| ("env", n))
        .chain(process.set_env.keys().map(|n| ("set_env", n)))
    {
        if claude_settings::defeats_hook(name) {
            return Err(at(
                name,
                format!(
                    "process.{key}: {name:?} would switch Claude Code's managed hooks off, point it at other managed settings, or name a script it runs before every command; StepProof keeps it out of every run"
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn parse_file(
    origin: &str,
    text: &str,
    json: Option<&str>,
) -> Result<ProfileFile, ProfileError> {
    // A built-in's JSON form loads to the same profile, faster; should it ever not load, the
    // TOML gives the error with its line.
    if let Some(file) = json.and_then(|json| serde_json::from_str(json).ok()) {
        return Ok(file);
    }
    parse_toml(origin, text)
}

pub(super) fn parse_toml(origin: &str, text: &str) -> Result<ProfileFile, ProfileError> {
    toml::from_str::<ProfileFile>(text).map_err(|e| {
        let (line, column) = e
            .span()
            .map(|span| line_column(text, span.start))
            .unwrap_or((1, 1));
        ProfileError::Syntax {
            origin: origin.to_string(),
            line,
            column,
            message: e.message().trim().to_string(),
        }
    })
}

/// A problem with the merged profile, placed at the file and line that set the value: the
/// message starts with the setting's dotted name (`network.proxy_port = 0 …`) and may quote the
/// entry at fault (`` `…` `` or `"…"`); the outermost layer that sets it is named. When no layer
/// spells it (a default), the profile's own name is given without a line.
pub(super) fn place_problem(
    texts: &[(String, String)],
    origin: String,
    message: String,
) -> ProfileError {
    let key: String = message
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
        .collect();
    let key = key.trim_end_matches('.');
    let path: Vec<&str> = key.split('.').filter(|k| !k.is_empty()).collect();
    let quoted = quoted_value(&message[key.len()..]);
    for (layer, text) in texts {
        if let Some(offset) = locate_setting(text, &path, quoted.as_deref()) {
            let (line, column) = line_column(text, offset);
            return ProfileError::Syntax {
                origin: layer.clone(),
                line,
                column,
                message,
            };
        }
    }
    ProfileError::Invalid { origin, message }
}

/// The first `` `…` `` or `"…"` in `text`.
fn quoted_value(text: &str) -> Option<String> {
    let start = text.find(['`', '"'])?;
    let quote = text[start..].chars().next()?;
    let rest = &text[start + 1..];
    let end = rest.find(quote)?;
    Some(rest[..end].to_string()).filter(|v| !v.is_empty())
}

/// Where `text` sets the setting `path` (its key; with `value`, the entry that spells it),
/// as a byte offset; `None` when this text does not set it.
pub(super) fn locate_setting(text: &str, path: &[&str], value: Option<&str>) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let document = DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let mut found = None;
    for (depth, name) in path.iter().enumerate() {
        let (key, item) = table.iter().find(|(k, _)| k.get_ref().as_ref() == *name)?;
        found = Some((key.span(), item.span()));
        match item.get_ref() {
            DeValue::Table(inner) if depth + 1 < path.len() => table = inner,
            _ => break,
        }
    }
    let (key_span, item_span) = found?;
    if let Some(value) = value {
        // The entry inside the value's text, else anywhere in the layer.
        for spelled in [format!("\"{value}\""), format!("'{value}'")] {
            let inside = text.get(item_span.clone()).and_then(|t| t.find(&spelled));
            if let Some(at) = inside {
                return Some(item_span.start + at);
            }
        }
        for spelled in [format!("\"{value}\""), format!("'{value}'")] {
            if let Some(at) = text.find(&spelled) {
                return Some(at);
            }
        }
    }
    Some(key_span.start)
}

/// 1-based line and column of a byte offset.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}
