//! The one rule for tests that need something this machine lacks: say `skipped: <reason>`
//! locally, fail in CI. CI is any non-empty `CI` other than `0` or `false` (CI services set
//! `CI=true`; `CI=false` or `CI=0` is a local run saying so).

/// Whether this is a CI run.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// A test that needs something this machine lacks: says so locally, fails in CI.
pub fn skip_or_fail(reason: &str) {
    if in_ci() {
        panic!("required in CI but unavailable: {reason}");
    }
    eprintln!("skipped: {reason}");
}
