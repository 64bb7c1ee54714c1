//! Approvals by webhook, for real: `stepproof-run --runbook` with a shell script as the agent,
//! and an HTTPS stand-in on the host's loopback (`support/webhook.rs`, a test CA trusted through
//! the caller's `STEPPROOF_TEST_ONWARD_CA`) that answers the supervisor's polls as each test
//! says — approve, deny, nothing, a bad signature, an earlier answer replayed. The URL and key
//! come from outside the workspace only; the agent can neither see them nor reach the stand-in.
//! As root and as the test user.

mod support;

#[path = "support/webhook.rs"]
mod webhook;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{STEPPROOF, Who, World, describe};
use webhook::{Reply, Webhook, answer};

const KEY: &str = "0123456789abcdef0123456789abcdef-test-key";

/// A runbook of approval steps, each after the one before, each stopping the run when denied.
fn runbook(steps: &[(&str, &str)]) -> String {
    let mut text =
        String::from("id = \"hooked\"\ntitle = \"Approvals by webhook\"\nowner = \"tests\"\n");
    let mut before: Option<&str> = None;
    for (id, deadline) in steps {
        text.push_str(&format!(
            "\n[[steps]]\nid = \"{id}\"\ntitle = \"Step {id}\"\ninstructions = \"Wait for a person\"\non_fail = \"block\"\n"
        ));
        if let Some(b) = before {
            text.push_str(&format!("depends_on = [\"{b}\"]\n"));
        }
        text.push_str(&format!(
            "[[steps.evidence]]\napproval = {{ approvers = \"the tester\", deadline = \"{deadline}\" }}\n"
        ));
        before = Some(id);
    }
    text
}

/// The key file, in the home but not named like a secret (the plan must hide it anyway).
fn key_file(w: &World) -> PathBuf {
    w.home.join("work-notes/hook.txt")
}

/// The agent: what it can see of the approval channel, then a completion per step.
fn agent(w: &World, hook: &Webhook, steps: &[&str]) -> String {
    let mut script = format!(
        r#"S=/run/stepproof/stepproof
echo "approval-vars=$(env | grep -c '^STEPPROOF_APPROVAL_')"
cat {key} >/dev/null 2>&1; echo "key-read=$?"
python3 - <<'EOF'
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3); print("direct=connected")
except OSError as e:
    print("direct=refused", e.errno)
try:
    s = socket.create_connection(("127.0.0.1", 3128), timeout=3)
    s.sendall(b"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
    print("proxy=" + s.recv(200).decode(errors="replace").splitlines()[0])
except OSError as e:
    print("proxy-error", e.errno)
EOF
"#,
        key = key_file(w).display(),
        port = hook.port
    );
    for step in steps {
        script.push_str(&format!(
            "$S step complete --step {step} --wait; echo \"complete-{step}=$?\"\n"
        ));
    }
    script
}

fn setup(w: &World, steps: &[(&str, &str)], script: &str) {
    fs::write(w.workspace.join("runbook.toml"), runbook(steps)).unwrap();
    fs::write(w.workspace.join("agent.sh"), script).unwrap();
    let key = key_file(w);
    fs::create_dir_all(key.parent().unwrap()).unwrap();
    fs::write(&key, format!("{KEY}\n")).unwrap();
    support::chown_tree(&w.home, w.owner);
}

/// A profile outside the workspace (in the home), extending the default.
fn home_profile(w: &World, name: &str, body: &str) -> PathBuf {
    let path = w.home.join(".config/stepproof").join(name);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(
        &path,
        format!("name = \"{name}\"\nextends = \"default\"\n{body}"),
    )
    .unwrap();
    support::chown_tree(&w.home, w.owner);
    path
}

/// `stepproof-run` with the stand-in's CA trusted, and `env` added to the clean environment.
fn command(w: &World, hook: &Webhook, flags: &[&str], env: &[(&str, &str)]) -> Command {
    let mut args = vec!["--runbook", "runbook.toml"];
    args.extend(flags);
    let mut cmd = w.command(&args, &["/bin/sh", "agent.sh"]);
    cmd.env("STEPPROOF_TEST_ONWARD_CA", &hook.ca);
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

/// [`command`] with the webhook and the test's key named in the caller's environment.
fn with_key(w: &World, hook: &Webhook, flags: &[&str]) -> Command {
    command(
        w,
        hook,
        flags,
        &[
            ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
            ("STEPPROOF_APPROVAL_HMAC_KEY", KEY),
        ],
    )
}

fn records(out: &Output) -> Vec<Value> {
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    let verified = Command::new(STEPPROOF)
        .args(["audit", "verify"])
        .arg(&log)
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "audit verify: {}",
        describe(&verified)
    );
    fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_kind<'r>(records: &'r [Value], kind: &str) -> Vec<&'r Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// The agent saw no approval variable, could not read the key file, and reached the stand-in
/// neither directly (its own network namespace) nor through the proxy (not allowed).
fn agent_was_kept_out(text: &str, all: &str) {
    assert!(text.contains("approval-vars=0"), "{all}");
    assert!(text.contains("key-read=1"), "{all}");
    assert!(text.contains("direct=refused"), "{all}");
    assert!(
        text.contains("proxy=HTTP/1.1 4") || text.contains("proxy=HTTP/1.1 5"),
        "{all}"
    );
}

both!(a_webhook_approval_opens_a_step, |w: &World| {
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|request, _, _| answer(KEY, request, "approve", "ship it", "alice@example.com")),
    );
    setup(w, &[("gate", "1m")], &agent(w, &hook, &["gate"]));
    // Even a profile that lists the variables (or sets one) does not pass them in.
    let profile = home_profile(
        w,
        "lists-approval-vars.toml",
        "[process]\nenv = [\"STEPPROOF_APPROVAL_WEBHOOK\", \"STEPPROOF_APPROVAL_HMAC_KEY_FILE\", \"STEPPROOF_*\"]\nset_env = { STEPPROOF_APPROVAL_HMAC_KEY = \"set-by-the-profile\" }\n",
    );
    let key = key_file(w);
    // --ci: the webhook is asked (a terminal is not there).
    let out = command(
        w,
        &hook,
        &["--ci", "--profile", profile.to_str().unwrap()],
        &[
            ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
            ("STEPPROOF_APPROVAL_HMAC_KEY_FILE", key.to_str().unwrap()),
        ],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(text.contains("complete-gate=0"), "{all}");
    agent_was_kept_out(&text, &all);
    // The request: signed, one per wait, naming the run, the step, the runbook and its hash,
    // a fresh nonce and an expiry.
    let requests = hook.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let r = &requests[0];
    assert_eq!(r["type"], "stepproof.approval.request");
    assert_eq!(r["step"], "gate");
    assert_eq!(r["runbook"], "hooked");
    assert!(
        r["runbook_hash"].as_str().is_some_and(|h| !h.is_empty()),
        "{r}"
    );
    assert!(r["run"].as_str().is_some_and(|h| !h.is_empty()), "{r}");
    assert_eq!(r["nonce"].as_str().map(str::len), Some(64), "{r}");
    assert!(r["expires_at"].as_u64().unwrap() >= r["issued_at"].as_u64().unwrap() + 60);
    assert!(
        hook.seen()
            .iter()
            .filter(|s| s.method == "POST")
            .all(|s| s.signed)
    );
    // The record names the approver, the channel and the nonce.
    let records = records(&out);
    let approvals = of_kind(&records, "runbook-approval");
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["from"], "webhook");
    assert_eq!(approvals[0]["approver"], "alice@example.com");
    assert_eq!(approvals[0]["counted"], true);
    assert_eq!(approvals[0]["nonce"], r["nonce"]);
    // Asked and answered within a poll or two.
    let asked = of_kind(&records, "runbook-approval-webhook-request")[0]["ts_ms"]
        .as_u64()
        .unwrap();
    let answered = approvals[0]["ts_ms"].as_u64().unwrap();
    eprintln!(
        "webhook approval: request to counted answer in {} ms",
        answered - asked
    );
    assert!(answered - asked < 5000, "{} ms", answered - asked);
    let evidence = of_kind(&records, "runbook-evidence");
    assert_eq!(evidence[0]["held"], true, "{evidence:?}");
    assert_eq!(evidence[0]["approver"], "alice@example.com");
    assert_eq!(of_kind(&records, "runbook-step-passed").len(), 1);
    // Neither the key nor the variable's value is in the log.
    let log = support::audit_log_named(&String::from_utf8_lossy(&out.stderr));
    assert!(!fs::read_to_string(&log).unwrap().contains(KEY));
    // `audit show` names the channel and the approver.
    let shown = Command::new(STEPPROOF)
        .args(["audit", "show"])
        .arg(&log)
        .output()
        .unwrap();
    let shown_text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown_text.contains("approval: approved at the webhook by alice@example.com")
            && shown_text.contains("from webhook · by alice@example.com"),
        "{}",
        describe(&shown)
    );
});

both!(a_webhook_denial_denies_with_its_reason, |w: &World| {
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|request, _, _| answer(KEY, request, "deny", "not today", "bob@example.com")),
    );
    setup(w, &[("gate", "1m")], &agent(w, &hook, &["gate"]));
    let out = with_key(w, &hook, &[]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    // Only the approval is missing: the attempt is not spent, the step stays open, and the
    // run ends with the approval missing (115), not stopped.
    assert_eq!(out.status.code(), Some(115), "{all}");
    assert!(text.contains("complete-gate=1"), "{all}");
    assert!(
        text.contains("step gate NOT approved: the tester denied it: not today")
            && text.contains("This did not use an attempt"),
        "{all}"
    );
    agent_was_kept_out(&text, &all);
    let records = records(&out);
    let approvals = of_kind(&records, "runbook-approval");
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["approved"], false);
    assert_eq!(approvals[0]["reason"], "not today");
    assert_eq!(approvals[0]["approver"], "bob@example.com");
});

both!(no_answer_before_the_deadline_denies, |w: &World| {
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|_, _, _| Reply::Pending),
    );
    setup(w, &[("gate", "3s")], &agent(w, &hook, &["gate"]));
    // The webhook from the user's profile (outside the workspace), its key from a file.
    let profile = home_profile(
        w,
        "approvals.toml",
        &format!(
            "[approvals]\nwebhook = \"{}\"\nhmac_key = \"file:~/work-notes/hook.txt\"\n",
            hook.url
        ),
    );
    let started = std::time::Instant::now();
    let out = command(
        w,
        &hook,
        &["--ci", "--profile", profile.to_str().unwrap()],
        &[],
    )
    .output()
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    assert_eq!(out.status.code(), Some(115), "{all}");
    assert!(text.contains("complete-gate=1"), "{all}");
    assert!(text.contains("no answer before the deadline (3s)"), "{all}");
    assert!(started.elapsed() >= std::time::Duration::from_secs(3));
    agent_was_kept_out(&text, &all);
    // Asked, and polled until the deadline.
    let seen = hook.seen();
    assert_eq!(
        seen.iter().filter(|s| s.method == "POST").count(),
        1,
        "{seen:?}"
    );
    assert!(
        seen.iter().filter(|s| s.method == "GET").count() >= 2,
        "{seen:?}"
    );
    let records = records(&out);
    assert!(of_kind(&records, "runbook-approval").is_empty());
    let evidence = of_kind(&records, "runbook-evidence");
    assert_eq!(evidence[0]["answer"], "deadline", "{evidence:?}");
    let start = of_kind(&records, "run-start");
    assert!(
        start[0]["runbook"]["approval_webhook"]["from"]
            .as_str()
            .is_some_and(|f| f.starts_with("profile ")),
        "{start:?}"
    );
});

both!(a_replayed_answer_is_refused, |w: &World| {
    // The first request gets a valid answer; every later poll gets that same answer again,
    // signature and all (a replay for another nonce and step).
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|request, index, given| match given.first() {
            Some((body, signature)) if index > 0 => Reply::Answer {
                body: body.clone(),
                signature: signature.clone(),
            },
            _ => answer(
                KEY,
                request,
                "approve",
                "first is fine",
                "alice@example.com",
            ),
        }),
    );
    setup(
        w,
        &[("first", "1m"), ("gate", "3s")],
        &agent(w, &hook, &["first", "gate"]),
    );
    let out = with_key(w, &hook, &[]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    assert!(text.contains("complete-first=0"), "{all}");
    assert!(text.contains("complete-gate=1"), "{all}");
    assert!(text.contains("no answer before the deadline"), "{all}");
    assert_eq!(out.status.code(), Some(115), "{all}");
    let requests = hook.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_ne!(requests[0]["nonce"], requests[1]["nonce"]);
    let records = records(&out);
    let refused = of_kind(&records, "runbook-approval-refused");
    assert!(!refused.is_empty(), "{all}");
    assert!(
        refused.iter().all(|r| r["step"] == "gate"
            && r["why"].as_str().unwrap().contains("replayed")
            && r["answer_claimed"]["step"] == "first"),
        "{refused:?}"
    );
    // Only the first step's answer counted.
    let approvals = of_kind(&records, "runbook-approval");
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["step"], "first");
});

both!(an_answer_signed_with_another_key_is_refused, |w: &World| {
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|request, _, _| {
            answer(
                "not-the-key-not-the-key-not-the-key-0000",
                request,
                "approve",
                "",
                "mallory",
            )
        }),
    );
    setup(w, &[("gate", "4s")], &agent(w, &hook, &["gate"]));
    let out = with_key(w, &hook, &[]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = describe(&out);
    assert_eq!(out.status.code(), Some(115), "{all}");
    assert!(text.contains("complete-gate=1"), "{all}");
    let records = records(&out);
    let refused = of_kind(&records, "runbook-approval-refused");
    assert_eq!(refused.len(), 1, "recorded once, then counted: {refused:?}");
    assert!(
        refused[0]["why"]
            .as_str()
            .unwrap()
            .contains("signature does not hold"),
        "{refused:?}"
    );
    assert_eq!(refused[0]["answer_claimed"]["approver"], "mallory");
    let repeats = of_kind(&records, "runbook-approval-webhook-repeats");
    assert!(repeats[0]["repeated"].as_u64().unwrap() >= 1, "{repeats:?}");
    assert!(of_kind(&records, "runbook-approval").is_empty());
});

/// `stepproof-run` refused before anything runs (120), saying `words`.
fn refused(w: &World, out: &Output, words: &str) {
    let all = describe(out);
    assert_eq!(out.status.code(), Some(120), "{all}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(words),
        "{words:?} in {all}"
    );
    let _ = w;
}

both!(misplaced_webhooks_are_refused, |w: &World| {
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|_, _, _| Reply::Pending),
    );
    setup(w, &[("gate", "1m")], &agent(w, &hook, &["gate"]));
    let key = key_file(w);
    let key = key.to_str().unwrap();
    // http:// from the environment, and from a profile.
    let out = command(
        w,
        &hook,
        &[],
        &[
            ("STEPPROOF_APPROVAL_WEBHOOK", "http://127.0.0.1:9/hook"),
            ("STEPPROOF_APPROVAL_HMAC_KEY_FILE", key),
        ],
    )
    .output()
    .unwrap();
    refused(w, &out, "http:// is refused");
    let http = home_profile(
        w,
        "http.toml",
        "[approvals]\nwebhook = \"http://127.0.0.1:9/hook\"\nhmac_key = \"file:~/work-notes/hook.txt\"\n",
    );
    let out = command(w, &hook, &["--profile", http.to_str().unwrap()], &[])
        .output()
        .unwrap();
    refused(w, &out, "http:// is refused");
    // A profile in the workspace naming a webhook, itself or through the file it extends.
    let outside = home_profile(
        w,
        "outside.toml",
        &format!(
            "[approvals]\nwebhook = \"{}\"\nhmac_key = \"file:~/work-notes/hook.txt\"\n",
            hook.url
        ),
    );
    let inside = w.workspace.join("checked-out.toml");
    for body in [
        format!(
            "name = \"c\"\nextends = \"default\"\n[approvals]\nwebhook = \"{}\"\nhmac_key = \"file:~/work-notes/hook.txt\"\n",
            hook.url
        ),
        format!(
            "name = \"c\"\nextends = {:?}\n",
            outside.display().to_string()
        ),
    ] {
        fs::write(&inside, body).unwrap();
        support::chown_tree(&w.workspace, w.owner);
        let out = command(w, &hook, &["--profile", inside.to_str().unwrap()], &[])
            .output()
            .unwrap();
        refused(w, &out, "[approvals] from inside the workspace");
    }
    // A key file inside the workspace.
    let in_ws = w.workspace.join("hook-key.txt");
    fs::write(&in_ws, KEY).unwrap();
    support::chown_tree(&w.workspace, w.owner);
    let out = command(
        w,
        &hook,
        &[],
        &[
            ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
            ("STEPPROOF_APPROVAL_HMAC_KEY_FILE", in_ws.to_str().unwrap()),
        ],
    )
    .output()
    .unwrap();
    refused(w, &out, "is inside the workspace");
    // A webhook the sandbox's allow-list reaches.
    let allowing = home_profile(
        w,
        "allowing.toml",
        &format!("[network]\nallow = [\"127.0.0.1:{}\"]\n", hook.port),
    );
    let out = command(
        w,
        &hook,
        &["--profile", allowing.to_str().unwrap()],
        &[
            ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
            ("STEPPROOF_APPROVAL_HMAC_KEY_FILE", key),
        ],
    )
    .output()
    .unwrap();
    refused(w, &out, "reachable from inside the sandbox");
    // A key too short to be one.
    let out = command(
        w,
        &hook,
        &[],
        &[
            ("STEPPROOF_APPROVAL_WEBHOOK", &hook.url),
            ("STEPPROOF_APPROVAL_HMAC_KEY", "short"),
        ],
    )
    .output()
    .unwrap();
    refused(w, &out, "use at least 32");
    // Nothing reached the stand-in.
    assert!(hook.seen().is_empty(), "{:?}", hook.seen());
});

/// A runbook that names a webhook (or its key) is refused by `check`, wherever the key is.
#[test]
fn a_runbook_naming_a_webhook_is_refused_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let path: &Path = &dir.path().join("runbook.toml");
    for (extra, line) in [
        (
            "approval = { approvers = \"a\", deadline = \"1h\", webhook = \"https://approvals.example.com\" }\n",
            11,
        ),
        (
            "approval = { approvers = \"a\", deadline = \"1h\", url = \"https://x.example\" }\n",
            11,
        ),
    ] {
        let text = runbook(&[("gate", "1h")]).replace(
            "approval = { approvers = \"the tester\", deadline = \"1h\" }\n",
            extra,
        );
        let text = format!("{text}\n");
        fs::write(path, &text).unwrap();
        let out = Command::new(STEPPROOF)
            .args(["runbook", "check"])
            .arg(path)
            .output()
            .unwrap();
        let all = describe(&out);
        assert_eq!(out.status.code(), Some(1), "{all}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains(&format!("runbook.toml:{line}:"))
                && stdout.contains("never names where approvals are asked"),
            "{text}\n{all}"
        );
    }
    let _ = Who::Root;
}

// Both channels ask at once: the host terminal answers first (the webhook never does), and
// its answer counts; the webhook's asking stops with the wait.
both!(the_host_terminal_and_the_webhook_both_ask, |w: &World| {
    use std::io::{BufRead, BufReader};
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|_, _, _| Reply::Pending),
    );
    setup(w, &[("gate", "1m")], &agent(w, &hook, &["gate"]));
    let mut child = with_key(w, &hook, &[])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        said.push_str(&line);
        said.push('\n');
        if let Some(at) = line.find("`stepproof approve ") {
            assert!(
                line.contains(&format!("the webhook {} is asked too", hook.url)),
                "{line}"
            );
            // Once the webhook has the request.
            let started = std::time::Instant::now();
            while hook.requests().is_empty() && started.elapsed().as_secs() < 20 {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            let run_id = line[at..].split(' ').nth(2).unwrap().to_string();
            let mut cmd = w.as_owner(&w.run_binary().with_file_name("stepproof"));
            w.clean_env(&mut cmd);
            let out = cmd.args(["approve", &run_id, "gate"]).output().unwrap();
            assert!(out.status.success(), "approve: {}", describe(&out));
        }
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{}\n{said}", describe(&out));
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(text.contains("complete-gate=0"), "{all}");
    assert_eq!(hook.requests().len(), 1, "{all}");
    let log = support::audit_log_named(&said);
    let records: Vec<Value> = fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let approvals = of_kind(&records, "runbook-approval");
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0]["from"], "host terminal");
    assert_eq!(approvals[0]["counted"], true);
    let evidence = of_kind(&records, "runbook-evidence");
    assert_eq!(evidence[0]["from"], "host terminal", "{evidence:?}");
});

// A run that ends while a step waits for an approval (here `--timeout`) does not wait for the
// approval's deadline: the wait ends, denied, and so does the webhook's polling.
both!(the_end_of_the_run_ends_an_approval_wait, |w: &World| {
    let hook = Webhook::start(
        &w.base.join("hook"),
        KEY,
        Box::new(|_, _, _| Reply::Pending),
    );
    setup(w, &[("gate", "1h")], &agent(w, &hook, &["gate"]));
    let started = std::time::Instant::now();
    let out = with_key(w, &hook, &["--ci", "--timeout", "4s"])
        .output()
        .unwrap();
    let all = describe(&out);
    // Not a denial: the step stays open, and the run ends with its approval pending (115; a
    // later run continues it), the attempt given back.
    assert_eq!(out.status.code(), Some(115), "{all}");
    assert!(started.elapsed().as_secs() < 30, "{all}");
    let records = records(&out);
    let evidence = of_kind(&records, "runbook-evidence");
    assert_eq!(evidence[0]["answer"], "run-ended", "{evidence:?}");
    assert_eq!(evidence[0]["held"], false, "{evidence:?}");
    assert_eq!(of_kind(&records, "runbook-step-interrupted").len(), 1);
    assert!(of_kind(&records, "runbook-step-failed").is_empty());
    let not_approved = of_kind(&records, "runbook-step-not-approved");
    assert_eq!(not_approved.len(), 1, "{not_approved:?}");
    assert_eq!(not_approved[0]["missing"], "pending");
    assert_eq!(
        of_kind(&records, "runbook-ended")[0]["ending"],
        "approval-missing"
    );
    // The command itself timed out (its outcome is inside the runbook's).
    let run_end = of_kind(&records, "run-end");
    assert!(
        run_end[0].to_string().contains("\"timed-out\""),
        "{run_end:?}"
    );
    let polls = hook.seen().len();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        hook.seen().len(),
        polls,
        "the webhook is still asked after the run"
    );
});
