//! Denial loops: the same rule denying call after call in one session — the agent retrying a
//! refused call in new spellings. Counted here, in the supervisor, from the hook's decision
//! records as the receiver takes them: the hook is a new process per call, and a count kept
//! inside the sandbox would be the agent's to reset.
//!
//! From `after` denials under one rule in one session (`[hook] denial_loop_after`, default 3),
//! the receiver's answer to the hook says so, and the hook adds to that deny's reason what the
//! profile or the open runbook step allows and how to go on. Under `--ci`, at twice `after`
//! the run is ended (exit 121, [`crate::exit::ExitCode::DenialLoop`]) instead of spending its
//! budget on denied calls. Each stage is a `denial-loop` record from the supervisor.
//!
//! The records counted are reported from inside: the agent can run the hook binary itself and
//! report denials nobody made. All that buys it is the restatement sooner, or its own `--ci`
//! run ended: it cannot lower a count.

use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

/// At most this many (session, rule) pairs are counted; a pair first seen beyond it is not
/// (the records are the agent's to invent, so the map must stay bounded).
pub const MAX_PAIRS: usize = 4096;
/// A session id or rule id is counted by at most this many bytes of it.
const MAX_KEY: usize = 256;

/// How loops are handled in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopSettings {
    /// Denials under one rule in one session from which a deny restates (0: never).
    pub after: u32,
    /// `--ci`: the run ends at twice `after`.
    pub stop: bool,
}

/// A deny that is one of a loop: what the hook is answered and the `denial-loop` record says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopSeen {
    pub session_id: String,
    pub rule_id: String,
    /// The tool of this deny (the rule may have denied others).
    pub tool: Option<String>,
    /// Denials under the rule in the session, this one included.
    pub denials: u32,
    pub after: u32,
    /// The run ends (`--ci`).
    pub stop: bool,
    /// `restated` (the first deny that restates), `stopped` (the one that ends a `--ci` run) or
    /// `repeated` (another deny of a loop already recorded; not recorded again).
    pub stage: &'static str,
}

/// The loop that ended a `--ci` run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoopStop {
    pub session_id: String,
    pub rule_id: String,
    pub denials: u32,
}

/// The counter, owned by the receiver's thread.
pub struct DenialLoops {
    after: u32,
    stop_at: Option<u32>,
    counts: HashMap<(String, String), u32>,
    stopped: Arc<Mutex<Option<LoopStop>>>,
    /// Written once when a loop ends the run: the relay polls the other end.
    wake: Option<UnixStream>,
}

/// What the rest of the supervisor sees of the counter: whether a loop asked the run to end, and
/// the socket that becomes readable when it does (for the relay's poll).
pub struct LoopWatch {
    stopped: Arc<Mutex<Option<LoopStop>>>,
    pub stop_request: Option<UnixStream>,
}

impl LoopWatch {
    /// The loop that asked the run to end, if one did.
    pub fn stopped(&self) -> Option<LoopStop> {
        self.stopped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl DenialLoops {
    /// A counter and its watch. Without the socket pair a `--ci` run still records the loop and
    /// restates, but is not ended early (said in the log).
    pub fn new(settings: LoopSettings) -> (DenialLoops, LoopWatch) {
        let stopped = Arc::new(Mutex::new(None));
        let (wake, stop_request) = if settings.stop && settings.after > 0 {
            match UnixStream::pair() {
                Ok((wake, watch)) => (Some(wake), Some(watch)),
                Err(e) => {
                    tracing::warn!("denial loops: no socket pair to end the run with ({e})");
                    (None, None)
                }
            }
        } else {
            (None, None)
        };
        let loops = DenialLoops {
            after: settings.after,
            stop_at: (settings.stop && settings.after > 0)
                .then(|| settings.after.saturating_mul(2)),
            counts: HashMap::new(),
            stopped: stopped.clone(),
            wake,
        };
        (
            loops,
            LoopWatch {
                stopped,
                stop_request,
            },
        )
    }

    /// A record the receiver took from the hook: when it is a PreToolUse deny that makes or
    /// continues a loop, what to tell the hook (and, unless `repeated`, to record).
    pub fn seen(&mut self, reported: &Map<String, Value>) -> Option<LoopSeen> {
        let text = |key: &str| reported.get(key).and_then(Value::as_str);
        if self.after == 0
            || text("kind") != Some("decision")
            || text("event") != Some("PreToolUse")
            || text("decision") != Some("deny")
        {
            return None;
        }
        let session_id = match reported.get("session_id") {
            Some(Value::String(s)) => cut(s),
            None | Some(Value::Null) => String::new(),
            Some(other) => cut(&other.to_string()),
        };
        let rule_id = cut(text("rule_id").unwrap_or("?"));
        let key = (session_id, rule_id);
        if !self.counts.contains_key(&key) && self.counts.len() >= MAX_PAIRS {
            return None;
        }
        let count = self.counts.entry(key.clone()).or_insert(0);
        *count = count.saturating_add(1);
        let denials = *count;
        if denials < self.after {
            return None;
        }
        let (session_id, rule_id) = key;
        let stop = self.stop_at.is_some_and(|at| denials >= at);
        let stage = if stop && self.stop_at == Some(denials) {
            "stopped"
        } else if denials == self.after {
            "restated"
        } else {
            "repeated"
        };
        if stop {
            self.ask_to_stop(&session_id, &rule_id, denials);
        }
        Some(LoopSeen {
            session_id,
            rule_id,
            tool: text("tool").map(cut),
            denials,
            after: self.after,
            stop,
            stage,
        })
    }

    /// The first loop to reach the stop asks the run to end; later ones find it ending.
    fn ask_to_stop(&mut self, session_id: &str, rule_id: &str, denials: u32) {
        let mut stopped = self
            .stopped
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if stopped.is_some() {
            return;
        }
        *stopped = Some(LoopStop {
            session_id: session_id.to_string(),
            rule_id: rule_id.to_string(),
            denials,
        });
        match self.wake.take() {
            // One byte, never blocking: the relay only needs the socket readable.
            Some(wake) => {
                let _ = wake.set_nonblocking(true);
                if let Err(e) = std::io::Write::write_all(&mut &wake, b"s") {
                    tracing::warn!("denial loops: asking the run to end: {e}");
                }
            }
            None => tracing::warn!("denial loops: the run cannot be ended early (no socket)"),
        }
    }
}

/// At most [`MAX_KEY`] bytes, cut on a character boundary.
fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_KEY);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Read;

    fn deny(session: &str, rule: &str, command: &str) -> Map<String, Value> {
        let Value::Object(map) = json!({
            "kind": "decision", "event": "PreToolUse", "decision": "deny",
            "session_id": session, "rule_id": rule, "tool": "Bash", "input": command,
        }) else {
            unreachable!()
        };
        map
    }

    fn counter(after: u32, stop: bool) -> (DenialLoops, LoopWatch) {
        DenialLoops::new(LoopSettings { after, stop })
    }

    /// The command in new spellings is one loop: the rule is what counts, not the text.
    #[test]
    fn the_same_rule_across_spellings_counts_as_one_loop() {
        let (mut loops, watch) = counter(3, false);
        let spellings = [
            "curl -s http://x/",
            "/usr/bin/curl http://x/",
            "env curl http://x/",
            "command curl http://x/",
        ];
        let seen: Vec<Option<LoopSeen>> = spellings
            .iter()
            .map(|c| loops.seen(&deny("s1", "net-tools", c)))
            .collect();
        assert_eq!(seen[0], None);
        assert_eq!(seen[1], None);
        let third = seen[2].clone().expect("the third denial is a loop");
        assert_eq!(
            (
                third.denials,
                third.stage,
                third.stop,
                third.rule_id.as_str()
            ),
            (3, "restated", false, "net-tools")
        );
        let fourth = seen[3].clone().expect("and so is the fourth");
        assert_eq!((fourth.denials, fourth.stage), (4, "repeated"));
        assert_eq!(watch.stopped(), None, "no stop without --ci");
    }

    #[test]
    fn rules_and_sessions_are_counted_apart() {
        let (mut loops, _watch) = counter(2, false);
        assert!(loops.seen(&deny("s1", "a", "x")).is_none());
        assert!(loops.seen(&deny("s1", "b", "x")).is_none());
        assert!(loops.seen(&deny("s2", "a", "x")).is_none());
        let again = loops.seen(&deny("s1", "a", "y")).expect("s1/a twice");
        assert_eq!((again.session_id.as_str(), again.denials), ("s1", 2));
        assert!(loops.seen(&deny("s3", "b", "x")).is_none());
        assert_eq!(loops.seen(&deny("s2", "b", "x")), None);
        assert!(loops.seen(&deny("s2", "a", "y")).is_some());
    }

    /// Only a PreToolUse deny counts: an allow, an ask, a ConfigChange refusal and evidence do
    /// not, and do not reset the count either.
    #[test]
    fn only_pre_tool_use_denials_count() {
        let (mut loops, _watch) = counter(2, false);
        assert!(loops.seen(&deny("s", "r", "x")).is_none());
        for (key, value) in [
            ("decision", "allow"),
            ("decision", "ask"),
            ("event", "ConfigChange"),
            ("kind", "evidence"),
        ] {
            let mut other = deny("s", "r", "x");
            other.insert(key.into(), json!(value));
            assert!(loops.seen(&other).is_none(), "{key}={value}");
        }
        assert_eq!(loops.seen(&deny("s", "r", "x")).map(|s| s.denials), Some(2));
    }

    #[test]
    fn the_threshold_is_the_profiles_and_zero_is_off() {
        for after in [1u32, 4, 7] {
            let (mut loops, _watch) = counter(after, false);
            let first = (1..=after + 1)
                .find(|_| loops.seen(&deny("s", "r", "x")).is_some())
                .expect("a loop within after denials");
            assert_eq!(first, after);
        }
        let (mut off, watch) = counter(0, true);
        for _ in 0..100 {
            assert!(off.seen(&deny("s", "r", "x")).is_none());
        }
        assert!(watch.stop_request.is_none() && watch.stopped().is_none());
    }

    /// Under --ci, twice `after` denials ask the run to end, once: the relay's socket becomes
    /// readable and the watch names the loop.
    #[test]
    fn under_ci_twice_the_threshold_asks_the_run_to_end_once() {
        let (mut loops, watch) = counter(2, true);
        let stages: Vec<(&str, bool)> = (0..5)
            .filter_map(|_| loops.seen(&deny("s", "r", "x")))
            .map(|s| (s.stage, s.stop))
            .collect();
        assert_eq!(
            stages,
            [
                ("restated", false),
                ("repeated", false),
                ("stopped", true),
                ("repeated", true)
            ]
        );
        assert_eq!(
            watch.stopped(),
            Some(LoopStop {
                session_id: "s".into(),
                rule_id: "r".into(),
                denials: 4
            })
        );
        let mut request = watch.stop_request.as_ref().unwrap();
        request.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(request.read(&mut buf).unwrap(), 1, "one byte, once");
        // Another loop reaching the stop later does not ask again.
        for _ in 0..4 {
            loops.seen(&deny("s", "other", "x"));
        }
        // The asking end is gone once it asked: end of file, no second byte.
        assert_eq!(request.read(&mut buf).unwrap(), 0, "nothing more to read");
        assert_eq!(watch.stopped().unwrap().rule_id, "r");
    }

    /// Invented records cannot grow the map without bound: long ids are cut, and pairs past
    /// the cap are not counted.
    #[test]
    fn the_count_is_bounded() {
        let (mut loops, _watch) = counter(1, false);
        let long = "x".repeat(10 * MAX_KEY);
        let seen = loops.seen(&deny(&long, &long, "x")).unwrap();
        assert_eq!(
            (seen.session_id.len(), seen.rule_id.len()),
            (MAX_KEY, MAX_KEY)
        );
        for n in 0..MAX_PAIRS + 10 {
            loops.seen(&deny(&format!("s{n}"), "r", "x"));
        }
        assert_eq!(loops.counts.len(), MAX_PAIRS);
        assert!(loops.seen(&deny("one-more", "r", "x")).is_none());
    }
}
