//! Tests of the hook contract: each event's answer and how it fails.

#[test]
fn refused_hosts_of_the_call_reach_the_model_once_each() {
    let input = |v: Value| serde_json::from_value::<HookInput>(v).unwrap();
    let now = 1_000_000_000u128;
    let notices = format!(
        "{}\tearly.example\tadd \"early.example\" to network.allow\n{}\tregistry.npmjs.org\tadd preset \"node\" to network.presets (or \"registry.npmjs.org\" to network.allow)\nnot a line\n{}\tregistry.npmjs.org\tsame\n",
        now - 60_000,
        now - 3_000,
        now - 1_000
    );
    let bash = input(
        json!({"tool_name": "Bash", "duration_ms": 5_000, "tool_input": {"command": "npm install"}}),
    );
    let text = refused_hosts_context(&bash, &notices, now).unwrap();
    assert!(
        text.contains("registry.npmjs.org (add preset \"node\" to network.presets"),
        "{text}"
    );
    assert_eq!(text.matches("registry.npmjs.org (").count(), 1, "{text}");
    assert!(!text.contains("early.example"), "{text}");
    // A failure has no duration: the command's timeout is the window.
    let failed = input(
        json!({"tool_name": "Bash", "tool_input": {"command": "curl", "timeout": 90_000}, "error": "Exit code 56"}),
    );
    let text = refused_hosts_context(&failed, &notices, now).unwrap();
    assert!(text.contains("early.example"), "{text}");
    // Nothing refused during the call: nothing said.
    let quick = input(json!({"tool_name": "Bash", "duration_ms": 10}));
    assert_eq!(refused_hosts_context(&quick, &notices, now + 10_000), None);
}

use super::records::exit_status_from_error;
use super::*;

#[test]
fn read_only_refusals_become_context_the_model_can_act_on() {
    let bash = |stdout: &str, stderr: &str| HookInput {
        tool_name: Some("Bash".into()),
        tool_response: Some(json!({"stdout": stdout, "stderr": stderr})),
        ..HookInput::default()
    };
    let checkout = bash(
        "",
        "error: unable to unlink old '.github/workflows/ci.yml': Read-only file system\nSwitched to branch 'other'\n",
    );
    let context = read_only_context(&checkout).unwrap();
    assert!(context.contains(".github/workflows/ci.yml"), "{context}");
    assert!(context.contains("Do not commit them"), "{context}");
    let shell = bash(
        "",
        "sh: 1: cannot create .vscode/tasks.json: Read-only file system\n",
    );
    let context = read_only_context(&shell).unwrap();
    assert!(
        context.contains(".vscode/tasks.json") && !context.contains("Do not commit"),
        "{context}"
    );
    assert!(read_only_context(&bash("all fine", "")).is_none());
    let failure = HookInput {
        tool_name: Some("Bash".into()),
        error: Some(json!("touch: cannot touch '.envrc': Read-only file system")),
        ..HookInput::default()
    };
    assert!(read_only_context(&failure).unwrap().contains(".envrc"));
    let write = HookInput {
        tool_name: Some("Write".into()),
        tool_response: Some(json!({"stderr": "Read-only file system"})),
        ..HookInput::default()
    };
    assert!(read_only_context(&write).is_none());
    // (Through `respond`, end to end: an observer event sets this process's observer
    // flag, which `a_panic_on_a_gate_is_a_deny` relies on being clear.)
}

#[test]
fn parses_args() {
    let a = Args::parse(
        [
            "--policy",
            "/p.json",
            "--audit-socket=/s",
            "--event",
            "Stop",
        ]
        .map(String::from),
    )
    .unwrap();
    assert_eq!(a.policy, PathBuf::from("/p.json"));
    assert_eq!(a.audit_socket, Some(PathBuf::from("/s")));
    assert_eq!(a.event.as_deref(), Some("Stop"));
    assert!(Args::parse(["--bogus".to_string()]).is_err());
    assert!(Args::parse(["--policy".to_string()]).is_err());
}

#[test]
fn a_panic_on_a_gate_is_a_deny() {
    // No test in this binary handles an observer event, so the flag is still clear.
    let response = panic_response();
    assert_eq!(response.exit_code, 2);
    assert!(response.stdout.contains("\"deny\""));
    assert!(response.stderr.contains("fail-closed"));
}

#[test]
fn exit_status_text() {
    assert_eq!(
        exit_status_from_error(Some(&json!("Exit code 3\nboom"))),
        Some(3)
    );
    assert_eq!(exit_status_from_error(Some(&json!("boom"))), None);
}
