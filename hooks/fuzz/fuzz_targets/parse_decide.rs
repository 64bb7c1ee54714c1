//! Fuzzes shell parsing and the decision: any text as a Bash command must give a verdict
//! with a rule id, without panicking. The seed corpus is replayed by `cargo test`
//! (`hooks/tests/fuzz_corpus.rs`).
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stepproof_hook::config::HookConfig;
use stepproof_hook::policy::{CompiledPolicy, Context, compile};

#[derive(serde::Deserialize)]
struct Fragment {
    hook: HookConfig,
    filesystem: Filesystem,
}

/// The persistence names `@protected` stands for in the profile's `[hook]`.
#[derive(serde::Deserialize)]
struct Filesystem {
    protected: Vec<String>,
}

fn policy() -> &'static CompiledPolicy {
    static POLICY: OnceLock<CompiledPolicy> = OnceLock::new();
    POLICY.get_or_init(|| {
        // libfuzzer-sys aborts in its panic hook, but the hook catches panics inside
        // brush-parser on purpose (they become `unknown`). A panic escaping the hook's own
        // code still reaches libfuzzer-sys's catch_unwind and aborts there.
        std::panic::set_hook(Box::new(|info| eprintln!("{info}")));
        let fragment: Fragment =
            toml::from_str(stepproof_hook::BUILTIN_DEFAULT).expect("builtin parses");
        let context = Context {
            workspace: "/work/project".into(),
            home: "/home/dev".into(),
            profile_name: "default".into(),
        };
        compile(&fragment.hook.with_protected(&fragment.filesystem.protected), &context).expect("builtin compiles")
    })
}

fuzz_target!(|data: &[u8]| {
    let command = String::from_utf8_lossy(data);
    let verdict =
        stepproof_hook::check_tool(policy(), "Bash", &serde_json::json!({ "command": command }));
    assert!(!verdict.rule_id.is_empty());
});
