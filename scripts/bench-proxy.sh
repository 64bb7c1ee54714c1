#!/usr/bin/env bash
# Proxy benchmark: throughput of one large transfer from a loopback server, three ways,
# interleaved in one run:
#   direct   client reads straight from the server (reference)
#   socat    through `socat TCP-LISTEN … TCP:…`, a plain TCP relay (the bridge srt uses)
#   proxy    through StepProof's allow-list proxy, as `CONNECT 127.0.0.1:PORT`
# and the connection set-up latency the proxy adds (connect + CONNECT round trip to the first
# byte from the server, against a direct connect to the first byte), median.
#
# Prints per-variant medians (MiB/s), the ratio proxy/socat (target: >= 1.0), and latency.
#
# Then the credential path, in the same run: HTTPS from a loopback server through the proxy as
#   tunnel       CONNECT to a host without a credential rule: TLS end to end, the proxy relays bytes
#   terminated   CONNECT to a host with a credential rule: the proxy ends TLS with the run's CA,
#                reads the request, adds the header, and speaks TLS onward (verified)
# throughput of one TLS_BYTES response (median MiB/s, ratio terminated/tunnel) and set-up latency
# (connect, CONNECT, TLS handshake, GET, to the response; median, ratio terminated/tunnel).
#
# Environment:
#   BYTES (536870912)    bytes per transfer (512 MiB)
#   ROUNDS (5)           interleaved rounds; the variant order rotates every round
#   LATENCY_ROUNDS (200) connections timed for the set-up latency
#   TLS_BYTES (104857600) bytes of the HTTPS response for the credential path (100 MiB)
#   PROXY_BENCH          path to the proxy_bench example; default: build it (release without
#                        LTO, to keep the build short; CARGO_TARGET_DIR or the workspace's target/)
#
# Exit status: 0 when the benchmark ran (whether or not the target is met), non-zero when the
# set-up failed. Everything listens on 127.0.0.1 only.
set -euo pipefail

BYTES=${BYTES:-536870912}
ROUNDS=${ROUNDS:-5}
LATENCY_ROUNDS=${LATENCY_ROUNDS:-200}

die() { echo "bench-proxy: $*" >&2; exit 1; }
command -v socat >/dev/null || die "socat is missing (apt-get install -y socat)"

root=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z "${PROXY_BENCH:-}" ]]; then
    target_dir=${CARGO_TARGET_DIR:-$root/target}
    (cd "$root" && CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
        cargo build --quiet --release --example proxy_bench) || die "build failed"
    PROXY_BENCH=$target_dir/release/examples/proxy_bench
fi
[[ -x "$PROXY_BENCH" ]] || die "no proxy_bench at $PROXY_BENCH"

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Starts a background helper whose first output line is its port; sets $port.
start() {
    local name=$1; shift
    mkfifo "$work/$name.in"
    "$@" <"$work/$name.in" >"$work/$name.out" 2>"$work/$name.err" &
    pids+=($!)
    exec {fd}>"$work/$name.in"   # keeps stdin open; closed by exit
    for _ in $(seq 100); do
        port=$(head -n1 "$work/$name.out" 2>/dev/null || true)
        [[ -n "$port" ]] && return 0
        sleep 0.05
    done
    die "$name did not start: $(cat "$work/$name.err")"
}

start source "$PROXY_BENCH" source "$BYTES"; src=$port
start first "$PROXY_BENCH" source 1; first=$port
start proxy "$PROXY_BENCH" proxy "127.0.0.1:$src" "127.0.0.1:$first" --address 127.0.0.1; proxy=$port
socat_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
socat TCP-LISTEN:"$socat_port",bind=127.0.0.1,fork,reuseaddr TCP:127.0.0.1:"$src" 2>"$work/socat.err" &
pids+=($!)
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$socat_port") 2>/dev/null && break; sleep 0.05; done
# The probe above made socat fork one relay; it ends at once (broken pipe, logged to socat.err).

run() {
    case $1 in
        direct) "$PROXY_BENCH" fetch "127.0.0.1:$src" "$BYTES" ;;
        socat) "$PROXY_BENCH" fetch "127.0.0.1:$socat_port" "$BYTES" ;;
        proxy) "$PROXY_BENCH" fetch "127.0.0.1:$proxy" "$BYTES" "127.0.0.1:$src" ;;
    esac
}

variants=(direct socat proxy)
declare -A results
for ((r = 0; r < ROUNDS; r++)); do
    for ((i = 0; i < 3; i++)); do
        v=${variants[$(((r + i) % 3))]}
        results[$v]+="$(run "$v") "
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf 'transfer of %d MiB, %d interleaved rounds (MiB/s, median):\n' $((BYTES >> 20)) "$ROUNDS"
for v in "${variants[@]}"; do
    printf '  %-7s %8s   (%s)\n' "$v" "$(median <<<"${results[$v]}")" "${results[$v]% }"
done
p=$(median <<<"${results[proxy]}"); s=$(median <<<"${results[socat]}")
printf '  ratio proxy/socat: %s (target >= 1.0)\n' "$(awk -v p="$p" -v s="$s" 'BEGIN {printf "%.2f", p / s}')"

d=$("$PROXY_BENCH" latency "127.0.0.1:$first" "$LATENCY_ROUNDS")
x=$("$PROXY_BENCH" latency "127.0.0.1:$proxy" "$LATENCY_ROUNDS" "127.0.0.1:$first")
printf 'set-up to first byte, median of %d: direct %d µs, through the proxy %d µs, added %d µs\n' \
    "$LATENCY_ROUNDS" "$d" "$x" $((x - d))

# The credential path: TLS terminated at the proxy beside a TLS tunnel, same run.
TLS_BYTES=${TLS_BYTES:-104857600}
start tls_term "$PROXY_BENCH" tls-source "$TLS_BYTES" "$work/term-ca.pem"; term=$port
start tls_tun "$PROXY_BENCH" tls-source "$TLS_BYTES" "$work/tun-ca.pem"; tun=$port
start tls_proxy "$PROXY_BENCH" tls-proxy "$work/run-ca.pem" "127.0.0.1:$term" "$work/term-ca.pem" \
    "127.0.0.1:$term" "127.0.0.1:$tun"
tproxy=$port
tls_run() {
    case $1 in
        tunnel) "$PROXY_BENCH" tls-fetch "127.0.0.1:$tproxy" "$TLS_BYTES" "127.0.0.1:$tun" "$work/tun-ca.pem" ;;
        terminated) "$PROXY_BENCH" tls-fetch "127.0.0.1:$tproxy" "$TLS_BYTES" "127.0.0.1:$term" "$work/run-ca.pem" ;;
    esac
}
tls_variants=(tunnel terminated)
declare -A tls_results
for ((r = 0; r < ROUNDS; r++)); do
    for ((i = 0; i < 2; i++)); do
        v=${tls_variants[$(((r + i) % 2))]}
        tls_results[$v]+="$(tls_run "$v") "
    done
done
printf 'HTTPS response of %d MiB through the proxy, %d interleaved rounds (MiB/s, median):\n' \
    $((TLS_BYTES >> 20)) "$ROUNDS"
for v in "${tls_variants[@]}"; do
    printf '  %-10s %8s   (%s)\n' "$v" "$(median <<<"${tls_results[$v]}")" "${tls_results[$v]% }"
done
t=$(median <<<"${tls_results[tunnel]}"); m=$(median <<<"${tls_results[terminated]}")
printf '  ratio terminated/tunnel: %s\n' "$(awk -v m="$m" -v t="$t" 'BEGIN {printf "%.2f", m / t}')"
lt=$("$PROXY_BENCH" tls-latency "127.0.0.1:$tproxy" "$LATENCY_ROUNDS" "127.0.0.1:$tun" "$work/tun-ca.pem")
lm=$("$PROXY_BENCH" tls-latency "127.0.0.1:$tproxy" "$LATENCY_ROUNDS" "127.0.0.1:$term" "$work/run-ca.pem")
printf 'HTTPS set-up to the response, median of %d: tunnel %d µs, terminated %d µs, ratio %s\n' \
    "$LATENCY_ROUNDS" "$lt" "$lm" "$(awk -v m="$lm" -v t="$lt" 'BEGIN {printf "%.2f", m / t}')"
