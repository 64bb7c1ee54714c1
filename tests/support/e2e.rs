//! Helpers for the end-to-end tests with the real Claude Code: the mock Messages API
//! (`scripts/mock-anthropic.py`, one per test, on 127.0.0.2), test profiles that let Claude reach
//! it through the allow-list proxy, runs of `stepproof-run -- claude -p …` with a deadline, and
//! readers for what the model saw (the mock's request record) and what the hook decided (the
//! audit log).
#![allow(dead_code)]

use crate::support::*;
use serde_json::Value;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const MOCK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/mock-anthropic.py");
pub const API_KEY: &str = "sk-ant-mock-key-1234567890";
/// No single run should come near this; a hung Claude fails the test instead of the suite.
const DEADLINE: Duration = Duration::from_secs(120);

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh directory under the world's base (0755: the test user reads profiles from it).
pub fn scratch(w: &World, name: &str) -> PathBuf {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = w.base.join(format!("e2e-{name}-{n}"));
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A world with Claude Code installed, or None (skipped locally, failed in CI).
pub fn world(who: Who) -> Option<World> {
    if !claude_available() {
        return None;
    }
    World::new(who)
}

/// `both!` for the tests with the real Claude Code: each runs as root and as the test user, and
/// needs `claude` (skipped locally, failed in CI without it).
#[macro_export]
macro_rules! both_claude {
    ($name:ident, $body:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn as_root() {
                if let Some(w) = world(Who::Root) {
                    ($body)(&w)
                }
            }
            #[test]
            fn as_user() {
                if let Some(w) = world(Who::User) {
                    ($body)(&w)
                }
            }
        }
    };
}

/// True when Claude Code is installed (CI installs it; elsewhere the tests skip).
pub fn claude_available() -> bool {
    let ok = Command::new("claude")
        .arg("--version")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        skip_or_fail("Claude Code (`claude`) is not installed");
    }
    ok
}

/// One mock of the Messages API; killed when dropped.
pub struct Mock {
    child: Child,
    pub port: u16,
    pub record: PathBuf,
}

impl Mock {
    /// Starts the mock with `script` (a list of turns, or `{"turns": …, "threads": …}`).
    pub fn start(w: &World, script: Value) -> Mock {
        Mock::start_with(w, script, None)
    }

    /// The same over HTTPS, with `tls`'s certificate for 127.0.0.2.
    pub fn start_tls(w: &World, script: Value, tls: &TestTls) -> Mock {
        Mock::start_with(w, script, Some(tls))
    }

    /// Where a client reaches it over HTTPS.
    pub fn https_url(&self) -> String {
        format!("https://127.0.0.2:{}", self.port)
    }

    /// Requests to the OAuth token endpoint.
    pub fn token_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/v1/oauth/token"))
            })
            .collect()
    }

    fn start_with(w: &World, script: Value, tls: Option<&TestTls>) -> Mock {
        let dir = scratch(w, "mock");
        let script_path = dir.join("turns.json");
        fs::write(&script_path, serde_json::to_vec_pretty(&script).unwrap()).unwrap();
        let record = dir.join("requests.jsonl");
        let mut child = Command::new("python3")
            .arg(MOCK)
            .arg("--script")
            .arg(&script_path)
            .arg("--record")
            .arg(&record)
            .args(["--host", "127.0.0.2", "--port", "0"])
            .args(tls.map_or(Vec::new(), |t| {
                vec![
                    "--tls-cert".into(),
                    t.cert.clone().into_os_string(),
                    "--tls-key".into(),
                    t.key.clone().into_os_string(),
                ]
            }))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the mock (python3)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("mock did not say where it listens: {line:?}"));
        Mock {
            child,
            port,
            record,
        }
    }

    /// The raw record: every request the mock received, as JSON Lines.
    pub fn raw(&self) -> String {
        fs::read_to_string(&self.record).unwrap_or_default()
    }

    pub fn requests(&self) -> Vec<Value> {
        self.raw()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Requests to the Messages endpoint.
    pub fn messages_requests(&self) -> Vec<Value> {
        self.requests()
            .into_iter()
            .filter(|r| {
                r["method"] == "POST"
                    && r["path"]
                        .as_str()
                        .is_some_and(|p| p.starts_with("/v1/messages"))
            })
            .collect()
    }

    /// The tool_result the model received for `tool_use_id` (searched in every request):
    /// its text and whether it was an error.
    pub fn tool_result(&self, tool_use_id: &str) -> Option<ToolResult> {
        for request in self.messages_requests() {
            for message in request["body"]["messages"].as_array().into_iter().flatten() {
                for block in message["content"].as_array().into_iter().flatten() {
                    if block["type"] == "tool_result" && block["tool_use_id"] == tool_use_id {
                        let text = match &block["content"] {
                            Value::String(s) => s.clone(),
                            Value::Array(parts) => parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect::<Vec<_>>()
                                .join("\n"),
                            other => other.to_string(),
                        };
                        return Some(ToolResult {
                            text,
                            is_error: block["is_error"] == true,
                        });
                    }
                }
            }
        }
        None
    }

    #[track_caller]
    pub fn expect_result(&self, tool_use_id: &str) -> ToolResult {
        self.tool_result(tool_use_id).unwrap_or_else(|| {
            panic!(
                "no tool_result for {tool_use_id} reached the mock; requests:\n{}",
                self.raw()
            )
        })
    }
}

/// A test CA and a certificate it signed for 127.0.0.2 and `localhost`, as PEM files readable
/// by the test user (`ca` is what NODE_EXTRA_CA_CERTS and the gateway trust).
pub struct TestTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

pub fn test_tls(w: &World) -> TestTls {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let dir = scratch(w, "tls");
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "StepProof test CA");
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.2".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let tls = TestTls {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    fs::write(&tls.ca, ca_cert.pem()).unwrap();
    fs::write(&tls.cert, leaf.pem()).unwrap();
    fs::write(&tls.key, leaf_key.serialize_pem()).unwrap();
    for path in [&tls.ca, &tls.cert, &tls.key] {
        fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    }
    tls
}

impl Drop for Mock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug, Clone)]
pub struct ToolResult {
    pub text: String,
    pub is_error: bool,
}

/// A test profile on top of `ci`: the mock allow-listed (name and loopback address), Claude
/// pointed at it; `extra` is appended (more `[hook]` rules, …). With `api_key` false Claude
/// authenticates with the OAuth credentials in its config dir.
pub fn profile(w: &World, mock: &Mock, api_key: bool, extra: &str) -> String {
    let dir = scratch(w, "profile");
    let path = dir.join("profile.toml");
    let port = mock.port;
    let key = if api_key {
        format!("ANTHROPIC_API_KEY = \"{API_KEY}\", ")
    } else {
        String::new()
    };
    fs::write(
        &path,
        format!(
            "extends = \"ci\"\n[network]\nallow = [\"127.0.0.2:{port}\"]\nallow_addresses = [\"127.0.0.2\"]\n\
             [process]\nset_env = {{ ANTHROPIC_BASE_URL = \"http://127.0.0.2:{port}\", {key}CLAUDE_CODE_MAX_RETRIES = \"1\" }}\n{extra}\n"
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

/// One finished `stepproof-run -- claude …`.
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub audit: Vec<Value>,
    pub status_file: Value,
    pub audit_path: PathBuf,
}

impl Run {
    pub fn describe(&self) -> String {
        format!(
            "status {:?}\nstdout:\n{}\nstderr:\n{}",
            self.status, self.stdout, self.stderr
        )
    }

    /// The hook's decision records (the `reported` objects), in order.
    pub fn decisions(&self) -> Vec<&Value> {
        self.audit
            .iter()
            .filter(|r| r["kind"] == "decision" && r["source"] == "sandbox")
            .map(|r| &r["reported"])
            .collect()
    }

    /// The PreToolUse decision for one tool call.
    #[track_caller]
    pub fn decision(&self, tool_use_id: &str) -> &Value {
        self.decisions()
            .into_iter()
            .find(|d| d["event"] == "PreToolUse" && d["tool_use_id"] == tool_use_id)
            .unwrap_or_else(|| {
                panic!(
                    "no hook decision for {tool_use_id} in the audit log:\n{:#?}",
                    self.decisions()
                )
            })
    }

    /// Asserts the hook's decision and rule id for a tool call (the layer that acted).
    #[track_caller]
    pub fn expect_decision(&self, tool_use_id: &str, decision: &str, rule: &str) {
        let d = self.decision(tool_use_id);
        assert_eq!(
            (d["decision"].as_str(), d["rule_id"].as_str()),
            (Some(decision), Some(rule)),
            "hook decision for {tool_use_id}: {d:#}"
        );
    }

    pub fn records(&self, kind: &str) -> Vec<&Value> {
        self.audit.iter().filter(|r| r["kind"] == kind).collect()
    }
}

/// Runs `stepproof-run --profile P --audit-log … -- claude -p PROMPT
/// --dangerously-skip-permissions --output-format json [claude_args…]` from the workspace.
pub fn run_claude(w: &World, profile: &str, claude_args: &[&str]) -> Run {
    run_claude_with(w, None, profile, claude_args)
}

/// The same with another launcher binary (`run_binary`: a copy next to a different hook).
pub fn run_claude_with(
    w: &World,
    run_binary: Option<&Path>,
    profile: &str,
    claude_args: &[&str],
) -> Run {
    run_claude_as(
        w,
        &Launch {
            run_binary,
            ..Launch::default()
        },
        profile,
        claude_args,
    )
}

/// How `stepproof-run` is started, beyond the defaults.
#[derive(Default)]
pub struct Launch<'a> {
    /// Another launcher binary (a copy next to a different hook).
    pub run_binary: Option<&'a Path>,
    /// More `stepproof-run` flags (before `--profile`).
    pub run_args: &'a [&'a str],
    /// Variables set in `stepproof-run`'s own environment (the caller's).
    pub env: &'a [(&'a str, &'a str)],
    /// Started in a private mount namespace of its own where this directory is laid over the
    /// host's /etc (an overlay): what the host's administrator would have put there, without
    /// touching the machine's /etc. Needs root (the harness is root in CI).
    pub etc_layer: Option<&'a Path>,
    /// Directories bound (read-only) at another path in that private mount namespace: `(what,
    /// where)`, e.g. a toolchain under /root shown where the test user can reach it. Needs root.
    pub binds: &'a [(&'a Path, &'a Path)],
    /// The prompt given to `claude -p` (default "Follow the script.").
    pub prompt: Option<&'a str>,
}

/// `cmd` started in a private mount namespace of its own, with `layer` laid over /etc and each
/// of `binds` bound read-only at its place.
fn in_private_mounts(cmd: Command, layer: Option<&Path>, binds: &[(&Path, &Path)]) -> Command {
    let mut script = String::new();
    if let Some(layer) = layer {
        script.push_str(&format!(
            "mount -t overlay overlay -o lowerdir={}:/etc /etc && ",
            layer.display()
        ));
    }
    for (what, place) in binds {
        script.push_str(&format!(
            "mount --bind '{w}' '{p}' && mount -o remount,bind,ro '{p}' && ",
            w = what.display(),
            p = place.display()
        ));
    }
    script.push_str("exec \"$@\"");
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(script)
        .arg("sh")
        .arg(cmd.get_program())
        .args(cmd.get_args());
    wrapped
}

pub fn run_claude_as(w: &World, launch: &Launch, profile: &str, claude_args: &[&str]) -> Run {
    let run_binary = launch.run_binary;
    let dir = scratch(w, "run");
    chown_tree(&dir, w.owner);
    let audit_path = dir.join("audit.jsonl");
    let status_path = dir.join("status.json");
    let mut args = vec![
        "claude",
        "-p",
        launch.prompt.unwrap_or("Follow the script."),
        "--dangerously-skip-permissions",
        "--output-format",
        "json",
    ];
    args.extend_from_slice(claude_args);
    let binary = run_binary.unwrap_or(w.run_binary());
    let mut cmd = w.as_owner(binary);
    cmd.args(launch.run_args)
        .arg("--profile")
        .arg(profile)
        .arg("--audit-log")
        .arg(&audit_path)
        .arg("--status-file")
        .arg(&status_path)
        .arg("--")
        .args(args);
    if launch.etc_layer.is_some() || !launch.binds.is_empty() {
        cmd = in_private_mounts(cmd, launch.etc_layer, launch.binds);
    }
    w.clean_env(&mut cmd);
    cmd.envs(launch.env.iter().copied());
    let (status, stdout, stderr) = run_with_deadline(cmd);
    let audit = fs::read_to_string(&audit_path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let status_file = fs::read(&status_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    Run {
        status,
        stdout,
        stderr,
        audit,
        status_file,
        audit_path,
    }
}

fn run_with_deadline(mut cmd: Command) -> (ExitStatus, String, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start stepproof-run");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "stepproof-run -- claude did not finish within {DEADLINE:?}; stderr:\n{}",
                err_thread.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status,
        out_thread.join().unwrap(),
        err_thread.join().unwrap(),
    )
}

/// A Bash tool call.
pub fn bash(command: &str) -> Value {
    serde_json::json!({ "tool": "Bash", "input": { "command": command } })
}

/// Any tool call.
pub fn tool(name: &str, input: Value) -> Value {
    serde_json::json!({ "tool": name, "input": input })
}

pub fn text(t: &str) -> Value {
    serde_json::json!({ "text": t })
}

/// The tool_use id the mock gives the call of main-conversation turn `turn` (`thread` for a
/// subagent's thread: `Some(n)` is the n-th thread of the script).
pub fn call_id(thread: Option<usize>, turn: usize) -> String {
    match thread {
        None => format!("toolu_mock_{turn}_0"),
        Some(n) => format!("toolu_mock_t{n}_{turn}_0"),
    }
}
