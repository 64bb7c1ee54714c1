//! Paths as profiles write them: `~/…` (the home), `/…` (absolute) or relative (the workspace).
//! They stay symbolic in the profile (so its hash is the same on every machine) and are
//! resolved against the real home and workspace when the plan is built.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Component, Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum PathSpec {
    Home(PathBuf),
    Absolute(PathBuf),
    Workspace(PathBuf),
}

#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0:?} is not a usable path: {1}")]
pub struct PathSpecError(String, &'static str);

impl PathSpec {
    pub fn parse(text: &str) -> Result<PathSpec, PathSpecError> {
        let err = |why| Err(PathSpecError(text.to_string(), why));
        if text.is_empty() {
            return err("it is empty");
        }
        if text.contains('\0') {
            return err("it contains a NUL byte");
        }
        let (kind, rest): (fn(PathBuf) -> PathSpec, &str) = if text == "~" {
            (PathSpec::Home, "")
        } else if let Some(rest) = text.strip_prefix("~/") {
            (PathSpec::Home, rest)
        } else if text.starts_with('~') {
            return err("only the caller's own home (`~/`) is supported");
        } else if let Some(rest) = text.strip_prefix('/') {
            (PathSpec::Absolute, rest)
        } else {
            (PathSpec::Workspace, text.strip_prefix("./").unwrap_or(text))
        };
        let mut clean = PathBuf::new();
        for component in Path::new(rest).components() {
            match component {
                Component::Normal(c) => clean.push(c),
                Component::CurDir => {}
                Component::ParentDir => return err("`..` is not allowed"),
                Component::RootDir | Component::Prefix(_) => return err("unexpected root"),
            }
        }
        Ok(kind(clean))
    }

    /// The concrete path on this machine.
    pub fn resolve(&self, home: &Path, workspace: &Path) -> PathBuf {
        match self {
            PathSpec::Home(rel) => join_clean(home, rel),
            PathSpec::Absolute(rel) => join_clean(Path::new("/"), rel),
            PathSpec::Workspace(rel) => join_clean(workspace, rel),
        }
    }

    /// A path below the home (`~/something`, not `~` itself).
    pub fn is_in_home(&self) -> bool {
        matches!(self, PathSpec::Home(rel) if !rel.as_os_str().is_empty())
    }

    pub fn is_filesystem_root(&self) -> bool {
        matches!(self, PathSpec::Absolute(rel) if rel.as_os_str().is_empty())
    }
}

fn join_clean(base: &Path, rel: &Path) -> PathBuf {
    if rel.as_os_str().is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    }
}

impl fmt::Display for PathSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathSpec::Home(rel) if rel.as_os_str().is_empty() => write!(f, "~"),
            PathSpec::Home(rel) => write!(f, "~/{}", rel.display()),
            PathSpec::Absolute(rel) => write!(f, "/{}", rel.display()),
            PathSpec::Workspace(rel) if rel.as_os_str().is_empty() => write!(f, "."),
            PathSpec::Workspace(rel) => write!(f, "{}", rel.display()),
        }
    }
}

impl TryFrom<String> for PathSpec {
    type Error = PathSpecError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        PathSpec::parse(&text)
    }
}

impl From<PathSpec> for String {
    fn from(spec: PathSpec) -> String {
        spec.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let home = Path::new("/home/u");
        let ws = Path::new("/home/u/src/p");
        let cases = [
            ("~/.ssh", "/home/u/.ssh"),
            ("~", "/home/u"),
            ("/usr", "/usr"),
            ("/", "/"),
            (".vscode", "/home/u/src/p/.vscode"),
            ("./a/./b", "/home/u/src/p/a/b"),
        ];
        for (text, want) in cases {
            let spec = PathSpec::parse(text).unwrap();
            assert_eq!(spec.resolve(home, ws), PathBuf::from(want), "{text}");
            assert_eq!(PathSpec::parse(&spec.to_string()).unwrap(), spec);
        }
    }

    #[test]
    fn refused() {
        for text in ["", "~bob/x", "a/../b", "/x/..", "a\0b"] {
            assert!(PathSpec::parse(text).is_err(), "{text:?}");
        }
    }
}
