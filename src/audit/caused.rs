//! What the agent causes the supervisor to record, within one budget per run. The agent
//! decides how many hook reports it sends, how many connections the proxy refuses, how many
//! model requests the gateway forwards and how often it asks the runbook's socket: each is a
//! record the supervisor writes to the host's disk and ships to the organisation's collector.
//! So they share one budget, by bytes (`audit.inside_max_mib`) and by rate
//! (`audit.inside_max_per_second`, with a burst of ten seconds' worth). What is over it is
//! counted by kind, not written; a summary record says so (`inside-records-over-cap`) at the
//! first drop, at most every [`REPORT_INTERVAL`] while drops go on, and once more at the end.
//! The records the supervisor makes of its own accord (the start, the sweep, the end) are never
//! charged.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How often, at most, a summary of what was dropped is written while drops go on.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(10);

/// Records per second of sustained flow when the profile names no rate: far above a busy
/// agent's (a few tool calls and model requests a second, a package install's few hundred
/// connections at once), far below a loop's.
pub const DEFAULT_PER_SECOND: u32 = 200;

/// The budget, and what it has admitted and refused so far.
#[derive(Debug)]
pub struct Caused {
    max_bytes: u64,
    per_second: u32,
    written_bytes: u64,
    /// Token bucket: records that may be written now (up to ten seconds' worth).
    tokens: f64,
    refilled: Instant,
    not_written: BTreeMap<String, u64>,
    not_written_total: u64,
    reported_total: u64,
    last_report: Option<Instant>,
}

/// What was admitted and refused, for the run's end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CausedCounts {
    pub written_bytes: u64,
    pub not_written: u64,
    pub by_kind: BTreeMap<String, u64>,
}

impl Caused {
    pub fn new(max_bytes: u64, per_second: u32) -> Caused {
        let per_second = per_second.max(1);
        Caused {
            max_bytes,
            per_second,
            written_bytes: 0,
            tokens: Self::burst(per_second),
            refilled: Instant::now(),
            not_written: BTreeMap::new(),
            not_written_total: 0,
            reported_total: 0,
            last_report: None,
        }
    }

    fn burst(per_second: u32) -> f64 {
        f64::from(per_second) * 10.0
    }

    /// Whether a record of `kind`, `bytes` long, may be written now; a refused one is counted.
    pub fn admit(&mut self, kind: &str, bytes: u64) -> bool {
        let now = Instant::now();
        let elapsed = now.duration_since(self.refilled).as_secs_f64();
        self.refilled = now;
        self.tokens =
            (self.tokens + elapsed * f64::from(self.per_second)).min(Self::burst(self.per_second));
        if self.tokens >= 1.0 && self.written_bytes.saturating_add(bytes) <= self.max_bytes {
            self.tokens -= 1.0;
            self.written_bytes += bytes;
            return true;
        }
        *self.not_written.entry(kind.to_string()).or_default() += 1;
        self.not_written_total += 1;
        false
    }

    /// The summary record's body when one is due: drops not yet reported, and either `last`
    /// (the run's end), the first drop, or [`REPORT_INTERVAL`] since the last summary.
    pub fn report(&mut self, last: bool) -> Option<Value> {
        if self.not_written_total == self.reported_total {
            return None;
        }
        let due = last
            || self
                .last_report
                .is_none_or(|at| at.elapsed() >= REPORT_INTERVAL);
        if !due {
            return None;
        }
        self.reported_total = self.not_written_total;
        self.last_report = Some(Instant::now());
        Some(json!({
            "not_written": self.not_written_total,
            "not_written_by_kind": self.not_written,
            "cap_bytes": self.max_bytes,
            "written_bytes": self.written_bytes,
            "per_second": self.per_second,
            "burst": Self::burst(self.per_second) as u64,
        }))
    }

    pub fn counts(&self) -> CausedCounts {
        CausedCounts {
            written_bytes: self.written_bytes,
            not_written: self.not_written_total,
            by_kind: self.not_written.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_a_budget_per_run() {
        let mut c = Caused::new(1000, 1000);
        assert!(c.admit("hook", 600));
        assert!(!c.admit("hook", 600));
        assert!(c.admit("connection", 400));
        assert!(!c.admit("connection", 1));
        let counts = c.counts();
        assert_eq!(counts.written_bytes, 1000);
        assert_eq!(counts.not_written, 2);
        assert_eq!(counts.by_kind["hook"], 1);
        assert_eq!(counts.by_kind["connection"], 1);
    }

    #[test]
    fn the_rate_allows_a_burst_then_the_flow() {
        let mut c = Caused::new(u64::MAX, 10);
        let admitted = (0..1000).filter(|_| c.admit("connection", 1)).count();
        // Ten seconds' worth at once (and whatever trickled in meanwhile), not a thousand.
        assert!((100..=101).contains(&admitted), "{admitted}");
        std::thread::sleep(Duration::from_millis(250));
        let later = (0..1000).filter(|_| c.admit("connection", 1)).count();
        assert!((2..=4).contains(&later), "{later}");
    }

    #[test]
    fn drops_are_reported_at_once_then_at_most_every_interval_and_at_the_end() {
        let mut c = Caused::new(10, 1000);
        assert!(c.report(false).is_none());
        assert!(!c.admit("hook", 11));
        let first = c.report(false).unwrap();
        assert_eq!(first["not_written"], 1);
        assert!(!c.admit("connection", 11));
        assert!(c.report(false).is_none(), "not due yet");
        let last = c.report(true).unwrap();
        assert_eq!(last["not_written"], 2);
        assert_eq!(last["not_written_by_kind"]["connection"], 1);
        assert!(c.report(true).is_none(), "nothing new");
    }
}
