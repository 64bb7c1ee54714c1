#!/usr/bin/env bash
# The steps of StepProof's GitHub Action (action.yml beside this file), one subcommand each:
#
#   install   build StepProof from the action's own checkout (or INPUT_VERSION of INPUT_REPOSITORY)
#             with scripts/install, put it on the job's PATH; install Claude Code, pinned
#   prepare   lift Ubuntu's AppArmor restriction of user namespaces (when asked), `stepproof doctor`
#   run       exec stepproof-run --ci with the inputs (exec: the runner's SIGINT/SIGTERM on
#             cancel reach stepproof-run itself, which ends the sandbox and seals the audit log)
#   record    the step outputs (exit-code, status, head-hash, audit-log) from the status file,
#             the head hash beside the log, a job summary if StepProof could not write one
#
# Inputs come as INPUT_* environment variables (never spliced into a script by the runner, so
# a prompt is only ever data). Everything lands in INPUT_AUDIT_DIR, outside the workspace.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
audit_dir=${INPUT_AUDIT_DIR:-${RUNNER_TEMP:-/tmp}/stepproof}

die() {
    echo "::error title=StepProof::$*" >&2
    exit 1
}

install_stepproof() {
    local source=$here/..
    if [[ -n ${INPUT_VERSION:-} ]]; then
        # Another revision than the action's own: fetched by ref (a tag, a branch or a commit).
        local repository=${INPUT_REPOSITORY:-}
        [[ -n $repository ]] || repository=${ACTION_REPOSITORY:-}
        [[ -n $repository ]] || die "version is set but the repository is unknown: set the repository input"
        [[ $repository == *://* ]] || repository="${GITHUB_SERVER_URL:-https://github.com}/$repository"
        source=${RUNNER_TEMP:-/tmp}/stepproof-source
        rm -rf "$source"
        git init -q "$source"
        git -C "$source" fetch -q --depth 1 "$repository" "$INPUT_VERSION"
        git -C "$source" checkout -q FETCH_HEAD
    fi
    [[ -x $source/scripts/install ]] || die "no StepProof checkout at $source"
    command -v cargo >/dev/null || die "cargo is missing: StepProof is built from source (add a Rust toolchain step)"
    local prefix=${RUNNER_TEMP:-/tmp}/stepproof-install
    PREFIX=$prefix "$source/scripts/install"
    if [[ -n ${GITHUB_PATH:-} ]]; then
        echo "$prefix/bin" >>"$GITHUB_PATH"
    fi
    local claude=${INPUT_CLAUDE_CODE_VERSION:-}
    if [[ -n $claude ]] && ! claude --version 2>/dev/null | grep -q "^$claude "; then
        # Global npm installs need root on the hosted runners.
        local sudo=
        [[ $(id -u) -eq 0 ]] || sudo=sudo
        $sudo npm install -g --no-fund --no-audit "@anthropic-ai/claude-code@$claude" >/dev/null
    fi
}

prepare_host() {
    # Ubuntu 24.04 and later restrict unprivileged user namespaces through AppArmor; StepProof's
    # sandbox needs them. On a throwaway runner the restriction is lifted for the job.
    local knob=/proc/sys/kernel/apparmor_restrict_unprivileged_userns
    if [[ ${INPUT_ALLOW_USER_NAMESPACES:-true} == true && -r $knob && $(cat "$knob") != 0 ]]; then
        sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0
    fi
    # What this host can enforce, in the log. Not fatal here: `stepproof-run --ci` refuses (125)
    # a profile the host cannot give, with the reason.
    stepproof doctor || echo "::warning title=StepProof::stepproof doctor: this host cannot enforce the default profile (see above)"
}

run_stepproof() {
    mkdir -p "$audit_dir"
    local profile=${INPUT_PROFILE:-}
    if [[ -z $profile ]]; then
        # The built-in `ci` profile; with an API key in the environment, the credential
        # gateway: the key stays with the supervisor, the agent holds a placeholder.
        profile=$audit_dir/profile.toml
        printf 'extends = "ci"\n' >"$profile"
        if [[ -n ${ANTHROPIC_API_KEY:-} ]]; then
            printf '[network.gateway]\nupstream = "api.anthropic.com"\ncredential = "env:ANTHROPIC_API_KEY"\n' >>"$profile"
        fi
    fi
    local args=(
        --ci
        --profile "$profile"
        --audit-log "$audit_dir/audit.jsonl"
        --status-file "$audit_dir/status.json"
        --summary "$audit_dir/summary.md"
        --summary-json "$audit_dir/summary.json"
    )
    [[ -z ${INPUT_TIMEOUT:-} ]] || args+=(--timeout "$INPUT_TIMEOUT")
    [[ ${INPUT_FAIL_ON_DENY:-true} != true ]] || args+=(--fail-on-deny)
    [[ -z ${INPUT_RUNBOOK:-} ]] || args+=(--runbook "$INPUT_RUNBOOK")
    if [[ -n ${INPUT_COMMAND:-} ]]; then
        exec stepproof-run "${args[@]}" -- bash -c "$INPUT_COMMAND"
    fi
    [[ -n ${INPUT_PROMPT:-} ]] || die "set the prompt input (or command)"
    exec stepproof-run "${args[@]}" -- claude -p "$INPUT_PROMPT" --dangerously-skip-permissions
}

record_outputs() {
    local status=$audit_dir/status.json
    local out=${GITHUB_OUTPUT:-/dev/stdout}
    if [[ ! -s $status ]]; then
        echo "::warning title=StepProof::no status file: stepproof-run did not run"
        return 0
    fi
    # One value a line, from StepProof's JSON (python3 is on every hosted runner).
    python3 - "$status" "$audit_dir" "$out" <<'EOF'
import json, os, sys
status_path, audit_dir, out_path = sys.argv[1:4]
with open(status_path) as f:
    status = json.load(f)
head = status.get("audit_head") or ""
log = status.get("audit_log") or ""
if head:
    with open(os.path.join(audit_dir, "audit.head"), "w") as f:
        f.write(head + "\n")
with open(out_path, "a") as f:
    f.write(f"exit-code={status.get('exit_code', '')}\n")
    f.write(f"status={status.get('status', '')}\n")
    f.write(f"head-hash={head}\n")
    f.write(f"audit-log={log}\n")
summary = os.environ.get("GITHUB_STEP_SUMMARY")
if summary and not os.path.exists(os.path.join(audit_dir, "summary.md")):
    # StepProof stopped before it could write its own summary (a refused profile, a host
    # without what the profile requires): say how it ended.
    message = status.get("message", "")
    with open(summary, "a") as f:
        f.write(f"## StepProof run\n\n**{status.get('status', '?')}** (exit {status.get('exit_code', '?')})\n\n")
        if message:
            f.write("```\n" + message.replace("```", "'''") + "\n```\n")
EOF
}

case ${1:-} in
install) install_stepproof ;;
prepare) prepare_host ;;
run) run_stepproof ;;
record) record_outputs ;;
*) die "usage: $0 install|prepare|run|record" ;;
esac
