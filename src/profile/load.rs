//! Loading a profile: its layers (built-in or file) along the `extends` chain, merged and
//! resolved; and what is read again later (where a setting is set, the policy hash).

use super::merge::merge;
use super::parse::{
    check_claude_keys, check_reserved_paths, line_column, locate_setting, parse_file, place_problem,
};
use super::resolve::resolve;
use super::{BUILTIN, BUILTIN_JSON, Profile, ProfileError, ProfileFile, ProfileSource};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

const MAX_EXTENDS_DEPTH: usize = 8;

impl Profile {
    /// The built-in default profile.
    pub fn builtin_default() -> Result<Profile, ProfileError> {
        Profile::load(None)
    }

    /// Loads a profile file, or the built-in default when `path` is `None`.
    pub fn load(path: Option<&Path>) -> Result<Profile, ProfileError> {
        let mut layers = Vec::new();
        let mut files = Vec::new();
        let (mut origin, mut text, mut base_dir, mut json) = match path {
            None => builtin_source("default").expect("the default profile is compiled in"),
            Some(p) => match builtin_named(p)? {
                Some(builtin) => builtin,
                None => {
                    let source = file_source(p)?;
                    files.push(ProfileSource::of(p, &source.1));
                    source
                }
            },
        };
        // Each layer's name and text, outermost first: a problem found in the merged result is
        // placed at the line of the layer that set it.
        let mut texts: Vec<(String, String)> = Vec::new();
        loop {
            let file = parse_file(&origin, &text, json)?;
            check_reserved_paths(&origin, &text, &file)?;
            check_claude_keys(&origin, &text, &file)?;
            let extends = file.extends.clone();
            layers.push((origin.clone(), file));
            texts.push((origin.clone(), std::mem::take(&mut text)));
            let Some(parent) = extends else { break };
            if layers.len() > MAX_EXTENDS_DEPTH || layers.iter().any(|(o, _)| *o == parent) {
                return Err(ProfileError::ExtendsLoop {
                    origin,
                    name: parent,
                });
            }
            (origin, text, base_dir, json) = match builtin_source(&parent) {
                Some(found) => found,
                None => {
                    let parent_path = match &base_dir {
                        Some(dir) => dir.join(&parent),
                        None => PathBuf::from(&parent),
                    };
                    // Whatever is wrong with the file `extends` names is said at that line.
                    let (line, column) = texts
                        .last()
                        .and_then(|(_, t)| {
                            locate_setting(t, &["extends"], None).map(|at| line_column(t, at))
                        })
                        .unwrap_or((1, 1));
                    let at_extends = |message: String| ProfileError::Syntax {
                        origin: origin.clone(),
                        line,
                        column,
                        message: format!("extends = {parent:?}: {message}"),
                    };
                    if parent.trim().is_empty() {
                        return Err(at_extends(
                            "empty: name a built-in profile or a file".to_string(),
                        ));
                    }
                    if !parent_path.exists() {
                        return Err(at_extends(format!(
                            "no built-in profile of that name ({}) and no file at {}",
                            BUILTIN
                                .iter()
                                .map(|(n, _)| *n)
                                .collect::<Vec<_>>()
                                .join(", "),
                            parent_path.display()
                        )));
                    }
                    let source =
                        file_source(&parent_path).map_err(|e| at_extends(e.to_string()))?;
                    files.push(ProfileSource::of(&parent_path, &source.1));
                    source
                }
            };
        }
        // Merge from the root of the chain outwards.
        let mut merged = ProfileFile::default();
        let mut origins = Vec::new();
        for (origin, layer) in layers.into_iter().rev() {
            merged = merge(merged, layer);
            origins.push(origin);
        }
        let origin = origins.last().cloned().unwrap_or_default();
        let mut profile =
            resolve(merged, origins).map_err(|message| place_problem(&texts, origin, message))?;
        profile.files = files;
        Ok(profile)
    }

    /// Where a file of the chain sets `key` (`["network", "gateway", "login_paths"]`), as
    /// `file:line`, outermost file first; `None` when no file that can be read again sets it.
    /// For messages about a setting found in the merged profile (the files are read again).
    pub fn where_set(&self, key: &[&str]) -> Option<String> {
        self.files.iter().find_map(|file| {
            let text = crate::regular_file::read_to_string(&file.path, MAX_PROFILE_BYTES).ok()?;
            let offset = locate_setting(&text, key, None)?;
            let (line, _) = line_column(&text, offset);
            Some(format!("{}:{line}", file.path.display()))
        })
    }

    /// Where a file of the chain lists `value` under `keys` (`filesystem.read_only`), as
    /// `file:line:column` of the entry; `None` when no file that can be read again spells it
    /// (a built-in's entry, or a file changed since).
    pub fn where_listed(&self, keys: &[&str], value: &str) -> Option<String> {
        self.files.iter().find_map(|file| {
            let text = crate::regular_file::read_to_string(&file.path, MAX_PROFILE_BYTES).ok()?;
            let at = locate_setting(&text, keys, Some(value))?;
            // The key alone is not the entry: only a spelled value places it.
            let spelled = [format!("\"{value}\""), format!("'{value}'")];
            spelled
                .iter()
                .any(|q| text[at..].starts_with(q.as_str()))
                .then(|| {
                    let (line, column) = line_column(&text, at);
                    format!(
                        "{}:{line}:{column}",
                        crate::audit::text::one_line(&file.path)
                    )
                })
        })
    }

    /// `sha256:` of the canonical JSON of the requested policy: the profile serialized field by
    /// field (in declaration order; every list in the order the profile gives it), streamed into
    /// the hash without building a JSON tree (this runs before every launch).
    pub fn policy_hash(&self) -> String {
        struct HashWriter(Sha256);
        impl std::io::Write for HashWriter {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.update(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut digest = HashWriter(Sha256::new());
        serde_json::to_writer(&mut digest, self).expect("a profile always serializes");
        format!("sha256:{}", hex::encode(digest.0.finalize()))
    }
}

/// Where a layer of a profile comes from: its name for messages, its text, the directory its
/// `extends` is relative to, and for a built-in its JSON form (see build.rs).
type Source = (String, String, Option<PathBuf>, Option<&'static str>);

/// The built-in profiles' names, as a list to show.
pub fn builtin_names() -> String {
    BUILTIN
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(", ")
}

pub(super) fn builtin_source(name: &str) -> Option<Source> {
    let text = BUILTIN.iter().find(|(n, _)| *n == name)?.1;
    let json = BUILTIN_JSON
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, json)| *json);
    Some((format!("<built-in {name}>"), text.to_string(), None, json))
}

/// The largest profile file read (each file of an `extends` chain): far more than any profile
/// needs, small enough that `--profile /dev/zero` or a huge file ends in an error, not in the
/// out-of-memory killer.
pub const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// `--profile NAME`: a bare name of a built-in profile (`default`, `ci`, `strict`) is that
/// profile; a file of the same name here makes it ambiguous (`./NAME` names the file).
fn builtin_named(path: &Path) -> Result<Option<Source>, ProfileError> {
    let Some(name) = path.to_str().filter(|n| !n.contains('/')) else {
        return Ok(None);
    };
    let Some(source) = builtin_source(name) else {
        return Ok(None);
    };
    if std::fs::symlink_metadata(path).is_ok() {
        return Err(ProfileError::Ambiguous { name: name.into() });
    }
    Ok(Some(source))
}

/// A profile file's text: a regular file (a FIFO is refused, not waited on) of at most
/// [`MAX_PROFILE_BYTES`].
fn file_source(path: &Path) -> Result<Source, ProfileError> {
    let text = crate::regular_file::read_to_string(path, MAX_PROFILE_BYTES).map_err(|source| {
        ProfileError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let dir = path.parent().map(Path::to_path_buf);
    Ok((path.display().to_string(), text, dir, None))
}
