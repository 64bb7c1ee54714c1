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
}

impl Summary {
    pub fn from_audit_log(path: &Path, head: &str) -> Summary {
        let mut s = Summary {
            audit_log: path.display().to_string(),
            audit_head: head.to_string(),
            ..Summary::default()
        };
        let text = std::fs::read_to_string(path).unwrap_or_default();
        for line in text.lines() {
            let Ok(record) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let kind = record["kind"].as_str().unwrap_or_default();
            let source = record["source"].as_str().unwrap_or_default();
            match (source, kind) {
                ("supervisor", "run-start") => {
                    s.profile = record["profile"].as_str().unwrap_or_default().to_string();
                    s.policy_hash = record["policy_hash"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    s.limits.extend(
                        record["limit_lines"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v.as_str().map(str::to_string)),
                    );
                }
                ("supervisor", "limits") => {
                    s.limits_acted.extend(
                        record["acted"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v.as_str().map(str::to_string)),
                    );
                }
                ("supervisor", "run-end") => {
                    s.status = record["outcome"]["status"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    s.exit_code = record["outcome"]["exit_code"].as_i64().unwrap_or_default();
                    s.inside_not_written = record["hook_receiver"]["over_cap"]
                        .as_u64()
                        .unwrap_or_default();
                    let e = &record["enforced"];
                    s.enforced = vec![
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
                ("supervisor", "network") => s.network.push(record.clone()),
                ("supervisor", "sweep") => {
                    if let Some(f) = record["findings"].as_array() {
                        s.sweep.extend(f.iter().cloned());
                    }
                    if let Some(patch) = record["proposed_changes"].as_str() {
                        s.proposed_changes = Some(patch.to_string());
                    }
                }
                ("sandbox", "decision") if record["reported"]["decision"] == "deny" => {
                    s.denials.push(record["reported"].clone());
                }
                _ => {}
            }
        }
        s
    }

    pub fn markdown(&self) -> String {
        let mut md = String::new();
        md.push_str("## StepProof run\n\n");
        md.push_str(&format!(
            "**{}** (exit {}) · profile `{}` · policy `{}`\n\n",
            self.status, self.exit_code, self.profile, self.policy_hash
        ));
        if self.inside_not_written > 0 {
            md.push_str(&format!(
                "**{} records reported from inside were not written**: the run reached \
                 `audit.inside_max_mib`.\n\n",
                self.inside_not_written
            ));
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
            "\n### Denied by the hook ({})\n\n",
            self.denials.len()
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
            "\n### Network ({} connections)\n\n",
            self.network.len()
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
            "\n### Persistence sweep ({} findings)\n\n",
            self.sweep.len()
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
    use super::*;

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
