#!/usr/bin/env bash
# Launch benchmark: the wall time of one launch of `/bin/true`, three ways, interleaved:
#   bare       /bin/true itself (fork + exec + wait: the floor)
#   bwrap      bubblewrap with a view comparable to stepproof-run's default profile
#              (installed from Debian's packages when missing; a baseline only)
#   stepproof  stepproof-run --workspace WS -- /bin/true
# Each launch is timed individually (CLOCK_MONOTONIC around fork/exec/wait) by a small C
# timer compiled here, so no shell or interpreter overhead lands in the figures. Every run
# is non-interactive (stdin and stdout are /dev/null: stepproof-run makes no PTY) and starts
# in the workspace, a fresh temporary directory.
#
# Prints median, p10 and p90 per variant (ms) and the ratios stepproof/bare, bwrap/bare and
# stepproof/bwrap. Target: stepproof-run below bubblewrap.
#
# Environment:
#   ROUNDS (30)          interleaved rounds; the variant order rotates every round
#   RUNS_PER_ROUND (5)   launches of each variant per round, each timed on its own
#   STEPPROOF_RUN        path to stepproof-run (the default variant needs stepproof-hook
#                        beside it); default: build all three as scripts/install does
#                        (scripts/build-release, in CARGO_TARGET_DIR or the workspace's target/)
#   PIN_CPU ("")         CPU to pin every launch to with taskset; "" = no pinning
#   BASELINE_RUN ("")    another stepproof-run (an earlier build, with its stepproof-hook
#                        beside it): its core and default profiles are timed in the same
#                        interleaved rounds (`base-core`, `base-default`) and the differences
#                        printed, in ms
#   WORKSPACE ("empty")  "empty": a fresh temporary directory; "realistic": a checkout of
#                        5 nested git repositories and 50,000 entries (what the launch's scan
#                        and the sweep after the run walk)
#
# Exit status: 0 when the benchmark ran (whether or not the target is met), non-zero when
# the set-up failed (no compiler, no bubblewrap, a build error, a variant not exiting 0).
set -euo pipefail

ROUNDS=${ROUNDS:-30}
RUNS_PER_ROUND=${RUNS_PER_ROUND:-5}
PIN_CPU=${PIN_CPU:-}

die() {
    echo "bench-launch: $*" >&2
    exit 1
}

[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer (got '$ROUNDS')"
[[ $RUNS_PER_ROUND =~ ^[1-9][0-9]*$ ]] || die "RUNS_PER_ROUND must be a positive integer (got '$RUNS_PER_ROUND')"

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
work=$(mktemp -d /tmp/stepproof-bench-launch.XXXXXX)
trap 'rm -rf "$work"' EXIT
ws=$work/workspace
mkdir -p "$ws"
WORKSPACE=${WORKSPACE:-empty}
case $WORKSPACE in
empty) ;;
realistic)
    echo "making a realistic checkout: 5 nested repositories, 50,000 entries …" >&2
    git -C "$ws" init -q
    for r in app lib/core lib/util vendor/dep tools/gen; do
        mkdir -p "$ws/$r" && git -C "$ws/$r" init -q
    done
    for d in $(seq 1 50); do
        mkdir -p "$ws/src/m$d" "$ws/lib/core/src/m$d" "$ws/node_modules/p$d/lib"
        (cd "$ws/src/m$d" && seq 1 330 | sed 's/$/.rs/' | xargs touch)
        (cd "$ws/lib/core/src/m$d" && seq 1 330 | sed 's/$/.rs/' | xargs touch)
        (cd "$ws/node_modules/p$d/lib" && seq 1 330 | sed 's/$/.js/' | xargs touch)
    done
    mkdir -p "$ws/.github/workflows" "$ws/.vscode"
    echo 'on: push' >"$ws/.github/workflows/ci.yml"
    echo '{}' >"$ws/.vscode/settings.json"
    echo "  $(find "$ws" | wc -l) entries" >&2
    ;;
*) die "WORKSPACE must be empty or realistic (got '$WORKSPACE')" ;;
esac

# --- bubblewrap (baseline only) --------------------------------------------------------------
if ! command -v bwrap >/dev/null; then
    echo "bwrap missing: installing Debian's bubblewrap package …" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap >&2 ||
            die "apt-get install bubblewrap failed"
    fi
fi
bwrap_bin=$(command -v bwrap) || die "bwrap still not found after installing bubblewrap"

# --- stepproof-run ------------------------------------------------------------------------
if [[ -n ${STEPPROOF_RUN:-} ]]; then
    [[ -x $STEPPROOF_RUN ]] || die "STEPPROOF_RUN=$STEPPROOF_RUN is not executable"
    stepproof_bin=$STEPPROOF_RUN
else
    command -v cargo >/dev/null || die "cargo not found (or set STEPPROOF_RUN=/path/to/stepproof-run)"
    echo "building the release binaries as scripts/install does (scripts/build-release) …" >&2
    built=$("$root/scripts/build-release") || die "cargo build failed"
    stepproof_bin=$built/stepproof-run
fi

# --- the timer -----------------------------------------------------------------------------
# timer N CMD ARGS…: launches CMD N times (stdin, stdout and stderr on /dev/null), timing
# each launch from before fork() to after waitpid(); prints one duration in ns per line.
# Any launch that does not exit 0 is an error (exit 2).
command -v gcc >/dev/null || die "gcc not found (needed for the launch timer)"
gcc -O2 -Wall -o "$work/timer" "$here/bench-timer.c" || die "compiling the timer failed"

# --- the three commands ------------------------------------------------------------------
bare_cmd=(/bin/true)

# bwrap with the view stepproof-run's default profile gives (as root: uid/gid 1000 inside).
bwrap_cmd=("$bwrap_bin" --unshare-all --unshare-user --die-with-parent --new-session
    --uid 1000 --gid 1000 --cap-drop ALL)
for d in /usr /etc /opt; do
    [[ -d $d ]] && bwrap_cmd+=(--ro-bind "$d" "$d")
done
for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [[ -L $d ]]; then
        bwrap_cmd+=(--symlink "$(readlink "$d")" "$d")
    elif [[ -d $d ]]; then
        bwrap_cmd+=(--ro-bind "$d" "$d")
    fi
done
bwrap_cmd+=(--proc /proc --ro-bind /sys /sys --dev /dev --tmpfs /tmp --tmpfs /run)
home=${HOME:-/root}
[[ -d $home ]] && bwrap_cmd+=(--ro-bind "$home" "$home")
for s in .ssh .aws .gnupg .claude .claude.json .npmrc .netrc .git-credentials .config/gh \
    .docker .kube .pypirc .cargo/credentials .cargo/credentials.toml .bash_history; do
    p=$home/$s
    if [[ -d $p && ! -L $p ]]; then
        bwrap_cmd+=(--tmpfs "$p")
    elif [[ -f $p && ! -L $p ]]; then
        bwrap_cmd+=(--ro-bind /dev/null "$p")
    fi
done
bwrap_cmd+=(--bind "$ws" "$ws" --chdir "$ws" --clearenv
    --setenv PATH "/usr/local/bin:/usr/bin:/bin" --setenv HOME "$home"
    -- /bin/true)

# The comparable view: the built-in default profile's sandbox without what bubblewrap has no
# counterpart for (the hook and its agent state, the allow-list proxy). The full default profile
# is timed too, as `default`.
core_profile=$work/core.toml
sed -n '1,/^\[network\]/p' "$root/profiles/default.toml" | sed '$d' > "$core_profile"
printf '[network]\nmode = "none"\n' >> "$core_profile"
# An earlier build may not know keys the current default.toml has: its copy of the core profile
# drops each key it refuses (named in its error), so that both run the same view where they can.
compatible_profile() { # binary source destination
    cp "$2" "$3"
    local err key
    for _ in 1 2 3 4 5 6 7 8 9 10 11 12; do
        err=$("$1" --profile "$3" --audit-log /dev/null --workspace "$ws" -- /bin/true \
            2>&1 >/dev/null </dev/null) && return 0
        key=$(sed -n 's/.*unknown field `\([a-z_]*\)`.*/\1/p' <<<"$err" | head -1)
        [[ -n $key ]] || return 0
        echo "$(basename "$(dirname "$1")")/$(basename "$1"): its core profile drops \`$key\` (unknown to it)" >&2
        # The key's line, and for an array its lines up to the closing bracket.
        awk -v k="$key" '
            skip && /^\]/ { skip = 0; next }
            skip { next }
            $0 ~ "^" k " *=" { if ($0 ~ /\[ *$/) skip = 1; next }
            { print }' "$3" >"$3.new"
        mv "$3.new" "$3"
    done
}
compatible_profile "$stepproof_bin" "$core_profile" "$work/stepproof-core.toml"
stepproof_cmd=("$stepproof_bin" --profile "$work/stepproof-core.toml" --audit-log /dev/null --workspace "$ws" -- /bin/true)
default_cmd=("$stepproof_bin" --workspace "$ws" -- /bin/true)

pin=()
if [[ -n $PIN_CPU ]]; then
    command -v taskset >/dev/null || die "PIN_CPU set but taskset not found"
    pin=(taskset -c "$PIN_CPU")
fi

variants=(bare bwrap stepproof default)
if [[ -n ${BASELINE_RUN:-} ]]; then
    [[ -x $BASELINE_RUN ]] || die "BASELINE_RUN=$BASELINE_RUN is not executable"
    base_core_profile=$work/base-core.toml
    compatible_profile "$BASELINE_RUN" "$core_profile" "$base_core_profile"
    base_core_cmd=("$BASELINE_RUN" --profile "$base_core_profile" "${stepproof_cmd[@]:3}")
    base_default_cmd=("$BASELINE_RUN" "${default_cmd[@]:1}")
    variants+=(base-core base-default)
fi
cmd_of() { # variant -> sets the array $cmd
    case $1 in
    bare) cmd=("${bare_cmd[@]}") ;;
    bwrap) cmd=("${bwrap_cmd[@]}") ;;
    stepproof) cmd=("${stepproof_cmd[@]}") ;;
    default) cmd=("${default_cmd[@]}") ;;
    base-core) cmd=("${base_core_cmd[@]}") ;;
    base-default) cmd=("${base_default_cmd[@]}") ;;
    esac
}

echo "bwrap command line:"
printf ' '; printf ' %q' "${bwrap_cmd[@]}"
echo
echo "stepproof-run command line (from $ws):"
printf ' '; printf ' %q' "${stepproof_cmd[@]}"
echo

# --- check, then warm up -----------------------------------------------------------------
# Run each once with stderr visible, so a failure explains itself; then one timed warm-up.
cd "$ws"
for v in "${variants[@]}"; do
    cmd_of "$v"
    if ! "${pin[@]}" "${cmd[@]}" </dev/null >/dev/null; then
        die "the $v variant does not exit 0 (command above); not benchmarking"
    fi
    "${pin[@]}" "$work/timer" 1 "${cmd[@]}" >/dev/null || die "warm-up of $v failed"
done

# --- interleaved rounds --------------------------------------------------------------------
results=$work/results
: >"$results"
count=${#variants[@]}
echo "$ROUNDS rounds × $RUNS_PER_ROUND launches per variant, order rotating …" >&2
for ((r = 0; r < ROUNDS; r++)); do
    for ((i = 0; i < count; i++)); do
        v=${variants[$(((i + r) % count))]}
        cmd_of "$v"
        out=$("${pin[@]}" "$work/timer" "$RUNS_PER_ROUND" "${cmd[@]}") ||
            die "the $v variant failed in round $((r + 1))"
        while read -r ns; do echo "$v $ns"; done <<<"$out" >>"$results"
    done
    if (((r + 1) % 10 == 0 || r + 1 == ROUNDS)); then echo "  round $((r + 1))/$ROUNDS" >&2; fi
done

# --- statistics --------------------------------------------------------------------------
quantile() { # variant q -> ms (nearest-rank with linear interpolation)
    awk -v v="$1" '$1 == v { print $2 }' "$results" | sort -g |
        awk -v q="$2" '{ x[NR] = $1 }
            END {
                if (NR == 0) { print "nan"; exit }
                p = 1 + q * (NR - 1); lo = int(p); f = p - lo
                val = (lo >= NR) ? x[NR] : x[lo] + f * (x[lo + 1] - x[lo])
                printf "%.3f", val / 1e6
            }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }

declare -A med p10 p90 n
for v in "${variants[@]}"; do
    med[$v]=$(quantile "$v" 0.5)
    p10[$v]=$(quantile "$v" 0.1)
    p90[$v]=$(quantile "$v" 0.9)
    n[$v]=$(awk -v v="$v" '$1 == v' "$results" | wc -l)
done

echo
echo "kernel $(uname -r), $(nproc) CPUs, $(bwrap --version 2>/dev/null || echo bwrap),"
echo "$ROUNDS interleaved rounds × $RUNS_PER_ROUND launches; wall time per launch of /bin/true, ms"
printf '%-12s %6s %9s %9s %9s\n' variant n median p10 p90
for v in "${variants[@]}"; do
    printf '%-12s %6s %9s %9s %9s\n' "$v" "${n[$v]}" "${med[$v]}" "${p10[$v]}" "${p90[$v]}"
done
if [[ -n ${BASELINE_RUN:-} ]]; then
    diff_ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.3f", a - b }'; }
    echo
    echo "against the baseline build ($BASELINE_RUN), medians, ms:"
    echo "  core profile     $(diff_ms "${med[stepproof]}" "${med[base-core]}")  (ratio $(ratio "${med[stepproof]}" "${med[base-core]}"))"
    echo "  default profile  $(diff_ms "${med[default]}" "${med[base-default]}")  (ratio $(ratio "${med[default]}" "${med[base-default]}"))"
fi
echo
echo "ratios of medians:"
echo "  stepproof/bare   $(ratio "${med[stepproof]}" "${med[bare]}")"
echo "  bwrap/bare       $(ratio "${med[bwrap]}" "${med[bare]}")"
echo "  stepproof/bwrap  $(ratio "${med[stepproof]}" "${med[bwrap]}")"
echo "  default/bwrap    $(ratio "${med[default]}" "${med[bwrap]}")  (full default profile: hook, proxy, audit log, sweep)"
if awk -v a="${med[stepproof]}" -v b="${med[bwrap]}" 'BEGIN { exit !(a < b) }'; then
    echo "target: stepproof-run below bubblewrap: MET"
else
    echo "target: stepproof-run below bubblewrap: NOT MET"
fi
