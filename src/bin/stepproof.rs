//! `stepproof`: explain a profile, check this machine.

use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use stepproof::audit;
use stepproof::cli::{doctor, explain, host, logging, probes};
use stepproof::exit::ExitCode;

/// StepProof: inspect what a profile enforces and what this machine supports.
#[derive(Parser, Debug)]
#[command(
    name = "stepproof",
    version = stepproof::VERSION,
    after_help = "Examples:\n  stepproof explain                            # the built-in default profile, here\n  stepproof explain --profile profiles/ci.toml --json\n  stepproof runbook check examples/runbooks/fix-bug.toml\n  stepproof doctor"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
    /// More output on stderr.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

#[derive(Subcommand, Debug)]
enum ProfileAction {
    /// The built-in profiles, with what each is for and its policy hash.
    List {
        /// Machine-readable output: an array of `{name, description, policy_hash}`.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the effective plan (every mount, hidden and protected path, environment) and the
    /// policy hash of what the profile asks for.
    Explain {
        /// A built-in profile by name (`default`, `ci`, `strict`: `stepproof profile list`) or a
        /// profile file (TOML); the built-in default when omitted.
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// The view of a run of this runbook (`stepproof-run --runbook FILE`): its state and
        /// client under /run/stepproof, its file read-only.
        #[arg(long, value_name = "FILE")]
        runbook: Option<PathBuf>,
        /// The view the self-test runs in (`stepproof-run --selftest`, and before every `--ci`
        /// run).
        #[arg(long)]
        selftest: bool,
        /// As an unattended run (`stepproof-run --ci`): no kept sessions, caches of its own.
        #[arg(long)]
        ci: bool,
    },
    /// Print the compiled hook policy the launcher would mount (JSON).
    Policy {
        /// A built-in profile by name (`default`, `ci`, `strict`: `stepproof profile list`) or a
        /// profile file (TOML); the built-in default when omitted.
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// Try one tool call against a profile's hook: prints decision, rule id and reason
    /// (tab-separated). Exit 0 allow, 1 ask, 2 deny.
    Check {
        /// A built-in profile by name (`default`, `ci`, `strict`: `stepproof profile list`) or a
        /// profile file (TOML); the built-in default when omitted.
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// A Bash command, as the agent would run it.
        #[arg(long, conflicts_with_all = ["tool", "input"])]
        bash: Option<String>,
        /// A tool name (Read, Write, Edit, WebFetch, mcp__server__tool, …) …
        #[arg(long, requires = "input")]
        tool: Option<String>,
        /// … and its input as JSON (`{"file_path": "src/main.rs"}`).
        #[arg(long)]
        input: Option<String>,
    },
    /// Log in to Claude once, on this machine and outside any sandbox: runs `claude auth login`
    /// (extra arguments are passed on, e.g. `--console` for an API-billing login). The login
    /// lands in ~/.claude, where `stepproof-run` finds it; the sandbox only ever gets a
    /// placeholder, and the supervisor adds and refreshes the real login at the boundary.
    Login {
        /// Passed to `claude auth login` (`--console`, `--sso`, `--email ADDRESS`).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
    /// Finish the end of runs whose supervisor died before it (killed, OOM, a reboot): the
    /// sweep with the run's launch snapshot — persistence paths quarantined, repository configs
    /// that gained a key that runs code put back as they were at launch — and the missing end
    /// of the audit chain (`run-end-recovered`). Exit 0 when nothing is owed any more, 1 when a
    /// run's end could not be finished (said; it stays owed), 2 on an error.
    Repair {
        /// The workspace whose runs to finish (the current directory when omitted).
        #[arg(conflicts_with = "all")]
        workspace: Option<PathBuf>,
        /// Every run that owes its end, of every workspace.
        #[arg(long)]
        all: bool,
    },
    /// Which kernel features exist here and whether the default profile can be enforced; and
    /// the workspaces whose runs owe their end (`stepproof repair`).
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Check a run's audit log (`verify FILE [--head HASH]`) or print it as a timeline
    /// (`show FILE [--json]`).
    Audit {
        #[command(subcommand)]
        action: audit::AuditCommand,
    },
    /// Runbooks: `check FILE` (file:line:column problems), `explain FILE [--json]` (the
    /// document a reviewer reads, with the runbook's hash), `schema` (JSON Schema for editors).
    Runbook {
        #[command(subcommand)]
        action: stepproof::runbook::RunbookCommand,
    },
    /// Inside a `stepproof-run --runbook` run: `status`, `complete [--step S] [--note …]` (ask
    /// the supervisor to check the step's evidence; exit 0 passed, 1 not), `evidence FILE…`.
    Step {
        #[command(subcommand)]
        action: stepproof::runbook::client::StepCommand,
    },
    /// At a host terminal: approve a runbook step waiting for approval in run RUN (the run's
    /// directory name under ~/.local/state/stepproof/runs/, printed by the run).
    Approve { run: String, step: String },
    /// At a host terminal: every runbook approval waiting on this host (your runs; as root,
    /// everyone's), newest first, with what the step did — its diff, each evidence item's
    /// verdict and output tail, the verifier's verdict — and the approve/deny commands. DIR: look
    /// under a state directory, its runs/, or one run's directory instead.
    Approvals {
        dir: Option<std::path::PathBuf>,
        /// One JSON object: `pending` (the briefs, newest first) and `stale`.
        #[arg(long)]
        json: bool,
    },
    /// At a host terminal: deny a runbook step waiting for approval in run RUN.
    Deny {
        run: String,
        step: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// The built-in profiles: `list [--json]` (each one's name, what it is for, its policy
    /// hash). `--profile NAME` takes one of them wherever a profile is taken.
    Profile {
        #[command(subcommand)]
        action: ProfileAction,
    },
    /// What StepProof keeps of Claude Code's sessions for a workspace between runs: `show`
    /// (transcripts, history, todos, plans, and auto-memory in full), `rm`, `list`.
    State {
        #[command(subcommand)]
        action: stepproof::cli::state::StateCommand,
    },
    /// (Internal) Try one forbidden thing and print what the kernel answered, as JSON. Used by
    /// the escape tests inside the sandbox.
    #[command(name = "__probe", hide = true)]
    Probe {
        /// `NAME` or `NAME:ARG`; `list` prints the names.
        spec: String,
    },
    /// (Internal) Every built-in probe, one JSON line each (what `selftest` runs inside).
    #[command(name = "__probe-all", hide = true)]
    ProbeAll {
        /// Also check the agent's layer (managed settings, hook, policy).
        #[arg(long)]
        agent: bool,
        /// The home inside is private (`home = "allowlist"`): writing there is no escape.
        #[arg(long)]
        private_home: bool,
        /// With `--private-home`: a read-only part of it to probe instead.
        #[arg(long, value_name = "DIR")]
        read_only_in_home: Option<PathBuf>,
    },
    /// Run the built-in escape probes inside the sandbox a profile describes; each must fail.
    /// Exit non-zero if any escaped.
    Selftest {
        /// A built-in profile by name (`default`, `ci`, `strict`: `stepproof profile list`) or a
        /// profile file (TOML); the built-in default when omitted.
        #[arg(long, value_name = "NAME|FILE")]
        profile: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
    },
    /// (Internal) Write the man pages (`man DIR`) or SHELL's completions (`completions SHELL
    /// DIR`) of stepproof-run and stepproof, from these very definitions; for packagers
    /// (scripts/build-tarball).
    #[command(hide = true)]
    Generate {
        #[command(subcommand)]
        action: stepproof::cli::manual::GenerateCommand,
    },
    /// (Internal) Run CMD under Landlock + seccomp without namespaces: `floor` (allow-all
    /// seccomp, two Landlock rules) or `full` (the real tables). For the syscall benchmark.
    #[command(name = "__layers", hide = true)]
    Layers {
        #[arg(value_parser = ["floor", "full"])]
        layers: String,
        workspace: PathBuf,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// The profile's hook policy, compiled for this workspace and home.
fn compiled_policy(
    profile: Option<&std::path::Path>,
    workspace: Option<&std::path::Path>,
) -> Result<stepproof_hook::policy::CompiledPolicy, String> {
    let profile = stepproof::profile::Profile::load(profile).map_err(|e| e.to_string())?;
    let facts = host::gather_facts(workspace, false).map_err(|e| e.to_string())?;
    stepproof::sandbox::plan::hook_policy::profile_policy(&profile, &facts.home, &facts.workspace)
}

/// `stepproof login`: Claude Code's own login flow, on the host. Inside a StepProof sandbox it
/// is refused: a login made there would be the sandbox's, and thrown away with it.
fn login(args: &[std::ffi::OsString]) -> i32 {
    if std::env::var_os("STEPPROOF").is_some() {
        stepproof::say!(
            "stepproof login: this is inside a StepProof sandbox; run `stepproof login` in a terminal on the host, outside any sandbox"
        );
        return ExitCode::Refused.code();
    }
    let mut cmd = std::process::Command::new("claude");
    cmd.args(["auth", "login"]).args(args);
    match cmd.status() {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt;
            status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
        }
        Err(e) => {
            stepproof::say!(
                "stepproof login: running `claude auth login`: {e} (install Claude Code: `npm install -g @anthropic-ai/claude-code`)"
            );
            ExitCode::NotFound.code()
        }
    }
}

/// `stepproof approve|deny RUN STEP`, from the home's state directory.
fn approval(run: &str, request: &stepproof::runbook::client::ApprovalRequest) -> i32 {
    match host::gather_facts(None, false) {
        Ok(facts) => stepproof::runbook::client::run_approval(&facts.home, run, request),
        Err(e) => {
            stepproof::say!("stepproof: {e}");
            2
        }
    }
}

fn main() {
    stepproof::audit::export_fields::open_ledger();
    let args = Args::parse();
    logging::init_logging(args.verbose);
    let code = match args.command {
        Command::Audit { action } => audit::run_command(action),
        Command::Generate { action } => stepproof::cli::manual::run_command(
            action,
            &[stepproof::cli::run::args::Args::command(), Args::command()],
        ),
        Command::Login { args } => login(&args),
        Command::Runbook { action } => stepproof::runbook::run_command(action),
        Command::State { action } => stepproof::cli::state::run_command(action),
        Command::Profile {
            action: ProfileAction::List { json },
        } => stepproof::cli::profiles::list(json),
        Command::Repair { workspace, all } => {
            stepproof::cli::repair::run(workspace.as_deref(), all)
        }
        Command::Step { action } => stepproof::runbook::client::run_step_command(action),
        Command::Approve { run, step } => approval(
            &run,
            &stepproof::runbook::client::ApprovalRequest::Approve {
                step,
                sudo_user: stepproof::runbook::client::sudo_user(),
            },
        ),
        Command::Approvals { dir, json } => match host::gather_facts(None, false) {
            Ok(facts) => stepproof::cli::approvals::run(dir.as_deref(), &facts.home, json),
            Err(e) => {
                stepproof::say!("stepproof: {e}");
                2
            }
        },
        Command::Deny { run, step, reason } => approval(
            &run,
            &stepproof::runbook::client::ApprovalRequest::Deny {
                step,
                reason,
                sudo_user: stepproof::runbook::client::sudo_user(),
            },
        ),
        Command::ProbeAll {
            agent,
            private_home,
            read_only_in_home,
        } => stepproof::cli::selftest::probe_all(
            agent,
            private_home.then_some(read_only_in_home.as_deref()),
        ),
        Command::Selftest { profile, workspace } => {
            let run = std::env::current_exe().map(|e| e.with_file_name("stepproof-run"));
            let mut cmd = match run {
                Ok(path) => std::process::Command::new(path),
                Err(e) => {
                    stepproof::say!("stepproof: {e}");
                    std::process::exit(stepproof::exit::ExitCode::HostFailure.code());
                }
            };
            if let Some(p) = &profile {
                cmd.arg("--profile").arg(p);
            }
            if let Some(w) = &workspace {
                cmd.arg("--workspace").arg(w);
            }
            match cmd
                .arg("--selftest")
                .stdin(std::process::Stdio::null())
                .output()
            {
                Ok(out) => {
                    let results = stepproof::cli::selftest::parse_results(
                        &String::from_utf8_lossy(&out.stdout),
                    );
                    for r in &results {
                        stepproof::out!(
                            "{:<8} {:<28} {}",
                            if r.escaped { "ESCAPED" } else { "held" },
                            r.name,
                            r.detail
                        );
                    }
                    let escaped = results.iter().filter(|r| r.escaped).count();
                    if results.is_empty() {
                        stepproof::say!(
                            "stepproof: the self-test did not run: {}",
                            String::from_utf8_lossy(&out.stderr).trim()
                        );
                        ExitCode::HostFailure.code()
                    } else {
                        stepproof::out!(
                            "{} probes, {escaped} escaped: the sandbox {}",
                            results.len(),
                            if escaped == 0 { "held" } else { "DID NOT HOLD" }
                        );
                        i32::from(escaped > 0)
                    }
                }
                Err(e) => {
                    stepproof::say!("stepproof: running stepproof-run: {e}");
                    ExitCode::HostFailure.code()
                }
            }
        }
        Command::Probe { spec } => {
            if spec == "list" {
                for name in probes::all_probes().chain(probes::control_probes().iter().copied()) {
                    stepproof::out!("{name}");
                }
                0
            } else {
                let outcome = probes::run_probe(&spec);
                stepproof::out!("{}", serde_json::to_string(&outcome).unwrap_or_default());
                0
            }
        }
        Command::Layers {
            layers,
            workspace,
            command,
        } => {
            let set = if layers == "floor" {
                probes::LayerSet::Floor
            } else {
                probes::LayerSet::Full
            };
            let error = probes::exec_under_layers(set, &workspace, &command);
            stepproof::say!("stepproof __layers: {error}");
            ExitCode::HostFailure.code()
        }
        Command::Explain {
            profile,
            workspace,
            json,
            runbook,
            selftest,
            ci,
        } => match host::load_plan(
            profile.as_deref(),
            workspace.as_deref(),
            &host::ExplainAs {
                runbook,
                selftest,
                ci,
            },
        ) {
            Ok((profile, plan)) if json => match explain::explain_json(&profile, &plan) {
                Ok(value) => {
                    stepproof::out!(
                        "{}",
                        serde_json::to_string_pretty(&value).unwrap_or_default()
                    );
                    0
                }
                Err(e) => {
                    stepproof::say!(
                        "stepproof: explain --json: {e} (JSON holds only UTF-8; `stepproof explain` without --json shows the plan)"
                    );
                    ExitCode::Refused.code()
                }
            },
            Ok((profile, plan)) => {
                stepproof::out_part!("{}", explain::explain_text(&profile, &plan));
                0
            }
            Err(e) => {
                stepproof::say!("stepproof: {e}");
                if e.is_configuration() {
                    ExitCode::Refused.code()
                } else {
                    ExitCode::HostFailure.code()
                }
            }
        },
        Command::Policy { profile, workspace } => {
            match compiled_policy(profile.as_deref(), workspace.as_deref()) {
                Ok(policy) => {
                    use std::io::Write;
                    // A closed pipe (`| head`) ends the output quietly.
                    let _ = writeln!(
                        std::io::stdout(),
                        "{}",
                        serde_json::to_string_pretty(&policy).unwrap_or_default()
                    );
                    0
                }
                Err(e) => {
                    // A profile that does not load or compile: the profile's to fix.
                    stepproof::say!("stepproof: {e}");
                    ExitCode::Refused.code()
                }
            }
        }
        Command::Check {
            profile,
            workspace,
            bash,
            tool,
            input,
        } => {
            let policy = match compiled_policy(profile.as_deref(), workspace.as_deref()) {
                Ok(policy) => policy,
                Err(e) => {
                    stepproof::say!("stepproof: {e}");
                    std::process::exit(stepproof::exit::ExitCode::Refused.code());
                }
            };
            let (name, input) = match (bash, tool, input) {
                (Some(command), _, _) => (
                    "Bash".to_string(),
                    serde_json::json!({ "command": command }),
                ),
                (None, Some(tool), Some(input)) => match serde_json::from_str(&input) {
                    Ok(value) => (tool, value),
                    Err(e) => {
                        stepproof::say!("stepproof: --input is not JSON: {e}");
                        std::process::exit(stepproof::exit::ExitCode::Refused.code());
                    }
                },
                _ => {
                    stepproof::say!("stepproof: give --bash COMMAND, or --tool NAME --input JSON");
                    std::process::exit(stepproof::exit::ExitCode::Refused.code());
                }
            };
            let verdict = stepproof_hook::check_tool(&policy, &name, &input);
            stepproof::out!("{}", stepproof_hook::render_check(&verdict));
            match verdict.decision {
                stepproof_hook::Decision::Allow => 0,
                stepproof_hook::Decision::Ask => 1,
                _ => 2,
            }
        }
        Command::Doctor { json } => {
            let checks = doctor::run_checks();
            let ok = doctor::default_profile_enforceable(&checks);
            let owed = doctor::work_owed();
            if json {
                let value = serde_json::json!({
                    "checks": checks,
                    "default_profile_enforceable": ok,
                    "work_owed": owed,
                });
                stepproof::out!(
                    "{}",
                    serde_json::to_string_pretty(&value).unwrap_or_default()
                );
            } else {
                for c in &checks {
                    let mark = if c.available {
                        "ok  "
                    } else if c.required_by_default {
                        "FAIL"
                    } else {
                        "warn"
                    };
                    stepproof::out!("{mark} {:<40} {}", c.feature, c.detail);
                }
                stepproof::out!(
                    "default profile: {}",
                    if ok {
                        "can be enforced here"
                    } else {
                        "CANNOT be enforced here"
                    }
                );
                for run in &owed {
                    stepproof::out!("OWED {}", run.what);
                }
                if !owed.is_empty() {
                    let mut workspaces: Vec<&str> =
                        owed.iter().filter_map(|o| o.workspace.as_deref()).collect();
                    workspaces.sort_unstable();
                    workspaces.dedup();
                    stepproof::out!(
                        "work owed: {} run(s) died before their end, in {}; until `stepproof repair` (or the next run there) finishes it, what a run left there (a repository config with a key that runs code) may be where the host's tools act on it",
                        owed.len(),
                        if workspaces.is_empty() {
                            "unknown workspaces (`stepproof repair --all`)".to_string()
                        } else {
                            workspaces.join(", ")
                        }
                    );
                }
            }
            if ok { 0 } else { 1 }
        }
    };
    std::process::exit(code);
}
