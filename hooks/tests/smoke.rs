mod common;
use serde_json::json;
use stepproof_hook::check_tool;

#[test]
fn smoke() {
    for p in ["default", "ci", "strict"] {
        let policy = common::builtin(p);
        for c in ["git status", "cargo test 2>&1 | tail -5", "sudo ls", "curl x", "$x", "echo hi > /etc/x", "[ -f x ] && ls", "claude --bare -p hi", "FOO=1 CLAUDE_CODE_SIMPLE=1 ls"] {
            let v = check_tool(&policy, "Bash", &json!({"command": c}));
            println!("{p:8} {c:30} => {v}");
        }
    }
}
