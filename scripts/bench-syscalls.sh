#!/usr/bin/env bash
# Syscall-heavy loops (getppid, stat, open+close) and `git status` on a GIT_FILES-file
# repository, under four configurations, interleaved:
#   bare     the loop alone
#   floor    the physical floor: an allow-all seccomp filter + a two-rule Landlock ruleset
#            (read on /, everything on the workspace; plus /dev/null, which git opens
#            read-write): the cost any seccomp + Landlock has
#   full     our seccomp table + a realistic Landlock plan + limits (no namespaces)
#   sandbox  the whole sandbox, when STEPPROOF_RUN points at stepproof-run (skipped otherwise)
# Prints the median ns/op of each over ROUNDS rounds and the ratios full/bare, full/floor
# (target: within 5% of the floor) and sandbox/floor.
#
# Environment:
#   ROUNDS (10)  N_GETPPID (2000000)  N_STAT (500000)  N_OPEN (300000)
#   GIT_FILES (20000, 0 = no git status column)  N_GIT (5 runs per measurement)
#   LAYERS_EXEC   command taking `floor|full WORKSPACE -- CMD…` (e.g. "stepproof __layers");
#                 default: build scripts/bench-syscalls/layers-exec (release) and use it
#   STEPPROOF_RUN path to stepproof-run; STEPPROOF_RUN_ARGS (default "--") go before the loop,
#                 which runs from the workspace (the sandbox's default workspace is the cwd)
#   PIN_CPU (1)   CPU to pin every run to with taskset, "" to not pin
set -euo pipefail

ROUNDS=${ROUNDS:-10}
N_GETPPID=${N_GETPPID:-2000000}
N_STAT=${N_STAT:-500000}
N_OPEN=${N_OPEN:-300000}
GIT_FILES=${GIT_FILES:-20000}
N_GIT=${N_GIT:-5}
PIN_CPU=${PIN_CPU-1}

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/stepproof-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

gcc -O2 -o "$work/loop" "$here/bench-syscalls/loop.c"
echo "stepproof benchmark file" >"$work/file"
export LOOP_OUT=$work/out
modes=(getppid stat openclose)
if ((GIT_FILES > 0)) && command -v git >/dev/null; then
    echo "creating a $GIT_FILES-file git repository …" >&2
    repo=$work/repo
    mkdir -p "$repo"
    (
        cd "$repo"
        git init -q
        for ((d = 0; d < (GIT_FILES + 99) / 100; d++)); do
            mkdir "d$d"
            for ((f = 0; f < 100 && d * 100 + f < GIT_FILES; f++)); do echo "$d $f" >"d$d/f$f"; done
        done
        git add -A
        git -c user.name=bench -c user.email=bench@example.invalid commit -qm init
    )
    modes+=(gitstatus)
fi

if [[ -n ${LAYERS_EXEC:-} ]]; then
    read -r -a layers <<<"$LAYERS_EXEC"
else
    target=${CARGO_TARGET_DIR:-$here/bench-syscalls/layers-exec/target}
    echo "building layers-exec (release) in $target …" >&2
    CARGO_TARGET_DIR=$target cargo build --quiet --release \
        --manifest-path "$here/bench-syscalls/layers-exec/Cargo.toml" >&2
    layers=("$target/release/layers-exec")
fi

configs=(bare floor full)
if [[ -n ${STEPPROOF_RUN:-} && -x ${STEPPROOF_RUN} ]]; then
    configs+=(sandbox)
    read -r -a run_args <<<"${STEPPROOF_RUN_ARGS:---}"
else
    echo "STEPPROOF_RUN not set (or not executable): skipping the sandbox column" >&2
fi

pin=()
if [[ -n $PIN_CPU ]] && command -v taskset >/dev/null; then
    pin=(taskset -c "$PIN_CPU")
fi

iterations() {
    case $1 in
    getppid) echo "$N_GETPPID" ;;
    stat) echo "$N_STAT" ;;
    openclose) echo "$N_OPEN" ;;
    gitstatus) echo "$N_GIT" ;;
    esac
}

run_one() { # config mode -> ns/op
    local config=$1 mode=$2 n
    n=$(iterations "$mode")
    local loop=("$work/loop" "$mode" "$n" "$work/file")
    if [[ $mode == gitstatus ]]; then
        loop=("$work/loop" run "$n" git -C "$repo" status --porcelain)
    fi
    case $config in
    bare) "${pin[@]}" "${loop[@]}" ;;
    floor) "${pin[@]}" "${layers[@]}" floor "$work" -- "${loop[@]}" ;;
    full) "${pin[@]}" "${layers[@]}" full "$work" -- "${loop[@]}" ;;
    sandbox) (cd "$work" && "${pin[@]}" "$STEPPROOF_RUN" "${run_args[@]}" "${loop[@]}") ;;
    esac
}

results=$work/results
: >"$results"
for ((r = 0; r < ROUNDS; r++)); do
    for mode in "${modes[@]}"; do
        # Rotate the order every round so no configuration always runs first.
        count=${#configs[@]}
        for ((i = 0; i < count; i++)); do
            config=${configs[$(((i + r) % count))]}
            value=$(run_one "$config" "$mode" | tail -n 1)
            echo "$mode $config $value" >>"$results"
        done
    done
    echo "round $((r + 1))/$ROUNDS done" >&2
done

median() { # mode config
    awk -v m="$1" -v c="$2" '$1 == m && $2 == c { print $3 }' "$results" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }

echo
echo "kernel $(uname -r), $ROUNDS interleaved rounds, medians in ns/op (gitstatus: µs per run)"
header=$(printf "%-10s" mode)
for c in "${configs[@]}"; do header+=$(printf " %9s" "$c"); done
header+=$(printf " %10s %10s" full/bare full/floor)
[[ " ${configs[*]} " == *" sandbox "* ]] && header+=$(printf " %13s" sandbox/floor)
echo "$header"
for mode in "${modes[@]}"; do
    line=$(printf "%-10s" "$mode")
    declare -A med=()
    for c in "${configs[@]}"; do
        med[$c]=$(median "$mode" "$c")
        line+=$(printf " %9s" "${med[$c]}")
    done
    line+=$(printf " %10s %10s" "$(ratio "${med[full]}" "${med[bare]}")" "$(ratio "${med[full]}" "${med[floor]}")")
    [[ -n ${med[sandbox]:-} ]] && line+=$(printf " %13s" "$(ratio "${med[sandbox]}" "${med[floor]}")")
    echo "$line"
    unset med
done
