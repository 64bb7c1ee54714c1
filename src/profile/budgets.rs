//! `[runbook]`: the budgets of the supervisor's work on the files a runbook's evidence names
//! (`files_exist`, `files_changed`, a step's baseline, `step evidence`). The agent shapes the
//! workspace, so each walk is bounded; the defaults suit a large checkout. Raising one is a
//! weakening (the agent can make the supervisor work longer) and is refused from a profile file
//! inside the workspace (see `sandbox::plan`), like every other budget.

use serde::{Deserialize, Serialize};

/// Directory entries one walk looks at.
pub const DEFAULT_EVIDENCE_ENTRIES: u64 = 200_000;
/// Directory levels below the workspace one walk enters.
pub const DEFAULT_EVIDENCE_DEPTH: u64 = 128;
/// The size of one file hashed, in MiB.
pub const DEFAULT_EVIDENCE_FILE_MIB: u64 = 1024;
/// Bytes hashed by one walk in all, in MiB.
pub const DEFAULT_EVIDENCE_WALK_MIB: u64 = 4096;
/// One walk's time, in seconds.
pub const DEFAULT_EVIDENCE_SECONDS: u64 = 60;

/// `[runbook]` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunbookFile {
    evidence_entries: Option<u64>,
    evidence_depth: Option<u64>,
    evidence_file_mib: Option<u64>,
    evidence_walk_mib: Option<u64>,
    evidence_seconds: Option<u64>,
    evidence_view: Option<EvidenceView>,
}

/// `[runbook.evidence_view]`: how an evidence sandbox sees the workspace beyond the overlay
/// every evidence run has. Written by the supervisor into the profile it derives for one
/// evidence command (a profile file may set it too: it only takes away). Paths are relative to
/// the workspace; one that does not exist, or has a link on its way, is passed over.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceView {
    /// Bound read-only onto themselves: the step's invariant paths and the files that define
    /// the command (a build script the evidence runs cannot rewrite them there).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only: Vec<String>,
    /// Covered by an empty, writable tmpfs: build state the proof does not trust (rebuilt).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub discarded: Vec<String>,
    /// Covered by an empty, unreadable stand-in: ignored files under invariant paths.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<String>,
}

impl EvidenceView {
    /// Each list's paths must be relative to the workspace, without `.` or `..` components.
    fn check(&self) -> Result<(), String> {
        for (key, list) in [
            ("read_only", &self.read_only),
            ("discarded", &self.discarded),
            ("hidden", &self.hidden),
        ] {
            for p in list {
                if p.is_empty()
                    || p.starts_with('/')
                    || p.starts_with('~')
                    || p.split('/').any(|c| c.is_empty() || c == "." || c == "..")
                {
                    return Err(format!(
                        "runbook.evidence_view.{key}: {p:?} must be relative to the workspace (no `/` or `~` at the start, no empty, `.` or `..` components)"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The effective budgets; a key left unset is the default (and is left out of the policy hash).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunbookBudgets {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_entries: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_depth: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_file_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_walk_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_seconds: Option<u64>,
    /// Set for an evidence run (see [`EvidenceView`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_view: Option<EvidenceView>,
}

/// The keys: name, value, default, largest allowed.
type Key<'a> = (&'static str, Option<u64>, u64, u64);

impl RunbookBudgets {
    pub fn is_unset(&self) -> bool {
        *self == RunbookBudgets::default()
    }

    fn keys(&self) -> [Key<'_>; 5] {
        [
            (
                "runbook.evidence_entries",
                self.evidence_entries,
                DEFAULT_EVIDENCE_ENTRIES,
                100_000_000,
            ),
            (
                "runbook.evidence_depth",
                self.evidence_depth,
                DEFAULT_EVIDENCE_DEPTH,
                4096,
            ),
            (
                "runbook.evidence_file_mib",
                self.evidence_file_mib,
                DEFAULT_EVIDENCE_FILE_MIB,
                1 << 24,
            ),
            (
                "runbook.evidence_walk_mib",
                self.evidence_walk_mib,
                DEFAULT_EVIDENCE_WALK_MIB,
                1 << 26,
            ),
            (
                "runbook.evidence_seconds",
                self.evidence_seconds,
                DEFAULT_EVIDENCE_SECONDS,
                86_400,
            ),
        ]
    }

    /// The keys set above their default: each a weakening a reviewer should see.
    pub fn raised(&self) -> Vec<&'static str> {
        self.keys()
            .into_iter()
            .filter(|(_, value, default, _)| value.is_some_and(|v| v > *default))
            .map(|(key, ..)| key)
            .collect()
    }

    pub fn entries(&self) -> u64 {
        self.evidence_entries.unwrap_or(DEFAULT_EVIDENCE_ENTRIES)
    }

    pub fn depth(&self) -> u64 {
        self.evidence_depth.unwrap_or(DEFAULT_EVIDENCE_DEPTH)
    }

    pub fn file_bytes(&self) -> u64 {
        self.evidence_file_mib.unwrap_or(DEFAULT_EVIDENCE_FILE_MIB) << 20
    }

    pub fn walk_bytes(&self) -> u64 {
        self.evidence_walk_mib.unwrap_or(DEFAULT_EVIDENCE_WALK_MIB) << 20
    }

    pub fn seconds(&self) -> u64 {
        self.evidence_seconds.unwrap_or(DEFAULT_EVIDENCE_SECONDS)
    }
}

/// A child's keys over its base's.
pub(crate) fn merge(base: Option<RunbookFile>, child: Option<RunbookFile>) -> Option<RunbookFile> {
    match (base, child) {
        (Some(b), Some(c)) => Some(RunbookFile {
            evidence_entries: c.evidence_entries.or(b.evidence_entries),
            evidence_depth: c.evidence_depth.or(b.evidence_depth),
            evidence_file_mib: c.evidence_file_mib.or(b.evidence_file_mib),
            evidence_walk_mib: c.evidence_walk_mib.or(b.evidence_walk_mib),
            evidence_seconds: c.evidence_seconds.or(b.evidence_seconds),
            evidence_view: c.evidence_view.or(b.evidence_view),
        }),
        (b, c) => c.or(b),
    }
}

/// The effective budgets, each key within 1 and its largest value.
pub(crate) fn resolve(file: Option<RunbookFile>) -> Result<RunbookBudgets, String> {
    let file = file.unwrap_or_default();
    let budgets = RunbookBudgets {
        evidence_entries: file.evidence_entries,
        evidence_depth: file.evidence_depth,
        evidence_file_mib: file.evidence_file_mib,
        evidence_walk_mib: file.evidence_walk_mib,
        evidence_seconds: file.evidence_seconds,
        evidence_view: file.evidence_view,
    };
    if let Some(view) = &budgets.evidence_view {
        view.check()?;
    }
    for (key, value, _, max) in budgets.keys() {
        if let Some(value) = value
            && !(1..=max).contains(&value)
        {
            return Err(format!(
                "{key} = {value} is outside the allowed range 1 to {max}"
            ));
        }
    }
    Ok(budgets)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keys_are_the_defaults_and_only_raised_ones_are_named() {
        let none = resolve(None).unwrap();
        assert!(none.is_unset() && none.raised().is_empty());
        assert_eq!(none.file_bytes(), 1 << 30);
        let lowered = RunbookBudgets {
            evidence_file_mib: Some(10),
            evidence_depth: Some(128),
            ..Default::default()
        };
        assert!(lowered.raised().is_empty());
        let raised = RunbookBudgets {
            evidence_seconds: Some(600),
            ..Default::default()
        };
        assert_eq!(raised.raised(), ["runbook.evidence_seconds"]);
        let zero = RunbookFile {
            evidence_entries: Some(0),
            ..Default::default()
        };
        assert!(
            resolve(Some(zero))
                .unwrap_err()
                .contains("runbook.evidence_entries")
        );
    }
}
