#!/usr/bin/env bash
# The steps of StepProof's GitHub Action (action.yml beside this file), one subcommand each:
#
#   install   install the release INPUT_VERSION (or the action's own release tag): its tarball
#             and SHA256SUMS downloaded, the checksum checked (a mismatch refused), then
#             scripts/install --from; with INPUT_FROM_SOURCE=true build from the action's own
#             checkout (or INPUT_REF of INPUT_REPOSITORY) with scripts/install instead. Put it
#             on the job's PATH; install Claude Code, pinned
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

# The repository releases come from and refs are fetched from: INPUT_REPOSITORY or the action's.
repository() {
    local repository=${INPUT_REPOSITORY:-}
    [[ -n $repository ]] || repository=${ACTION_REPOSITORY:-}
    [[ -n $repository ]] || die "the repository is unknown: set the repository input"
    echo "$repository"
}

# Downloads URL to FILE: https only, but for a server on the loopback address (tests, a local
# mirror).
download() {
    local url=$1 file=$2 protocols='=https'
    [[ ! $url =~ ^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]+)?/ ]] || protocols='=http'
    curl --fail --silent --show-error --location --retry 3 --proto "$protocols" --proto-redir "$protocols" \
        --output "$file" "$url" || die "downloading $url failed"
}

# The release tarball for this machine, checked against the release's SHA256SUMS before
# anything in it is unpacked.
install_release() {
    local prefix=$1 version=${INPUT_VERSION:-}
    if [[ -z $version && ${ACTION_REF:-} =~ ^v[0-9] ]]; then
        # `uses: OWNER/stepproof/action@v0.1.0`: the action's own tag names the release.
        version=$ACTION_REF
    fi
    [[ -n $version ]] || die "no release to install: set the version input (0.1.0), use the action at a release tag (@v0.1.0), or set from-source: true"
    version=${version#v}
    [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$ ]] || die "version '$version' is not a release version (0.1.0)"
    local arch
    case $(uname -m) in
    x86_64 | amd64) arch=x86_64 ;;
    aarch64 | arm64) arch=aarch64 ;;
    *) die "no StepProof release for $(uname -m); set from-source: true" ;;
    esac
    local base=${INPUT_RELEASE_BASE_URL:-}
    [[ -n $base ]] || base="${GITHUB_SERVER_URL:-https://github.com}/$(repository)/releases/download"
    local name=stepproof-$version-$arch-linux.tar.gz
    local dir=${RUNNER_TEMP:-/tmp}/stepproof-release
    rm -rf "$dir"
    mkdir -p "$dir"
    download "$base/v$version/SHA256SUMS" "$dir/SHA256SUMS"
    download "$base/v$version/$name" "$dir/$name"
    local expected actual
    expected=$(awk -v name="$name" '$2 == name || $2 == "*" name { print $1 }' "$dir/SHA256SUMS")
    [[ $expected =~ ^[0-9a-f]{64}$ ]] || die "the SHA256SUMS of v$version has no line for $name: refusing to install it"
    actual=$(sha256sum "$dir/$name" | cut -d' ' -f1)
    if [[ $actual != "$expected" ]]; then
        rm -f "$dir/$name"
        die "$name does not match the release's SHA256SUMS (sha256 $actual, expected $expected): refusing to install it"
    fi
    echo "StepProof v$version: $name matches SHA256SUMS ($actual)"
    PREFIX=$prefix "$here/../scripts/install" --from "$dir/$name"
}

# scripts/install from the action's own checkout, or INPUT_REF of the repository.
install_from_source() {
    local prefix=$1 source=$here/..
    if [[ -n ${INPUT_REF:-} ]]; then
        local repository
        repository=$(repository)
        [[ $repository == *://* ]] || repository="${GITHUB_SERVER_URL:-https://github.com}/$repository"
        source=${RUNNER_TEMP:-/tmp}/stepproof-source
        rm -rf "$source"
        git init -q "$source"
        git -C "$source" fetch -q --depth 1 "$repository" "$INPUT_REF"
        git -C "$source" checkout -q FETCH_HEAD
    fi
    [[ -x $source/scripts/install ]] || die "no StepProof checkout at $source"
    command -v cargo >/dev/null || die "cargo is missing: from-source builds StepProof (add a Rust toolchain step)"
    PREFIX=$prefix "$source/scripts/install"
}

install_stepproof() {
    local prefix=${RUNNER_TEMP:-/tmp}/stepproof-install
    if [[ ${INPUT_FROM_SOURCE:-false} == true ]]; then
        install_from_source "$prefix"
    else
        install_release "$prefix"
    fi
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
