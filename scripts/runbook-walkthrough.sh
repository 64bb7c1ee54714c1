#!/bin/sh
# Regenerates the runbook walk-through of docs/runbooks.md ("A whole session"): one session of the real
# Claude Code under `stepproof-run --runbook` against the mock Messages API
# (scripts/mock-anthropic.py), as root. Writes what the agent and the person saw — the
# orientation, a refused call, a failed and a passed completion, the verifier's records, the
# run's stderr, `stepproof audit show` and the job summary — to DIR (default
# ./runbook-walkthrough), one file each, to be trimmed into docs/runbooks.md.
#
#     sudo scripts/runbook-walkthrough.sh [DIR]
set -eu
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-runbook-walkthrough}")
cargo build -p stepproof-hook --bins
STEPPROOF_WALKTHROUGH_OUT="$out" cargo test --test claude_runbook -- --ignored --exact walkthrough --nocapture
ls -l "$out"
