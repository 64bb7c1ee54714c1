#!/usr/bin/env bash
# Claude Code benchmark: `claude -p` on a trivial prompt against a local mock of the Messages API
# (scripts/mock-anthropic.py on loopback), bare and under StepProof, interleaved:
#   bare       claude -p … with the mock as ANTHROPIC_BASE_URL and an API key
#   default    stepproof-run --workspace WS -- claude -p …   (the built-in default profile: the
#              login stays outside, Claude Code reaches the mock through StepProof's gateway)
#   runbook    the same with a runbook open (--runbook, examples/runbooks/fix-bug.toml)
# and, for the breakdown (as root: each needs a private mount namespace whose /etc has
# StepProof's managed settings laid over it; the bare variant is then started the same way):
#   bare-ns    bare Claude Code started that way, with nothing laid over /etc (their baseline)
#   managed    bare Claude Code, with StepProof's managed settings but no hook registered
#              (what Claude Code does differently because a machine has managed settings)
#   hooks      the same with StepProof's hook registrations, each running /bin/true (the
#              cost of a hook process per event on Claude Code's side, without the hook's work)
# Both see the same HOME (a fresh one made here, kept for the whole run, so sessions accumulate
# alike) and the same workspace (a small git checkout).
#
# Each launch is timed by scripts/bench-timer.c (fork to wait, CLOCK_MONOTONIC). The mock stamps
# every request it receives, so each run splits into three phases:
#   start→request   from the launch to the first /v1/messages request at the mock
#   requests        from the first request to the last one
#   reply→exit      from the last request to the end of the launch (the answer streamed,
#                   Claude Code's shutdown, and under StepProof the supervisor's work after it)
# Printed: median, p10, p90 of each variant, the medians of the phases, the ratios of medians;
# and, from the audit log of each StepProof run, the hook processes per event (how many, and the
# median gap from Claude Code's start to each event's record).
#
# Environment:
#   ROUNDS (15)        interleaved rounds; the variant order rotates every round
#   VARIANTS ("bare default runbook", "bare-ns managed hooks" as root, "base-default" with
#                      BASELINE_RUN)
#   BASELINE_RUN ("")  another stepproof-run (an earlier build, its stepproof-hook beside it):
#                      timed as `base-default` in the same rounds, its ratio to `default` printed
#   STEPPROOF_RUN      path to stepproof-run (stepproof-hook beside it); default: built as
#                      scripts/install does (scripts/build-release)
#   CLAUDE             Claude Code's binary (default: `command -v claude`)
#   PROMPT ("Say ok.")
#
# Exit status: 0 when the benchmark ran, non-zero when the set-up failed or a run did not exit 0.
set -euo pipefail

ROUNDS=${ROUNDS:-15}
if [[ -z ${VARIANTS:-} ]]; then
    VARIANTS="bare default runbook"
    if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null; then
        VARIANTS+=" bare-ns managed hooks"
    fi
    [[ -n ${BASELINE_RUN:-} ]] && VARIANTS+=" base-default"
fi
PROMPT=${PROMPT:-Say ok.}

die() {
    echo "bench-claude: $*" >&2
    exit 1
}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer (got '$ROUNDS')"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=$(mktemp -d /tmp/stepproof-bench-claude.XXXXXX)
mock_pid=
cleanup() {
    [[ -n $mock_pid ]] && kill "$mock_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

claude_bin=${CLAUDE:-$(command -v claude || true)}
[[ -n $claude_bin && -x $claude_bin ]] || die "Claude Code not found (npm install -g @anthropic-ai/claude-code@2.1.328, or set CLAUDE)"
claude_bin=$(readlink -f "$claude_bin")
command -v python3 >/dev/null || die "python3 not found (the mock API is a Python script)"
command -v gcc >/dev/null || die "gcc not found (needed for the launch timer)"
gcc -O2 -Wall -o "$work/timer" "$here/bench-timer.c" || die "compiling the timer failed"

if [[ -n ${STEPPROOF_RUN:-} ]]; then
    [[ -x $STEPPROOF_RUN ]] || die "STEPPROOF_RUN=$STEPPROOF_RUN is not executable"
    stepproof_bin=$(readlink -f "$STEPPROOF_RUN")
else
    command -v cargo >/dev/null || die "cargo not found (or set STEPPROOF_RUN=/path/to/stepproof-run)"
    echo "building the release binaries as scripts/install does (scripts/build-release) …" >&2
    built=$("$root/scripts/build-release") || die "cargo build failed"
    stepproof_bin=$built/stepproof-run
fi

# --- the mock, the home, the workspace -------------------------------------------------------
echo '[]' >"$work/turns.json"
requests=$work/requests.jsonl
: >"$requests"
python3 "$here/mock-anthropic.py" --script "$work/turns.json" --record "$requests" \
    --host 127.0.0.1 --port 0 >"$work/mock.out" 2>"$work/mock.err" &
mock_pid=$!
for _ in $(seq 1 100); do
    grep -q '^listening on ' "$work/mock.out" 2>/dev/null && break
    sleep 0.05
done
port=$(sed -n 's/^listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$work/mock.out")
[[ -n $port ]] || die "the mock did not start: $(cat "$work/mock.err")"

home=$work/home
ws=$work/workspace
mkdir -p "$home" "$ws/src"
printf 'fn main() {\n    println!("hello");\n}\n' >"$ws/src/main.rs"
printf '[package]\nname = "bench"\nversion = "0.1.0"\nedition = "2021"\n' >"$ws/Cargo.toml"
git -C "$ws" init -q
git -C "$ws" -c user.name=bench -c user.email=bench@localhost add -A
git -C "$ws" -c user.name=bench -c user.email=bench@localhost commit -q -m init
runbook=$root/examples/runbooks/fix-bug.toml
[[ -f $runbook ]] || die "$runbook missing"

# The caller's environment is not used: each variant gets exactly this one.
base_env=(PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" TERM=dumb LANG=C.UTF-8
    ANTHROPIC_BASE_URL="http://127.0.0.1:$port" ANTHROPIC_API_KEY=sk-ant-bench-0000
    CLAUDE_CODE_MAX_RETRIES=1)
claude_cmd=("$claude_bin" -p "$PROMPT" --output-format text)
audits=$work/audits
mkdir -p "$audits"

# The breakdown's managed settings: StepProof's own (as a default run sees them), without the
# hooks (`managed`) or with each hook's command replaced by /bin/true (`hooks`), laid over /etc.
layered=()
if [[ " $VARIANTS " =~ \ (managed|hooks|bare-ns)\  ]]; then
    [[ $(id -u) == 0 ]] || die "the managed and hooks variants need root (a mount namespace with /etc overlaid)"
    (cd "$ws" && env -i "${base_env[@]}" "$stepproof_bin" --workspace "$ws" --audit-log /dev/null \
        -- /bin/cat /etc/claude-code/managed-settings.json) >"$work/ours.json" 2>/dev/null ||
        die "reading StepProof's managed settings failed"
    for v in managed hooks; do
        mkdir -p "$work/etc-$v/claude-code"
        python3 - "$v" "$work/ours.json" "$work/etc-$v/claude-code/managed-settings.json" <<'PY'
import json, sys
variant, ours, out = sys.argv[1:4]
settings = json.load(open(ours))
if variant == "managed":
    settings.pop("hooks", None)
else:
    for groups in settings.get("hooks", {}).values():
        for group in groups:
            for hook in group.get("hooks", []):
                hook["command"], hook["args"] = "/bin/true", []
# The variables StepProof pins inside mean nothing outside (its PATH, its sandbox's paths).
settings.pop("env", None)
json.dump(settings, open(out, "w"))
PY
    done
    # layered LAYER CMD…: CMD with LAYER laid over /etc, in a private mount namespace.
    layered=("$(command -v unshare)" -m --propagation private /bin/sh -c 'mount -t overlay overlay -o "lowerdir=$0:/etc" /etc && exec "$@"')
    mkdir -p "$work/etc-none"
fi

# run VARIANT N: one timed launch; appends "variant ns start_ms end_ms" to $results.
run() {
    local v=$1 n=$2 cmd
    case $v in
    bare) cmd=("${claude_cmd[@]}") ;;
    # The breakdown's baseline is started as its variants are (the namespace's cost in each).
    bare-ns) cmd=("${layered[@]}" "$work/etc-none" "${claude_cmd[@]}") ;;
    managed | hooks) cmd=("${layered[@]}" "$work/etc-$v" "${claude_cmd[@]}") ;;
    default) cmd=("$stepproof_bin" --workspace "$ws" --audit-log "$audits/$v-$n.jsonl" -- "${claude_cmd[@]}") ;;
    base-default)
        [[ -x ${BASELINE_RUN:-} ]] || die "base-default needs BASELINE_RUN=/path/to/stepproof-run"
        cmd=("$BASELINE_RUN" --workspace "$ws" --audit-log "$audits/$v-$n.jsonl" -- "${claude_cmd[@]}")
        ;;
    runbook) cmd=("$stepproof_bin" --workspace "$ws" --audit-log "$audits/$v-$n.jsonl"
        --runbook "$runbook" --runbook-fresh -- "${claude_cmd[@]}") ;;
    *) die "unknown variant $v" ;;
    esac
    # An open runbook's run ends with its steps open: exit 116, as documented.
    local out expect=0
    [[ $v == runbook ]] && expect=116
    out=$(cd "$ws" && env -i "${base_env[@]}" TIMER_WALL=1 TIMER_EXPECT=$expect "$work/timer" 1 "${cmd[@]}") || {
        echo "bench-claude: the $v variant failed; its output:" >&2
        (cd "$ws" && env -i "${base_env[@]}" "${cmd[@]}" </dev/null) >&2 || true
        exit 1
    }
    echo "$v $out" >>"$results"
}

read -r -a variants <<<"$VARIANTS"
results=$work/results
: >"$results"
echo "warming up …" >&2
for v in "${variants[@]}"; do run "$v" warm; done
: >"$results"
count=${#variants[@]}
echo "$ROUNDS rounds, order rotating …" >&2
for ((r = 0; r < ROUNDS; r++)); do
    for ((i = 0; i < count; i++)); do
        run "${variants[$(((i + r) % count))]}" "$r"
    done
    if (((r + 1) % 5 == 0 || r + 1 == ROUNDS)); then echo "  round $((r + 1))/$ROUNDS" >&2; fi
done

# --- statistics ----------------------------------------------------------------------------
# The phases of each run: the mock's request stamps that fall inside its wall-clock window.
python3 - "$results" "$requests" "$audits" "$ROUNDS" "${variants[@]}" <<'PY'
import json, os, statistics, sys

results, requests, audits, rounds = sys.argv[1:5]
variants = sys.argv[5:]
stamps = []
with open(requests) as f:
    for line in f:
        r = json.loads(line)
        if r.get("path", "").startswith("/v1/messages") and "t_ms" in r:
            stamps.append(r["t_ms"])
stamps.sort()

runs = {v: [] for v in variants}
with open(results) as f:
    for n, line in enumerate(f):
        v, ns, start, end = line.split()
        start, end = float(start), float(end)
        inside = [t for t in stamps if start <= t <= end]
        runs[v].append({"ms": int(ns) / 1e6, "start": start, "end": end, "req": inside})

def q(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = p * (len(xs) - 1)
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (k - lo) * (xs[hi] - xs[lo])

print(f"kernel {os.uname().release}, {os.cpu_count()} CPUs; {rounds} interleaved rounds;")
print("wall time of one `claude -p` launch, ms")
print(f"{'variant':<9} {'n':>3} {'median':>8} {'p10':>8} {'p90':>8}  {'start→request':>13} {'requests':>9} {'reply→exit':>10} {'requests/run':>12}")
med = {}
for v in variants:
    rs = runs[v]
    ms = [r["ms"] for r in rs]
    med[v] = q(ms, 0.5)
    ok = [r for r in rs if r["req"]]
    first = q([r["req"][0] - r["start"] for r in ok], 0.5)
    span = q([r["req"][-1] - r["req"][0] for r in ok], 0.5)
    tail = q([r["end"] - r["req"][-1] for r in ok], 0.5)
    nreq = q([len(r["req"]) for r in rs], 0.5)
    print(f"{v:<9} {len(rs):>3} {med[v]:>8.1f} {q(ms, .1):>8.1f} {q(ms, .9):>8.1f}  {first:>13.1f} {span:>9.1f} {tail:>10.1f} {nreq:>12.0f}")

# Hook processes, from the audit logs: which events ran the hook, how often per run.
for v in variants:
    if v in ("bare", "bare-ns", "managed", "hooks"):
        continue
    per_event = {}
    nruns = 0
    for name in sorted(os.listdir(audits)):
        if not name.startswith(v + "-") or name.endswith("-warm.jsonl"):
            continue
        nruns += 1
        seen = {}
        with open(os.path.join(audits, name)) as f:
            for line in f:
                rec = json.loads(line)
                if rec.get("source") == "sandbox":
                    ev = (rec.get("reported") or {}).get("event") or rec.get("kind")
                    seen[ev] = seen.get(ev, 0) + 1
        for ev, c in seen.items():
            per_event[ev] = per_event.get(ev, 0) + c
    if nruns:
        listed = ", ".join(f"{ev} {c / nruns:.1f}" for ev, c in sorted(per_event.items()))
        print(f"{v}: hook records per run: {listed or 'none'}")

print()
print("ratios of medians:")
for v in variants:
    base = "bare-ns" if v in ("managed", "hooks") else "bare"
    if v not in ("bare", "bare-ns") and base in med:
        print(f"  {v}/{base}  {med[v] / med[base]:.3f}  ({med[v] - med[base]:+.1f} ms)")
if "default" in med and "base-default" in med:
    print(f"  default/base-default  {med['default'] / med['base-default']:.3f}  ({med['default'] - med['base-default']:+.1f} ms: this build against BASELINE_RUN)")
if "default" in med and "bare" in med:
    verdict = "MET" if med["default"] <= 1.05 * med["bare"] else "NOT MET"
    print(f"target: default within 5 % of bare: {verdict}")
PY
