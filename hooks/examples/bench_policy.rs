//! Writes a compiled policy with N rules for `scripts/bench-hook.sh`, in the file format the
//! supervisor writes (`stepproof_hook::load::encode`):
//! `cargo run --example bench_policy -- N|default WORKSPACE > policy`.
//!
//! The rules are synthetic but shaped like real ones (command patterns with wildcards, path
//! globs, domains, tool names); one rule allows what the benchmark's input runs.

use stepproof_hook::Decision;
use stepproof_hook::config::{Access, BashRule, FileRule, HookConfig, ToolRule, WebRule};
use stepproof_hook::policy::{Context, compile};

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

fn main() {
    let mut args = std::env::args().skip(1);
    let first = args.next().unwrap_or_else(|| "200".into());
    let workspace = args.next().unwrap_or_else(|| "/work/project".into());
    if first == "default" {
        // The built-in default profile, as a realistic policy.
        let fragment: Fragment =
            toml::from_str(stepproof_hook::BUILTIN_DEFAULT).expect("the built-in profile parses");
        let context = Context {
            workspace: workspace.into(),
            home: "/home/dev".into(),
            profile_name: "default".into(),
        };
        let policy = compile(
            &fragment.hook.with_protected(&fragment.filesystem.protected),
            &context,
        )
        .expect("the built-in profile compiles");
        write(&policy);
        return;
    }
    let count: usize = first.parse().unwrap_or(200);
    let mut config = HookConfig {
        default: Some(Decision::Deny),
        bash: vec![BashRule {
            id: "build-test".into(),
            reason: "building and testing".into(),
            decision: Decision::Allow,
            commands: vec!["cargo test *".into(), "tail *".into()],
            env: vec![],
            changes_nothing: false,
            except_disposable: false,
        }],
        ..HookConfig::default()
    };
    for i in 1..count {
        let id = format!("rule-{i}");
        let reason = format!("synthetic rule {i}");
        let decision = if i % 3 == 0 {
            Decision::Deny
        } else {
            Decision::Allow
        };
        match i % 5 {
            0..=2 => config.bash.push(BashRule {
                id,
                reason,
                decision,
                commands: vec![
                    format!("tool{i} sub{i} *"),
                    format!("tool{i} * --flag{i}* *"),
                ],
                env: vec![],
                changes_nothing: false,
                except_disposable: false,
            }),
            3 => config.files.push(FileRule {
                id,
                reason,
                decision,
                access: if i % 2 == 0 {
                    Access::Read
                } else {
                    Access::Write
                },
                paths: vec![format!("dir{i}/**/*.rs"), format!("/abs{i}/**")],
            }),
            _ => {
                if i % 2 == 0 {
                    config.web.push(WebRule {
                        id,
                        reason,
                        decision,
                        domains: vec![format!("*.site{i}.example")],
                    });
                } else {
                    config.tools.push(ToolRule {
                        id,
                        reason,
                        decision,
                        names: vec![format!("mcp__server{i}__*")],
                    });
                }
            }
        }
    }
    let context = Context {
        workspace: workspace.into(),
        home: "/home/dev".into(),
        profile_name: format!("bench-{count}"),
    };
    let policy = compile(&config, &context).expect("the benchmark policy compiles");
    write(&policy);
}

fn write(policy: &stepproof_hook::policy::CompiledPolicy) {
    use std::io::Write;
    let bytes = stepproof_hook::load::encode(policy).expect("encodes");
    std::io::stdout()
        .write_all(&bytes)
        .expect("writes the policy to stdout");
}
