//! The last screen with the real Claude Code (2.1.328) against the mock Messages API: at the
//! end of a run StepProof says in one line what the hook denied and asked, where the record is
//! (`stepproof audit show …`) and how to go on with the session Claude Code named
//! (`stepproof-run -- claude --resume <id>`); `stepproof state show` says the same for the
//! workspace's last run. As root and as the dedicated unprivileged user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;

use e2e::*;
use serde_json::json;
use support::*;

both_claude!(
    the_run_ends_with_what_was_denied_and_how_to_go_on,
    |w: &World| {
        let mock = Mock::start(
            w,
            json!([bash("curl -s http://127.0.0.2:9/x"), text("fin")]),
        );
        let run = run_claude(w, &profile(w, &mock, true, ""), &[]);
        assert!(run.status.success(), "{}", run.describe());
        let session = run
            .audit
            .iter()
            .filter(|r| r["source"] == "sandbox")
            .find_map(|r| r["reported"]["session_id"].as_str())
            .unwrap_or_else(|| panic!("no session in the record: {}", run.describe()))
            .to_string();
        let said = format!(
            "stepproof-run: 1 call denied, 0 calls asked · the record: stepproof audit show {} · to go on: stepproof-run -- claude --resume {session}",
            run.audit_path.display()
        );
        assert!(run.stderr.contains(&said), "{said}\n{}", run.describe());
        // `stepproof state show` says the same of the workspace's last run.
        let program = match w.who {
            Who::Root => std::path::PathBuf::from(STEPPROOF),
            Who::User => w.run_binary().with_file_name("stepproof"),
        };
        let mut cmd = w.as_owner(&program);
        cmd.args(["state", "show"]);
        w.clean_env(&mut cmd);
        let out = cmd.output().unwrap();
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            shown.contains(&format!(
                "last run:  1 call denied, 0 calls asked · the record: stepproof audit show {}",
                run.audit_path.display()
            )) && shown.contains(&format!("--resume {session}")),
            "{}",
            describe(&out)
        );
    }
);
