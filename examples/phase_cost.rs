use std::path::Path;
use std::time::Instant;
use stepproof::profile::Profile;
fn t<R>(name: &str, n: u32, mut f: impl FnMut() -> R) {
    let s = Instant::now();
    for _ in 0..n {
        std::hint::black_box(f());
    }
    println!(
        "{name:40} {:8.1} us",
        s.elapsed().as_secs_f64() * 1e6 / n as f64
    );
}
fn main() {
    extra();
    let p = Profile::builtin_default().unwrap();
    t("load default", 200, || Profile::builtin_default().unwrap());
    t("policy_hash", 200, || p.policy_hash());
    let ws = Path::new("/tmp/bws");
    let home = Path::new("/root");
    t("hook policy compile", 200, || {
        stepproof::sandbox::plan::hook_policy::compile_json(&p, p.hook.as_ref().unwrap(), home, ws)
            .unwrap()
    });
    let facts = stepproof::host::gather_facts(Some(ws), false).unwrap();
    t("gather_facts", 200, || {
        stepproof::host::gather_facts(Some(ws), false).unwrap()
    });
    t("build_plan", 200, || {
        stepproof::host::plan_for(&p, &facts).unwrap()
    });
    let plan = stepproof::host::plan_for(&p, &facts).unwrap();
    t("snapshot", 200, || {
        stepproof::supervisor::sweep::Snapshot::take(&plan)
    });
    let snap = stepproof::supervisor::sweep::Snapshot::take(&plan);
    let q = Path::new("/tmp/phase-q");
    t("sweep", 200, || snap.sweep(&p, &plan, q));
}
#[allow(dead_code)]
fn extra() {
    let text = include_str!("../profiles/default.toml");
    t("toml parse Value", 200, || {
        toml::from_str::<toml::Value>(text).unwrap()
    });
    let v: toml::Value = toml::from_str(text).unwrap();
    let j = serde_json::to_string(&v).unwrap();
    t("json parse Value", 200, || {
        serde_json::from_str::<serde_json::Value>(&j).unwrap()
    });
}
