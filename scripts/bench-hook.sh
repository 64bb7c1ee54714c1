#!/usr/bin/env bash
# Whole-process time of stepproof-hook against a trivial static stub (reads stdin, prints a
# fixed answer), with compiled policies of 10, 200 and 2,000 (synthetic) rules and the built-in
# default profile. Medians of interleaved runs (stub, hook-10, hook-200, hook-2000,
# hook-default, stub, …), printed as ratios. Target: <= 1.3x the stub at 200 rules. The input
# is a PreToolUse Bash call (`cargo test --workspace 2>&1 | tail -20`) that every policy allows.
# The policies are in the hook's binary format (`stepproof_hook::load`), written by the same
# encoder as the supervisor's. Measured on the reference machine (README, "Benchmarks"), 200
# rules: 1.15-1.17x just installed, 1.27-1.31x paged in from disk. What is left is mostly the
# page faults of a larger binary, not the policy; the hook has its own C `main`, without std's
# runtime start (hooks/src/main.rs).
#
# The hook is linked statically and not position-independent (glibc, `-C
# target-feature=+crt-static -C relocation-model=static`: a static-pie binary spends its
# start applying relocations), with an explicit --target so that build scripts and proc
# macros stay dynamic; release profile; as scripts/build-release builds it.
#
# Both binaries are timed as installed copies, side by side in one directory beside the build:
# scripts/install puts the hook in place with `install -m 0755` (from build-release's `cp`),
# and that copy is what StepProof runs. How fast a binary starts depends on how its page cache
# was filled: written front to back by install(1), it takes fewer page faults than when the
# linker has just written it, or when exec has paged it back in from disk (after a reboot or
# memory pressure). So there are two tables: "just installed", then the same files with their
# page cache dropped and paged in again by a first run. Timing the linker's output (as this
# script did before) gives about the second table's ratios.
#
# "200 rules + runbook": the same 200-rule policy with a runbook step open, i.e. a `runbook/`
# directory beside the policy holding `policy-0` (a 10-rule step policy the hook intersects
# with the profile's, then the missing `policy-1` ends the list), against the 200-rule policy
# without a runbook (one failed open of `runbook/policy-0`). Target: within 5 %.
#
# usage: scripts/bench-hook.sh [RUNS]   (default 200; env CARGO_TARGET_DIR is honoured)
set -euo pipefail

runs="${1:-200}"
root="$(cd "$(dirname "$0")/.." && pwd)"
here="$root/scripts/bench-hook"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
triple="x86_64-unknown-linux-gnu"

echo "building the static hook (release, +crt-static, non-PIE)…" >&2
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" CARGO_TARGET_DIR="$target_dir/bench-static" \
    cargo build --quiet --release -p stepproof-hook --bin stepproof-hook --target "$triple" \
    --manifest-path "$root/Cargo.toml"
built="$target_dir/bench-static/$triple/release/stepproof-hook"
if ldd "$built" >/dev/null 2>&1; then
    echo "warning: $built is not statically linked" >&2
fi

gcc -static -O2 -o "$work/stub" "$here/stub.c"
gcc -O2 -o "$work/runner" "$here/runner.c"

# Both as installed (see the header): the stub gets the same treatment as the hook.
installed="$target_dir/bench-static/installed"
mkdir -p "$installed"
rm -f "$installed/stepproof-hook" "$installed/stub"
install -m 0755 "$built" "$installed/stepproof-hook"
install -m 0755 "$work/stub" "$installed/stub"
hook="$installed/stepproof-hook"
stub_bin="$installed/stub"

echo "writing policies…" >&2
for n in 10 200 2000 default; do
    CARGO_TARGET_DIR="$target_dir" cargo run --quiet --manifest-path "$root/Cargo.toml" \
        -p stepproof-hook --example bench_policy -- "$n" /work/project > "$work/policy-$n"
done

# A run with a runbook: the profile's policy and, beside it, the open step's.
mkdir -p "$work/with-runbook/runbook"
cp "$work/policy-200" "$work/with-runbook/policy"
cp "$work/policy-10" "$work/with-runbook/runbook/policy-0"

cat > "$work/input.json" <<'JSON'
{"session_id":"bench","transcript_path":"/tmp/t.jsonl","cwd":"/work/project","hook_event_name":"PreToolUse","permission_mode":"default","tool_name":"Bash","tool_input":{"command":"cargo test --workspace 2>&1 | tail -20","description":"Run the tests"},"tool_use_id":"toolu_bench"}
JSON

# Sanity: the hook allows the benchmark's input with every policy.
for n in 10 200 2000 default; do
    "$hook" --policy "$work/policy-$n" < "$work/input.json" | grep -q '"allow"' \
        || { echo "the hook did not allow the benchmark input with $n rules" >&2; exit 1; }
done
"$hook" --policy "$work/with-runbook/policy" < "$work/input.json" | grep -q '"allow"' \
    || { echo "the hook did not allow the benchmark input with a runbook step open" >&2; exit 1; }

# One interleaved series; prints the table under the title $1.
measure() {
    local medians stub i n label
    mapfile -t medians < <("$work/runner" "$runs" "$work/input.json" \
        "$stub_bin" :: \
        "$hook" --policy "$work/policy-10" :: \
        "$hook" --policy "$work/policy-200" :: \
        "$hook" --policy "$work/policy-2000" :: \
        "$hook" --policy "$work/policy-default" :: \
        "$hook" --policy "$work/with-runbook/policy")
    stub="${medians[0]}"
    printf '%s: %s runs interleaved, medians of whole-process wall time\n' "$1" "$runs"
    printf '%-16s %10s us\n' "stub (static C)" "$stub"
    i=1
    for n in 10 200 2000 default; do
        label="hook, $n rules"
        [ "$n" = default ] && label="hook, default"
        # The hook's own time: what it costs beyond a process that does nothing (exec, a read,
        # a write, exit), i.e. its policy load, parse and judgement.
        printf '%-16s %10s us  %5.2fx the stub, own %6.1f us (policy %s bytes)\n' "$label" \
            "${medians[$i]}" \
            "$(awk -v a="${medians[$i]}" -v b="$stub" 'BEGIN { print a / b }')" \
            "$(awk -v a="${medians[$i]}" -v b="$stub" 'BEGIN { print a - b }')" \
            "$(stat -c %s "$work/policy-$n")"
        i=$((i + 1))
    done
    # A runbook step open against the same 200 rules without a runbook.
    printf '%-16s %10s us  %5.2fx the stub, %5.3fx hook-200 without a runbook (target <= 1.05)\n' \
        "200 + runbook" "${medians[$i]}" \
        "$(awk -v a="${medians[$i]}" -v b="$stub" 'BEGIN { print a / b }')" \
        "$(awk -v a="${medians[$i]}" -v b="${medians[2]}" 'BEGIN { print a / b }')"
}

measure "just installed"

# The same files once their page cache is dropped and a first run has paged them back in, as
# after a reboot or memory pressure.
for f in "$stub_bin" "$hook"; do
    sync "$f"
    dd if="$f" iflag=nocache count=0 status=none
    if command -v fincore >/dev/null && [ "$(fincore --raw --noheadings --output PAGES "$f")" != 0 ]; then
        echo "warning: could not drop the page cache of $f; the second table is not from disk" >&2
    fi
done
"$stub_bin" < "$work/input.json" > /dev/null
"$hook" --policy "$work/policy-200" < "$work/input.json" > /dev/null
echo
measure "paged in from disk"
