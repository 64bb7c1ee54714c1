#!/usr/bin/env bash
# Whole-process time of stepproof-hook as each observer event, with a runbook open (the
# built-in default profile's policy, a `runbook/` directory beside it with a five-step
# `state.json` and one open step's policy, as the supervisor publishes them), against the
# trivial static stub of scripts/bench-hook. Target (RUNBOOKS.md, "Speed"): each observer
# answers in under 2 ms, spawn included. Medians of interleaved runs.
#
# The hook is built as scripts/bench-hook.sh builds it (static, non-PIE, release) and timed as
# an installed copy. Records go to a local audit socket (a small listener that reads and drops
# them), as inside a run. UserPromptSubmit is timed twice: a session's first prompt (no marker
# under CLAUDE_CONFIG_DIR: the whole orientation, and the marker written) and a later one (the
# marker says the session is oriented: one line).
#
# usage: scripts/bench-observers.sh [RUNS]   (default 300; env CARGO_TARGET_DIR is honoured)
set -euo pipefail

runs="${1:-300}"
root="$(cd "$(dirname "$0")/.." && pwd)"
here="$root/scripts/bench-hook"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
listener=""
cleanup() {
    if [ -n "$listener" ]; then kill "$listener" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT
triple="x86_64-unknown-linux-gnu"

echo "building the static hook (release, +crt-static, non-PIE)…" >&2
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" CARGO_TARGET_DIR="$target_dir/bench-static" \
    cargo build --quiet --release -p stepproof-hook --bin stepproof-hook --target "$triple" \
    --manifest-path "$root/Cargo.toml"
built="$target_dir/bench-static/$triple/release/stepproof-hook"
gcc -static -O2 -o "$work/stub" "$here/stub.c"
gcc -O2 -o "$work/runner" "$here/runner.c"
installed="$target_dir/bench-static/installed"
mkdir -p "$installed"
rm -f "$installed/stepproof-hook" "$installed/stub"
install -m 0755 "$built" "$installed/stepproof-hook"
install -m 0755 "$work/stub" "$installed/stub"
hook="$installed/stepproof-hook"
stub="$installed/stub"

# The run's control directory as the hook sees it: the profile's policy, the runbook beside it.
control="$work/control"
mkdir -p "$control/runbook"
CARGO_TARGET_DIR="$target_dir" cargo run --quiet --manifest-path "$root/Cargo.toml" \
    -p stepproof-hook --example bench_policy -- default /work/project > "$control/policy"
CARGO_TARGET_DIR="$target_dir" cargo run --quiet --manifest-path "$root/Cargo.toml" \
    -p stepproof-hook --example bench_policy -- 10 /work/project > "$control/runbook/policy-0"
python3 - "$control/runbook/state.json" <<'PY'
import json, sys
steps = []
for n, (sid, status) in enumerate([("plan", "passed"), ("migrate", "open"), ("test", "waiting"),
                                    ("docs", "waiting"), ("pr", "waiting")]):
    steps.append({
        "id": sid, "title": f"Step {n}: {sid}", "status": status, "attempts": 1 if status != "waiting" else 0,
        "max_attempts": 3, "depends_on": [] if n == 0 else [steps[-1]["id"]],
        "instructions": "Write db/migrations/0007_orders.sql from docs/schema.md. " * 8,
        "acceptance": ["The migration applies to an empty database.", "It can be rolled back."],
        "allows": "only bash `sqlite3 *`, `cargo test *`; writing `db/**`; other kinds as the profile says",
        "denied_words": ["git push", "rm", "curl"], "last_verdict": "passed" if status == "passed" else None,
    })
state = {"runbook": "schema-migration", "title": "Add the orders table", "hash": "sha256:" + "0" * 64,
         "open": ["migrate"], "ended": None, "steps": steps}
json.dump(state, open(sys.argv[1], "w"), indent=2)
PY

# A listener for the records (read and dropped), as the supervisor's audit socket.
socket="$work/audit.sock"
python3 - "$socket" <<'PY' &
import socket, sys, threading
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(128)
def drain(c):
    while c.recv(65536):
        pass
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=drain, args=(c,), daemon=True).start()
PY
listener=$!
for _ in $(seq 50); do [ -S "$socket" ] && break; sleep 0.1; done

config="$work/claude-config"
mkdir -p "$config"
session="8f2c1d3e-5b7a-4c9e-9f1a-2d3e4f5a6b7c"
input() { # EVENT EXTRA-JSON
    printf '{"session_id":"%s","transcript_path":"/tmp/t.jsonl","cwd":"/work/project","hook_event_name":"%s"%s}\n' \
        "$session" "$1" "$2" > "$work/$1$3.json"
}
input SessionStart ',"source":"startup"' ""
input UserPromptSubmit ',"prompt":"then git push it to origin"' ""
input PreCompact ',"trigger":"manual","custom_instructions":""' ""
input SubagentStart ',"agent_id":"agent-7","agent_type":"Explore"' ""
input SessionEnd ',"reason":"prompt_input_exit"' ""
input PostToolUse ',"tool_name":"Bash","tool_input":{"command":"cargo test"},"tool_use_id":"t","tool_response":{"stdout":"ok","stderr":""},"duration_ms":900' ""

# Sanity: each answers, exit 0; the prompt's context holds the orientation the first time only.
for event in SessionStart PreCompact UserPromptSubmit SubagentStart SessionEnd PostToolUse; do
    CLAUDE_CONFIG_DIR="$config" "$hook" --policy "$control/policy" --audit-socket "$socket" \
        --event "$event" < "$work/$event.json" > "$work/$event.out"
done
grep -q 'Instructions: Write db/migrations' "$work/UserPromptSubmit.out" \
    || { echo "the first prompt was not oriented" >&2; exit 1; }
CLAUDE_CONFIG_DIR="$config" "$hook" --policy "$control/policy" --event UserPromptSubmit \
    < "$work/UserPromptSubmit.json" | grep -q 'Instructions:' \
    && { echo "a later prompt was oriented again" >&2; exit 1; }

# One series per event: stub, hook. "no marker dir": without CLAUDE_CONFIG_DIR every prompt
# carries the whole orientation (the first prompt's work, without the marker's write).
measure() { # LABEL INPUT CONFIG
    local medians
    local env=(env CLAUDE_CONFIG_DIR="$3")
    [ -z "$3" ] && env=(env -u CLAUDE_CONFIG_DIR)
    mapfile -t medians < <("${env[@]}" "$work/runner" "$runs" "$2" \
        "$stub" :: \
        "$hook" --policy "$control/policy" --audit-socket "$socket")
    printf '%-34s %7s us  (stub %4s us, own %6.1f us)\n' "$1" "${medians[1]}" "${medians[0]}" \
        "$(awk -v a="${medians[1]}" -v b="${medians[0]}" 'BEGIN { print a - b }')"
    awk -v a="${medians[1]}" 'BEGIN { exit !(a < 2000) }' \
        || echo "  ^ over the 2 ms target" >&2
}
printf 'observers with a runbook open, %s runs interleaved with the stub, median whole-process wall time\n' "$runs"
measure "SessionStart (not registered)" "$work/SessionStart.json" "$config"
measure "UserPromptSubmit, oriented before" "$work/UserPromptSubmit.json" "$config"
measure "UserPromptSubmit, no marker dir" "$work/UserPromptSubmit.json" ""
measure "PreCompact" "$work/PreCompact.json" "$config"
measure "SubagentStart" "$work/SubagentStart.json" "$config"
measure "SessionEnd" "$work/SessionEnd.json" "$config"
measure "PostToolUse (Bash)" "$work/PostToolUse.json" "$config"
