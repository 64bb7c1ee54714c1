//! Unattended runs: `--timeout` durations, the job summary built from the run's audit log, and
//! the self-test that proves the sandbox holds before the agent starts.

use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// `90`, `90s`, `30m`, `1h`, `1h30m` (a bare number is seconds).
/// The longest `--timeout`: 30 days. Anything longer is a mistake, and every value has to fit
/// the clock arithmetic without wrapping.
pub const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let err = || format!("{text:?} is not a duration (like 90s, 30m, 1h30m)");
    let too_long =
        || format!("{text:?} is longer than the allowed range (1 s to {MAX_TIMEOUT_SECS} s, 720h)");
    if text.is_empty() {
        return Err(err());
    }
    let total = if text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<u64>().map_err(|_| too_long())?
    } else {
        let mut total = 0u64;
        let mut number = String::new();
        for c in text.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let value: u64 = number.parse().map_err(|e: std::num::ParseIntError| {
                if matches!(e.kind(), std::num::IntErrorKind::PosOverflow) {
                    too_long()
                } else {
                    err()
                }
            })?;
            number.clear();
            let unit = match c {
                'h' => 3600,
                'm' => 60,
                's' => 1,
                _ => return Err(err()),
            };
            total = value
                .checked_mul(unit)
                .and_then(|v| v.checked_add(total))
                .ok_or_else(too_long)?;
        }
        if !number.is_empty() {
            return Err(err());
        }
        total
    };
    if total == 0 {
        return Err(format!("{text:?}: a timeout must be at least 1 s"));
    }
    if total > MAX_TIMEOUT_SECS {
        return Err(too_long());
    }
    Ok(Duration::from_secs(total))
}

/// What the job page shows, gathered from the audit log (the supervisor's records are trusted;
/// denials are what the hook reported from inside).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    pub profile: String,
    pub policy_hash: String,
    pub status: String,
    pub exit_code: i64,
    pub enforced: Vec<String>,
    pub denials: Vec<Value>,
    pub network: Vec<Value>,
    pub sweep: Vec<Value>,
    pub audit_log: String,
    pub audit_head: String,
    /// Records reported from inside that were not written: the run reached its cap.
    pub inside_not_written: u64,
    /// The patch of what the run wrote at protected names (quarantined), if any.
    pub proposed_changes: Option<String>,
    /// The run's cgroup limits, where each was enforced or why it was not.
    pub limits: Vec<String>,
    /// What a limit did during the run ("2 processes killed by the memory limit (8 GiB)").
    pub limits_acted: Vec<String>,
    /// How many denials, connections and sweep findings the run had: the lists above keep the
    /// first [`SHOWN`] of each.
    pub denials_total: u64,
    pub network_total: u64,
    pub sweep_total: u64,
    /// The runbook's steps, when the run followed one.
    pub runbook: crate::audit::runbook_steps::StepTable,
    /// The signal from outside that ended the run (`SIGTERM`, `SIGHUP`), when one did.
    pub ended_by: Option<String>,
}

/// The signal a `run-end` record's outcome says ended the run from outside, at any depth (a
/// sweep's finding or a runbook's end wraps how the run ended).
fn ended_by(outcome: &Value) -> Option<String> {
    if outcome["status"] == "terminated" {
        return outcome["signal_name"].as_str().map(str::to_string);
    }
    match &outcome["command"] {
        Value::Object(_) => ended_by(&outcome["command"]),
        _ => None,
    }
}

/// Entries of each list a summary keeps (a job page has room for a table, not for a log).
pub const SHOWN: usize = 200;

/// Counts `item` and keeps it when the list has room.
fn keep(list: &mut Vec<Value>, total: &mut u64, item: Value) {
    *total += 1;
    if list.len() < SHOWN {
        list.push(item);
    }
}

/// "The first N are shown" when a list was cut.
fn first_shown(shown: usize, total: u64) -> String {
    if (shown as u64) < total {
        format!("The first {shown} are listed; the audit log has them all.\n\n")
    } else {
        String::new()
    }
}

impl Summary {
    /// The summary of the last run in the log at `path` (several runs may append to one log;
    /// each `run-start` begins anew). Read a line at a time: memory stays at one record and the
    /// lists' first [`SHOWN`] entries, whatever the log's size.
    pub fn from_audit_log(path: &Path, head: &str) -> Summary {
        let fresh = || Summary {
            audit_log: path.display().to_string(),
            audit_head: head.to_string(),
            ..Summary::default()
        };
        let mut s = fresh();
        let Ok(file) = std::fs::File::open(path) else {
            return s;
        };
        let _ = crate::audit::chain::for_each_line(std::io::BufReader::new(file), |line| {
            let bytes = match line {
                crate::audit::chain::LogLine::Terminated(b)
                | crate::audit::chain::LogLine::CutShort(b) => b,
                crate::audit::chain::LogLine::TooLong => return true,
            };
            if let Ok(record) = serde_json::from_slice::<Value>(bytes) {
                if record["source"] == "supervisor" && record["kind"] == "run-start" {
                    s = fresh();
                }
                s.add(record);
            }
            true
        });
        s
    }

    /// One record of the log.
    fn add(&mut self, record: Value) {
        self.runbook.add(&record);
        let kind = record["kind"].as_str().unwrap_or_default();
        let source = record["source"].as_str().unwrap_or_default();
        match (source, kind) {
            ("supervisor", "run-start") => {
                self.profile = record["profile"].as_str().unwrap_or_default().to_string();
                self.policy_hash = record["policy_hash"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                self.limits.extend(
                    record["limit_lines"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_string)),
                );
            }
            ("supervisor", "limits") => {
                self.limits_acted.extend(
                    record["acted"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|v| v.as_str().map(str::to_string)),
                );
            }
            ("supervisor", "run-end") => {
                self.status = record["outcome"]["status"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                self.exit_code = record["outcome"]["exit_code"].as_i64().unwrap_or_default();
                self.ended_by = ended_by(&record["outcome"]);
                self.inside_not_written = record["records_over_budget"]["not_written"]
                    .as_u64()
                    .or_else(|| record["hook_receiver"]["over_cap"].as_u64())
                    .unwrap_or_default();
                let e = &record["enforced"];
                self.enforced = vec![
                    format!("isolation: {}", e["isolation"].as_str().unwrap_or("?")),
                    format!(
                        "namespaces: {}",
                        e["namespaces"].as_array().map_or(String::new(), |a| a
                            .iter()
                            .filter_map(|v| v.as_str())
                            .collect::<Vec<_>>()
                            .join(" "))
                    ),
                    format!(
                        "Landlock ABI {} ({} rules, enforced: {})",
                        e["command"]["landlock"]["abi"],
                        e["command"]["landlock"]["rules"],
                        e["command"]["landlock"]["enforced"]
                    ),
                    format!(
                        "seccomp: {} rules on {} syscalls, {}",
                        e["seccomp"]["rules"],
                        e["seccomp"]["syscalls"],
                        e["seccomp"]["architectures"]
                    ),
                    format!("network: {}", e["network"].as_str().unwrap_or("?")),
                    format!(
                        "identity: {}",
                        e["identity"]["mode"].as_str().unwrap_or("?")
                    ),
                ];
            }
            ("supervisor", "network" | "gateway") => {
                keep(&mut self.network, &mut self.network_total, record.clone());
            }
            ("supervisor", "sweep") => {
                for finding in record["findings"].as_array().into_iter().flatten() {
                    keep(&mut self.sweep, &mut self.sweep_total, finding.clone());
                }
                if let Some(patch) = record["proposed_changes"].as_str() {
                    self.proposed_changes = Some(patch.to_string());
                }
            }
            ("sandbox", "decision") if record["reported"]["decision"] == "deny" => {
                keep(
                    &mut self.denials,
                    &mut self.denials_total,
                    record["reported"].clone(),
                );
            }
            _ => {}
        }
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        md.push_str("## StepProof run\n\n");
        md.push_str(&format!(
            "**{}** (exit {}) · profile `{}` · policy `{}`\n\n",
            self.status, self.exit_code, self.profile, self.policy_hash
        ));
        if let Some(signal) = &self.ended_by {
            md.push_str(&format!(
                "**Terminated: {signal} from outside ended the run.** The command had the grace \
                 period, then every process of its sandbox was killed; the run's end record closes \
                 the audit chain.\n\n"
            ));
        }
        if self.inside_not_written > 0 {
            md.push_str(&format!(
                "**{} records the agent caused were not written**: the run reached \
                 `audit.inside_max_mib` or `audit.inside_max_per_second`.\n\n",
                self.inside_not_written
            ));
        }
        md.push_str(
            &self
                .runbook
                .markdown(|text| cell(&Value::String(text.to_string()))),
        );
        if !md.ends_with("\n\n") {
            // A table ends at a blank line.
            md.push('\n');
        }
        md.push_str("### Enforced\n\n");
        for line in &self.enforced {
            md.push_str(&format!("- {line}\n"));
        }
        for line in &self.limits {
            md.push_str(&format!("- limit {line}\n"));
        }
        if !self.limits_acted.is_empty() {
            md.push_str("\n### Limits that acted\n\n");
            for line in &self.limits_acted {
                md.push_str(&format!("- **{line}**\n"));
            }
        }
        md.push_str(&format!(
            "\n### Denied by the hook ({})\n\n{}",
            self.denials_total,
            first_shown(self.denials.len(), self.denials_total)
        ));
        if !self.denials.is_empty() {
            md.push_str("| tool | rule | reason |\n| --- | --- | --- |\n");
            for d in &self.denials {
                md.push_str(&format!(
                    "| {} | `{}` | {} |\n",
                    cell(&d["tool"]),
                    cell(&d["rule_id"]),
                    cell(&d["reason"])
                ));
            }
        }
        md.push_str(&format!(
            "\n### Network ({} connections)\n\n{}",
            self.network_total,
            first_shown(self.network.len(), self.network_total)
        ));
        if !self.network.is_empty() {
            md.push_str("| host | port | allowed | rule |\n| --- | --- | --- | --- |\n");
            for n in &self.network {
                md.push_str(&format!(
                    "| {} | {} | {} | {} |\n",
                    cell(&n["host"]),
                    n["port"],
                    n["allowed"],
                    cell(&n["rule"])
                ));
            }
        }
        md.push_str(&format!(
            "\n### Persistence sweep ({} findings)\n\n{}",
            self.sweep_total,
            first_shown(self.sweep.len(), self.sweep_total)
        ));
        for f in &self.sweep {
            md.push_str(&format!(
                "- {} `{}` → `{}`\n",
                cell(&f["change"]),
                cell(&f["path"]),
                cell(&f["quarantined_to"])
            ));
        }
        if let Some(patch) = &self.proposed_changes {
            md.push_str(&format!(
                "\nWhat the run wrote there, as a patch to review and apply if wanted: `{}`\n",
                cell(&Value::String(patch.clone()))
            ));
        }
        md.push_str(&format!(
            "\nAudit log `{}`, head `{}` (`stepproof audit verify {} --head {}`)\n",
            self.audit_log, self.audit_head, self.audit_log, self.audit_head
        ));
        md
    }
}

/// A JSON value as one markdown table cell: no pipes or line breaks from the agent's text.
fn cell(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    text.replace('|', "\\|")
        .replace(['\n', '\r'], " ")
        .chars()
        .take(300)
        .collect()
}

#[cfg(test)]
mod tests {

    /// A log that several runs appended to: the summary is the last run's; a run with more
    /// records than a page shows keeps the first ones and counts them all.
    #[test]
    fn the_summary_is_the_last_runs_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let mut log = String::new();
        let line = |source: &str, kind: &str, body: serde_json::Value| {
            let mut record = serde_json::json!({ "source": source, "kind": kind });
            record
                .as_object_mut()
                .unwrap()
                .extend(body.as_object().unwrap().clone());
            format!("{record}\n")
        };
        log.push_str(&line(
            "supervisor",
            "run-start",
            serde_json::json!({ "profile": "first" }),
        ));
        log.push_str(&line(
            "supervisor",
            "network",
            serde_json::json!({ "host": "old.example" }),
        ));
        log.push_str(&line(
            "supervisor",
            "run-end",
            serde_json::json!({ "outcome": { "status": "exited", "exit_code": 0 } }),
        ));
        log.push_str(&line(
            "supervisor",
            "run-start",
            serde_json::json!({ "profile": "second" }),
        ));
        for n in 0..(SHOWN + 50) {
            log.push_str(&line(
                "supervisor",
                "network",
                serde_json::json!({ "host": format!("h{n}.example") }),
            ));
            log.push_str(&line(
                "sandbox",
                "decision",
                serde_json::json!({ "reported": { "decision": "deny", "tool": "Bash" } }),
            ));
        }
        log.push_str("this line is not a record\n");
        log.push_str(&line(
            "supervisor",
            "run-end",
            serde_json::json!({ "outcome": { "status": "denied", "exit_code": 122 } }),
        ));
        std::fs::write(&path, log).unwrap();
        let s = Summary::from_audit_log(&path, "abc");
        assert_eq!(
            (s.profile.as_str(), s.status.as_str(), s.exit_code),
            ("second", "denied", 122)
        );
        assert_eq!(
            (s.network.len(), s.network_total),
            (SHOWN, (SHOWN + 50) as u64)
        );
        assert_eq!(
            (s.denials.len(), s.denials_total),
            (SHOWN, (SHOWN + 50) as u64)
        );
        assert!(s.network.iter().all(|n| n["host"] != "old.example"));
        let md = s.markdown();
        assert!(
            md.contains(&format!("### Network ({} connections)", SHOWN + 50)),
            "{md}"
        );
        assert!(
            md.contains(&format!("The first {SHOWN} are listed")),
            "{md}"
        );
    }
    use super::*;

    /// A run ended from outside is said at the top of the summary, also when a sweep's finding
    /// wraps how it ended.
    #[test]
    fn a_terminated_run_says_so() {
        let terminated = serde_json::json!({
            "status": "terminated", "exit_code": 143, "signal": 15, "signal_name": "SIGTERM",
            "command": { "status": "signaled", "exit_code": 137, "signal": 9 },
        });
        let wrapped = serde_json::json!({
            "status": "tampering", "exit_code": 123, "findings": [], "command": terminated,
        });
        assert_eq!(super::ended_by(&terminated).as_deref(), Some("SIGTERM"));
        assert_eq!(super::ended_by(&wrapped).as_deref(), Some("SIGTERM"));
        let plain = serde_json::json!({ "status": "signaled", "exit_code": 143, "signal": 15 });
        assert_eq!(super::ended_by(&plain), None);
        let mut summary = super::Summary::default();
        summary.add(serde_json::json!({
            "source": "supervisor", "kind": "run-end", "outcome": wrapped,
        }));
        let md = summary.markdown();
        assert!(
            md.contains("**Terminated: SIGTERM from outside ended the run.**"),
            "{md}"
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("30m").unwrap(), Duration::from_secs(1800));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(
            parse_duration("720h").unwrap(),
            Duration::from_secs(MAX_TIMEOUT_SECS)
        );
        // Values that used to wrap or overflow are refused with the range.
        for bad in [
            "18446744073709551615",
            "18446744073709551615s3s",
            "5124095576030432h",
            "99999999999999999999999s",
            "721h",
            "2592001",
        ] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.contains("allowed range"), "{bad}: {e}");
        }
        for bad in ["", "m", "1x", "10m5", "0s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
