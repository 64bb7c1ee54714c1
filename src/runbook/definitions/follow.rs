//! The follow loop: evidence commands' definitions once the makefiles and script files they
//! name are read, each once, within a bound on reads.

use super::scripts::of_scripts;
use super::{Definitions, ScriptRef, finish, of_recipes, relative};
use std::path::Path;

/// What evidence commands' definitions come to once the makefiles and script files they name
/// are read (`read`: a workspace-relative file's whole text, `None` when there is none), each
/// file and entry once, in the order found, at most `reads` reads (more is `too_many`, not a
/// part left unread): a makefile's literal includes and recipes ([`of_recipes`]), a script
/// file's entries ([`of_scripts`]), and in turn what those name. `files`: every definition
/// glob; `build_state`: what the tools of recipes and scripts reuse; `unknown`: what could not
/// be known.
pub fn follow<E>(
    commands: &[Definitions],
    workspace: &Path,
    reads: usize,
    mut read: impl FnMut(&str) -> Result<Option<Vec<u8>>, E>,
    too_many: impl FnOnce(usize) -> E,
) -> Result<Definitions, E> {
    /// A file to read, and how to take it.
    #[derive(PartialEq, Eq, PartialOrd, Ord, Clone)]
    enum Read {
        /// A makefile, with the directory make runs in.
        Make(String, String),
        Script(ScriptRef),
    }
    let to_read = |defs: &Definitions| {
        let mut found = Vec::new();
        for tool in defs.tools.iter().filter(|t| t.tool == "make") {
            for file in defs
                .makefiles
                .iter()
                .filter(|f| tool.dir.is_empty() || f.starts_with(&format!("{}/", tool.dir)))
            {
                found.push(Read::Make(file.clone(), tool.dir.clone()));
            }
        }
        found.extend(defs.scripts.iter().cloned().map(Read::Script));
        found
    };
    let mut out = Definitions::default();
    let mut queue: Vec<Read> = Vec::new();
    for defs in commands {
        out.tools.extend(defs.tools.iter().cloned());
        out.files.extend(defs.files.iter().cloned());
        queue.extend(to_read(defs));
    }
    queue.reverse();
    let mut done = std::collections::BTreeSet::new();
    while let Some(next) = queue.pop() {
        if done.contains(&next) {
            continue;
        }
        if done.len() == reads {
            return Err(too_many(reads));
        }
        done.insert(next.clone());
        let file = match &next {
            Read::Make(file, _) => file,
            Read::Script(r) => &r.file,
        };
        let Some(bytes) = read(file)? else { continue };
        let text = String::from_utf8_lossy(&bytes);
        let mut more = Vec::new();
        let run = match &next {
            Read::Make(_, dir) => {
                let (named, _) = make_includes(&text, dir);
                for include in named {
                    if !out.files.contains(&include) {
                        out.files.push(include.clone());
                        more.push(Read::Make(include, dir.clone()));
                    }
                }
                of_recipes(&text, dir, workspace)
            }
            Read::Script(r) => of_scripts(&text, r, workspace),
        };
        out.files.extend(run.files.iter().cloned());
        more.extend(to_read(&run));
        out.tools.extend(run.tools);
        out.build_state.extend(run.build_state);
        out.unknown.extend(run.unknown);
        more.reverse();
        queue.extend(more);
    }
    finish(&mut out);
    Ok(out)
}

/// The files a makefile's literal `include` lines name (`include`, `-include`, `sinclude`),
/// relative to `dir` (where make runs); a name with a variable or a wildcard in it cannot be
/// known before make runs and is returned in the second list.
pub fn make_includes(text: &str, dir: &str) -> (Vec<String>, Vec<String>) {
    let mut named = Vec::new();
    let mut computed = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let rest = ["include ", "-include ", "sinclude "]
            .iter()
            .find_map(|k| line.strip_prefix(k));
        let Some(rest) = rest else { continue };
        let rest = rest.split('#').next().unwrap_or("");
        for word in rest.split_whitespace() {
            if word.contains(['$', '*', '?', '[', '%']) {
                computed.push(word.to_string());
            } else if !word.starts_with('/')
                && let Some(rel) = relative(dir, word, Path::new("/"))
            {
                named.push(rel);
            }
        }
    }
    (named, computed)
}
