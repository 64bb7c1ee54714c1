//! A runbook's steps as a run's audit log tells them: when each opened, its attempts, the
//! evidence of its last attempt (a command's exit code and duration), approvals, its verdict and
//! how long it took. Built from the supervisor's records only (what came from inside decides
//! nothing); `stepproof audit show` prints it as text after the timeline, the CI summary as a
//! table. Bounded: at most [`MAX_STEPS`] steps and [`MAX_ITEMS`] evidence items per step.

use serde_json::Value;
use std::fmt::Write as _;

pub const MAX_STEPS: usize = 256;
pub const MAX_ITEMS: usize = 32;

/// One step's row.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StepRow {
    pub step: String,
    pub title: String,
    /// waiting | open | passed | failed (from a continued run's state too).
    pub status: String,
    pub attempts: u64,
    /// The evidence of the last attempt, in words.
    pub evidence: Vec<String>,
    pub approvals: Vec<String>,
    /// When it opened in this run (ms since the epoch), and when its verdict came.
    #[serde(skip)]
    opened_ms: Option<u64>,
    #[serde(skip)]
    verdict_ms: Option<u64>,
    /// From its opening to its verdict, in this run.
    pub duration_ms: Option<u64>,
    /// A pass: what its proof covered and what it trusted, in words ("passed, covering …").
    pub proof: Option<String>,
    /// A void pass: why (the run's sweep found tampering).
    pub void: Option<String>,
    #[serde(skip)]
    evidence_attempt: u64,
}

/// The steps of the (last) runbook run in a log.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StepTable {
    pub runbook: String,
    pub hash: String,
    /// The earlier run this one continued, and its log head.
    pub continues: Option<String>,
    pub steps: Vec<StepRow>,
    /// How the runbook ended: complete, evidence-failed, abandoned, void (none: no end
    /// recorded).
    pub ending: Option<String>,
    /// Why the runbook's passes (and completion) are void.
    pub void: Option<String>,
}

/// A value as short text, terminal controls escaped (records are untrusted text).
fn text(v: &Value) -> String {
    crate::audit::text::printable(&match v {
        Value::String(s) => s.clone(),
        Value::Null => "?".into(),
        other => other.to_string(),
    })
}

impl StepTable {
    pub fn is_empty(&self) -> bool {
        self.runbook.is_empty()
    }

    fn row(&mut self, id: &str) -> Option<&mut StepRow> {
        if let Some(i) = self.steps.iter().position(|r| r.step == id) {
            return Some(&mut self.steps[i]);
        }
        if self.steps.len() >= MAX_STEPS {
            return None;
        }
        self.steps.push(StepRow {
            step: id.to_string(),
            status: "waiting".into(),
            ..StepRow::default()
        });
        self.steps.last_mut()
    }

    /// One record of the log (a `run-start` begins a new table).
    pub fn add(&mut self, record: &Value) {
        if record["source"] != "supervisor" {
            return;
        }
        let kind = record["kind"].as_str().unwrap_or_default();
        let ts = record["ts_ms"].as_u64();
        if kind == "run-start" {
            *self = StepTable::default();
            if let Some(r) = record["runbook"].as_object() {
                self.runbook = r.get("id").map(text).unwrap_or_default();
                self.hash = r.get("hash").map(text).unwrap_or_default();
            }
            return;
        }
        if self.is_empty() || !kind.starts_with("runbook-") {
            return;
        }
        match kind {
            "runbook-continued" => {
                self.continues = Some(format!(
                    "run {} (log head {})",
                    text(&record["continues"]),
                    text(&record["log_head"])
                ));
                for s in record["state"].as_array().into_iter().flatten() {
                    if let Some(row) = self.row(&text(&s["step"])) {
                        row.status = text(&s["status"]);
                        row.attempts = s["attempts"].as_u64().unwrap_or(0);
                    }
                }
                return;
            }
            "runbook-complete" => {
                self.ending = Some("complete".into());
                return;
            }
            "runbook-ended" => {
                self.ending = Some(text(&record["ending"]));
                return;
            }
            // After the sweep: the run's passes are void, and its completion with them.
            "runbook-void" => {
                let was = self.ending.take();
                self.ending = Some(match was.as_deref() {
                    Some("complete") if record["completion_void"] == true => {
                        "VOID (was complete)".to_string()
                    }
                    Some(e) => format!("{e}, passes VOID"),
                    None => "passes VOID".to_string(),
                });
                self.void = Some(text(&record["why"]));
                return;
            }
            // The steps still open when the supervisor recorded the runbook abandoned.
            "runbook-abandoned" => {
                for id in record["open"].as_array().into_iter().flatten() {
                    if let Some(row) = self.row(&text(id)) {
                        row.status = "abandoned".into();
                    }
                }
                return;
            }
            _ => {}
        }
        let Some(step) = record["step"].as_str().map(crate::audit::text::printable) else {
            return;
        };
        let Some(row) = self.row(&step) else { return };
        let attempt = record["attempt"].as_u64().unwrap_or(0);
        match kind {
            "runbook-step-opened" => {
                row.title = text(&record["title"]);
                row.status = "open".into();
                row.opened_ms = ts;
            }
            "runbook-evidence" => {
                if attempt != row.evidence_attempt {
                    row.evidence.clear();
                    row.evidence_attempt = attempt;
                }
                row.attempts = row.attempts.max(attempt);
                if row.evidence.len() < MAX_ITEMS {
                    row.evidence.push(evidence_text(record));
                }
            }
            // An answer that did not count (another came first) is not the step's.
            "runbook-approval" if record["counted"] != false => {
                let from = match record["from"].as_str() {
                    Some("webhook") => match record["approver"].as_str() {
                        Some(who) => format!("at the webhook by {who}"),
                        None => "at the webhook".to_string(),
                    },
                    _ => match record["approver"].as_str() {
                        Some(who) => format!("at a host terminal by {who}"),
                        None => "at a host terminal".to_string(),
                    },
                };
                row.approvals.push(if record["approved"] == true {
                    format!("approved {from}")
                } else {
                    format!("denied {from}: {}", text(&record["reason"]))
                });
            }
            "runbook-step-passed" | "runbook-step-failed" => {
                row.attempts = row.attempts.max(attempt);
                let passed = kind == "runbook-step-passed";
                row.status = if passed {
                    "passed".into()
                } else if record["final"] == true {
                    "failed".into()
                } else {
                    "open".into()
                };
                row.proof = passed.then(|| format!("passed, {}", covered_text(&record["covered"])));
                if passed || record["final"] == true {
                    row.verdict_ms = ts;
                    row.duration_ms = row.opened_ms.zip(ts).map(|(a, b)| b.saturating_sub(a));
                }
            }
            // Only a person's approval was missing: the attempt was given back.
            "runbook-step-not-approved" => {
                row.attempts = attempt.saturating_sub(1);
                row.status = format!("not approved ({})", text(&record["missing"]));
            }
            "runbook-step-void" => {
                row.status = "VOID".into();
                row.void = Some(text(&record["why"]));
            }
            _ => {}
        }
    }

    /// Plain text, after the timeline of `stepproof audit show`.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if self.is_empty() {
            return out;
        }
        let _ = writeln!(
            out,
            "runbook {} ({}){}:",
            self.runbook,
            self.hash,
            self.ending
                .as_deref()
                .map(|e| format!(", ended: {e}"))
                .unwrap_or_else(|| ", no end recorded".into())
        );
        if let Some(c) = &self.continues {
            let _ = writeln!(out, "  continues {c}");
        }
        if let Some(why) = &self.void {
            let _ = writeln!(out, "  VOID: {why}");
        }
        for r in &self.steps {
            let _ = writeln!(
                out,
                "  step {:<16} {:<8} attempts {}{}{}",
                r.step,
                r.status,
                r.attempts,
                r.duration_ms
                    .map(|d| format!(" · {}", duration(d)))
                    .unwrap_or_default(),
                if r.title.is_empty() {
                    String::new()
                } else {
                    format!(" · {}", r.title)
                }
            );
            for e in &r.evidence {
                let _ = writeln!(out, "      evidence: {e}");
            }
            for a in &r.approvals {
                let _ = writeln!(out, "      approval: {a}");
            }
            if let Some(proof) = &r.proof {
                let _ = writeln!(out, "      proof: {proof}");
            }
            if let Some(why) = &r.void {
                let _ = writeln!(out, "      VOID: {why}");
            }
        }
        out
    }

    /// A markdown table, for the CI summary.
    pub fn markdown(&self, cell: impl Fn(&str) -> String) -> String {
        let mut md = String::new();
        if self.is_empty() {
            return md;
        }
        let _ = write!(
            md,
            "\n### Runbook `{}`\n\n`{}` · {}{}\n\n",
            cell(&self.runbook),
            cell(&self.hash),
            self.ending
                .as_deref()
                .map(|e| format!("ended: **{}**", cell(e)))
                .unwrap_or_else(|| "no end recorded".into()),
            self.continues
                .as_deref()
                .map(|c| format!(" · continues {}", cell(c)))
                .unwrap_or_default()
        );
        if let Some(why) = &self.void {
            let _ = write!(md, "**VOID**: {}\n\n", cell(why));
        }
        md.push_str(
            "| step | verdict | attempts | evidence (last attempt) | duration |\n| --- | --- | --- | --- | --- |\n",
        );
        for r in &self.steps {
            let mut evidence: Vec<String> = r.evidence.iter().map(|e| cell(e)).collect();
            evidence.extend(r.approvals.iter().map(|a| cell(a)));
            // What the pass covered, and whether it still counts.
            evidence.extend(r.proof.iter().map(|p| format!("**{}**", cell(p))));
            evidence.extend(r.void.iter().map(|v| format!("**VOID**: {}", cell(v))));
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} | {} |",
                cell(&r.step),
                cell(&r.status),
                r.attempts,
                if evidence.is_empty() {
                    "—".to_string()
                } else {
                    evidence.join("<br>")
                },
                r.duration_ms.map(duration).unwrap_or_else(|| "—".into())
            );
        }
        md
    }
}

/// A `runbook-step-passed` record's `covered`, in words: "covering protected tests/**;
/// definitions frozen: Makefile, GNUmakefile; build state discarded: target; judged only by a
/// verifier: …", or "trusting target/" where the runbook trusted build state by name. A record
/// without it (written before passes said what they covered) says so.
pub fn covered_text(covered: &Value) -> String {
    let Some(c) = covered.as_object() else {
        return "coverage not recorded".into();
    };
    let list = |key: &str, most: usize| -> Option<String> {
        let items: Vec<String> = c.get(key)?.as_array()?.iter().map(text).collect();
        if items.is_empty() {
            return None;
        }
        let mut shown = items
            .iter()
            .take(most)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if items.len() > most {
            let _ = write!(shown, " (+{})", items.len() - most);
        }
        Some(shown)
    };
    let mut covering = Vec::new();
    if let Some(p) = list("protected", 8) {
        covering.push(format!("protected {p} unchanged"));
    }
    if let Some(d) = list("definitions_frozen", 6) {
        covering.push(format!("definitions frozen: {d}"));
    }
    let mut trusting = Vec::new();
    match c.get("build_state").and_then(Value::as_str) {
        Some(b) if b.starts_with("trusted: ") => {
            trusting.extend(b["trusted: ".len()..].split(", ").map(|t| {
                format!(
                    "{}/",
                    crate::audit::text::printable(t.trim_end_matches('/'))
                )
            }))
        }
        Some("discarded") => covering.push("build state discarded".into()),
        Some(b) if b.starts_with("discarded: ") => {
            covering.push(format!("build state {}", crate::audit::text::printable(b)))
        }
        _ => {}
    }
    let mut out = if covering.is_empty() {
        "covering its evidence items only".to_string()
    } else {
        format!("covering {}", covering.join("; "))
    };
    if let Some(u) = list("definitions_unknown", 4) {
        trusting.push(format!("what its scripts compute at run time ({u})"));
    }
    if !trusting.is_empty() {
        let _ = write!(out, "; trusting {}", trusting.join(", "));
    }
    if let Some(v) = list("judged_by_verifier_only", 4) {
        let _ = write!(out, "; judged only by a verifier: {v}");
    }
    out
}

fn duration(ms: u64) -> String {
    if ms < 10_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} s", ms / 1000)
    }
}

/// One evidence record in words (`body_kind`: its item's kind, as in the log).
pub(crate) fn evidence_text(r: &Value) -> String {
    let held = if r["held"] == true {
        "held"
    } else {
        "NOT held"
    };
    // The item's kind: the envelope's `kind` moved it to `body_kind`.
    match r["body_kind"].as_str().unwrap_or_default() {
        "command" => format!(
            "command `{}` exit {} (wanted {}) in {} · {held}",
            r["run"]
                .as_array()
                .map(|a| crate::audit::text::command_line(&a.iter().map(text).collect::<Vec<_>>()))
                .unwrap_or_default(),
            text(&r["exit_code"]),
            text(&r["expected_exit_code"]),
            r["duration_ms"]
                .as_u64()
                .map(duration)
                .unwrap_or_else(|| "?".into()),
        ),
        "files_exist" => format!(
            "files_exist {} · {held}",
            r["paths"]
                .as_array()
                .map(|a| a.iter().map(text).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        ),
        "files_changed" => format!(
            "files_changed {} ({} changed) · {held}",
            r["paths"]
                .as_array()
                .map(|a| a.iter().map(text).collect::<Vec<_>>().join(", "))
                .unwrap_or_default(),
            r["changed_count"]
                .as_u64()
                .unwrap_or_else(|| r["changed"].as_array().map_or(0, |a| a.len() as u64))
        ),
        "files_unchanged" => format!(
            "files_unchanged {}{} ({} changed) · {held}",
            r["paths"]
                .as_array()
                .map(|a| a.iter().map(text).collect::<Vec<_>>().join(", "))
                .unwrap_or_default(),
            r["deny_rules"]
                .as_array()
                .map(|a| format!(
                    " (deny rules {})",
                    a.iter().map(text).collect::<Vec<_>>().join(", ")
                ))
                .unwrap_or_default(),
            r["changed_count"].as_u64().unwrap_or(0)
        ),
        "approval" => format!(
            "approval by {}: {} · {held}",
            text(&r["approvers"]),
            if r["pre_approved"] == true {
                "pre-approved (--approve)".to_string()
            } else if r["ci"] == true {
                "--ci without pre-approval".to_string()
            } else {
                text(&r["answer"])
            }
        ),
        "verifier" => format!(
            "verifier tier {}: {} (model {}) · {held}",
            text(&r["tier"]),
            text(&r["verdict"]),
            if r["model"].is_null() {
                "none".to_string()
            } else {
                text(&r["model"])
            },
        ),
        other => format!("{other} · {held}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_runs_steps_become_rows() {
        let mut t = StepTable::default();
        for r in [
            json!({"source":"supervisor","kind":"run-start","runbook":{"id":"rb","hash":"sha256:ab"}}),
            json!({"source":"supervisor","kind":"runbook-step-opened","ts_ms":1000,"step":"a","title":"First"}),
            json!({"source":"sandbox","kind":"runbook-step-passed","step":"a","attempt":9}),
            json!({"source":"supervisor","kind":"runbook-evidence","step":"a","attempt":1,"body_kind":"files_exist","paths":["x"],"held":false}),
            json!({"source":"supervisor","kind":"runbook-step-failed","step":"a","attempt":1,"final":false}),
            json!({"source":"supervisor","kind":"runbook-evidence","body_kind":"command","step":"a","attempt":2,"held":true,
                   "run":["make","test"],"exit_code":0,"expected_exit_code":0,"duration_ms":1500}),
            json!({"source":"supervisor","kind":"runbook-step-passed","ts_ms":4000,"step":"a","attempt":2}),
            json!({"source":"supervisor","kind":"runbook-step-opened","ts_ms":4000,"step":"b","title":"Gate"}),
            json!({"source":"supervisor","kind":"runbook-approval","step":"b","approved":true}),
            json!({"source":"supervisor","kind":"runbook-abandoned","open":["b"],"why":"the agent exited with steps open"}),
            json!({"source":"supervisor","kind":"runbook-ended","ending":"abandoned"}),
        ] {
            t.add(&r);
        }
        let text = t.text();
        assert!(
            text.contains("runbook rb (sha256:ab), ended: abandoned"),
            "{text}"
        );
        assert!(
            text.contains("step a                passed   attempts 2 · 3.0 s · First"),
            "{text}"
        );
        assert!(
            text.contains("evidence: command `make test` exit 0 (wanted 0) in 1.5 s · held"),
            "{text}"
        );
        assert!(
            text.contains("step b                abandoned attempts 0"),
            "{text}"
        );
        assert!(
            text.contains("approval: approved at a host terminal"),
            "{text}"
        );
        let md = t.markdown(|s| s.replace('|', "\\|"));
        assert!(
            md.contains("| `a` | passed | 2 | command `make test` exit 0 (wanted 0) in 1.5 s · held<br>**passed, coverage not recorded** | 3.0 s |"),
            "{md}"
        );
    }
    #[test]
    fn a_pass_says_what_it_covered_and_a_sweep_voids_it() {
        let mut t = StepTable::default();
        for r in [
            json!({"source":"supervisor","kind":"run-start","runbook":{"id":"rb","hash":"sha256:ab"}}),
            json!({"source":"supervisor","kind":"runbook-step-opened","ts_ms":1000,"step":"fix","title":"Fix"}),
            json!({"source":"supervisor","kind":"runbook-step-passed","ts_ms":2000,"step":"fix","attempt":1,
                   "covered":{"protected":["tests/**"],"definitions_frozen":["Makefile","GNUmakefile"],
                              "build_state":"trusted: target","verifier_items":1,
                              "judged_by_verifier_only":["no test special-cased"]}}),
            json!({"source":"supervisor","kind":"runbook-step-opened","ts_ms":2000,"step":"docs","title":"Docs"}),
            json!({"source":"supervisor","kind":"runbook-step-passed","ts_ms":3000,"step":"docs","attempt":1,
                   "covered":{"protected":[],"definitions_frozen":[],"build_state":null,"verifier_items":0}}),
            json!({"source":"supervisor","kind":"runbook-step-opened","ts_ms":3000,"step":"lint","title":"Lint"}),
            json!({"source":"supervisor","kind":"runbook-step-passed","ts_ms":3500,"step":"lint","attempt":1,
                   "covered":{"protected":[],"definitions_frozen":["Makefile"],"definitions_unknown":["$(shell ./pick-linter)"],"build_state":"none reused","verifier_items":0}}),
            json!({"source":"supervisor","kind":"runbook-complete","runbook":"rb"}),
            json!({"source":"supervisor","kind":"sweep","findings":[{"change":"created","path":"/w/.envrc"}]}),
            json!({"source":"supervisor","kind":"runbook-step-void","step":"fix","attempt":1,"why":"the run's sweep found tampering (1 finding; exit 123)"}),
            json!({"source":"supervisor","kind":"runbook-step-void","step":"docs","attempt":1,"why":"the run's sweep found tampering (1 finding; exit 123)"}),
            json!({"source":"supervisor","kind":"runbook-void","runbook":"rb","completion_void":true,"steps":["fix","docs"],"why":"the run's sweep found tampering (1 finding; exit 123)"}),
        ] {
            t.add(&r);
        }
        let text = t.text();
        for line in [
            "runbook rb (sha256:ab), ended: VOID (was complete):",
            "  VOID: the run's sweep found tampering (1 finding; exit 123)",
            "step fix              VOID     attempts 1",
            "      proof: passed, covering protected tests/** unchanged; definitions frozen: Makefile, GNUmakefile; trusting target/; judged only by a verifier: no test special-cased",
            "      proof: passed, covering its evidence items only",
            "      VOID: the run's sweep found tampering (1 finding; exit 123)",
            "      proof: passed, covering definitions frozen: Makefile; trusting what its scripts compute at run time ($(shell ./pick-linter))",
        ] {
            assert!(text.contains(line), "{line:?} not in:\n{text}");
        }
        let md = t.markdown(|s| s.replace('|', "\\|"));
        for row in [
            "ended: **VOID (was complete)**",
            "**VOID**: the run's sweep found tampering (1 finding; exit 123)",
            "| `fix` | VOID | 1 | **passed, covering protected tests/** unchanged; definitions frozen: Makefile, GNUmakefile; trusting target/; judged only by a verifier: no test special-cased**<br>**VOID**: the run's sweep",
        ] {
            assert!(md.contains(row), "{row:?} not in:\n{md}");
        }
    }
}
