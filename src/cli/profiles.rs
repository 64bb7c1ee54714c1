//! `stepproof profile list`: the built-in profiles, named by `--profile NAME` wherever a profile
//! is taken (`stepproof-run`, `explain`, `check`, `policy`, `runbook check`), with what each is
//! for and its policy hash.

use crate::profile::{BUILTIN, Profile};
use std::path::Path;

/// Prints the built-in profiles (as JSON with `json`: an array of `{name, description,
/// policy_hash}`); 0, or 125 if one does not load (a build that ships a broken profile).
pub fn list(json: bool) -> i32 {
    let mut rows = Vec::new();
    for (name, _) in BUILTIN {
        match Profile::load(Some(Path::new(name))) {
            Ok(profile) => rows.push(serde_json::json!({
                "name": name,
                "description": profile.description,
                "policy_hash": profile.policy_hash(),
            })),
            Err(e) => {
                crate::say!("stepproof: the built-in profile {name}: {e}");
                return crate::exit::ExitCode::HostFailure.code();
            }
        }
    }
    if json {
        crate::out!(
            "{}",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        );
        return 0;
    }
    for row in &rows {
        crate::out!(
            "{:<8} {}  ({})",
            row["name"].as_str().unwrap_or_default(),
            row["description"].as_str().unwrap_or_default(),
            row["policy_hash"].as_str().unwrap_or_default()
        );
    }
    crate::out!(
        "(--profile NAME takes one of these; a path takes a file, which may `extends` one)"
    );
    0
}
