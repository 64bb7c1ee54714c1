//! The three answers a hook can give and the verdict that carries one with its rule.
//!
//! `Decision` is ordered so that combining answers is `max`: the most restrictive wins.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Rule id of a deny caused by an error (bad input, unreadable policy, panic).
pub const RULE_FAIL_CLOSED: &str = "fail-closed";

/// A permission decision. The order is the severity order: `Allow < Ask < Deny`, so the
/// combination of several decisions is their maximum (deny beats ask beats allow).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The call runs without asking anyone.
    Allow,
    /// A person is asked (Claude Code's permission prompt).
    Ask,
    /// The call is blocked and the model reads the reason.
    Deny,
}

impl Decision {
    /// The word Claude Code expects in `permissionDecision`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of checking one tool call: the decision, the rule that made it and a reason
/// meant for the model (and the audit log) to read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// What happens to the call.
    pub decision: Decision,
    /// The id of the rule that decided (`default`, `unknown`, `unknown-tool` and
    /// `fail-closed` are the ids of the policy's own fallbacks).
    pub rule_id: String,
    /// A sentence the model can act on.
    pub reason: String,
}

impl Verdict {
    /// A deny that comes from an error rather than a rule: the hook fails closed.
    pub fn fail_closed(reason: impl Into<String>) -> Self {
        Verdict {
            decision: Decision::Deny,
            rule_id: RULE_FAIL_CLOSED.to_string(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}\t{}\t{}", self.decision, self.rule_id, self.reason)
    }
}

/// One line for `stepproof check`: decision, rule id and reason, tab-separated so scripts
/// can cut it.
pub fn render_check(verdict: &Verdict) -> String {
    verdict.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_beats_ask_beats_allow() {
        assert!(Decision::Allow < Decision::Ask && Decision::Ask < Decision::Deny);
        assert_eq!(
            [Decision::Ask, Decision::Deny, Decision::Allow]
                .into_iter()
                .max(),
            Some(Decision::Deny)
        );
    }
}
