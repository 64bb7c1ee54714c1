//! Unit tests of the engine's pure parts: which steps a step rests on, the globs a step names
//! as its work, and the output tail.

use super::command::tail;
use super::invariants::work_globs;
use super::opening::{rests_on, verifier_rests_on};
use crate::runbook::Runbook;

const RUNBOOK: &str = r#"
id = "r"
title = "t"
owner = "o"

[verifiers]
tier2 = ["verifier-fast"]

[[steps]]
id = "fix"
title = "Fix"
instructions = "i"
[[steps.evidence]]
files_changed = { paths = ["src/**"] }

[[steps]]
id = "review"
title = "Review"
instructions = "i"
depends_on = ["fix"]
[[steps.evidence]]
verifier = { tier = 2 }

[[steps]]
id = "aside"
title = "Aside"
instructions = "i"
[[steps.evidence]]
files_exist = { paths = ["notes.txt"] }
"#;

fn runbook() -> Runbook {
    crate::runbook::parse(RUNBOOK).expect("the test runbook parses")
}

fn index(runbook: &Runbook, id: &str) -> usize {
    runbook
        .steps
        .iter()
        .position(|s| s.id.as_str() == id)
        .expect("the step exists")
}

#[test]
fn a_step_rests_on_itself_then_its_dependencies() {
    let rb = runbook();
    let (fix, review, aside) = (index(&rb, "fix"), index(&rb, "review"), index(&rb, "aside"));
    assert_eq!(rests_on(&rb, review), vec![review, fix]);
    assert_eq!(rests_on(&rb, fix), vec![fix]);
    assert_eq!(rests_on(&rb, aside), vec![aside]);
}

#[test]
fn a_verifier_rests_on_its_step_and_the_steps_below_it_only() {
    let rb = runbook();
    assert!(verifier_rests_on(&rb, index(&rb, "review")));
    assert!(verifier_rests_on(&rb, index(&rb, "fix")));
    assert!(!verifier_rests_on(&rb, index(&rb, "aside")));
}

#[test]
fn the_work_of_a_step_is_what_its_files_changed_items_name() {
    let rb = runbook();
    assert_eq!(
        work_globs(&rb.steps[index(&rb, "fix")]),
        vec!["src/**".to_string()]
    );
    assert!(work_globs(&rb.steps[index(&rb, "aside")]).is_empty());
}

#[test]
fn the_tail_is_the_last_bytes_or_all_of_them() {
    assert_eq!(tail(b"abcdef", 2), b"ef");
    assert_eq!(tail(b"abc", 10), b"abc");
    assert_eq!(tail(b"", 3), b"");
    assert_eq!(tail(b"abc", 0), b"");
}
