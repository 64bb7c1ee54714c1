//! Environment variables that make a tool run a program: `GIT_PAGER='…' git log` runs what
//! the variable names, so its value is judged as that command wherever the variable is set
//! (a prefix, `env`, `export`, `declare -x`, a plain assignment to an exported name, a `for`
//! loop). A value that loads code the hook cannot see (`LD_PRELOAD`, `BASH_ENV`) or that is
//! computed at run time is unknown.

use super::Walker;
use crate::pattern::Arg;

/// What a variable's value is to the programs that read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// A shell command line (pagers, editors, `GIT_SSH_COMMAND`); `with_args` when the tool
    /// appends arguments (an editor gets the file).
    Command { with_args: bool },
    /// A program's path, run with arguments the hook cannot know.
    Program,
    /// less's input preprocessor: `|cmd %s`, `||cmd %s` or `cmd %s`.
    LessPipe,
    /// Code loaded from a file or library the hook cannot see (`LD_PRELOAD`, `BASH_ENV`);
    /// harmless only when empty.
    Loads,
    /// A git configuration file (`GIT_CONFIG_GLOBAL`): it can name pagers, aliases, hooks;
    /// harmless only when empty or `/dev/null`.
    ConfigFile,
    /// Node.js command-line options (`--require` loads code).
    NodeOptions,
}

/// The names of the variables whose value a tool runs or loads (see [`VARIABLES`]): the
/// supervisor pins them in Claude Code's managed settings, so that no other settings file's
/// `env` sets them for the commands the hook judged without them.
pub fn program_variables() -> impl Iterator<Item = &'static str> {
    VARIABLES.iter().map(|(name, _)| *name)
}

/// Variables whose value a tool runs or loads, from each tool's manual: git(1) ENVIRONMENT
/// VARIABLES, git-var(1), less(1) INPUT PREPROCESSOR, bash(1) INVOCATION, ld.so(8), python(1),
/// node(1), ssh(1) and ssh-askpass, sudo(8), man(1), rg(1) CONFIGURATION FILES.
const VARIABLES: &[(&str, Runs)] = &[
    ("GIT_PAGER", Runs::Command { with_args: false }),
    ("PAGER", Runs::Command { with_args: false }),
    ("MANPAGER", Runs::Command { with_args: false }),
    ("GIT_EDITOR", Runs::Command { with_args: true }),
    ("GIT_SEQUENCE_EDITOR", Runs::Command { with_args: true }),
    ("EDITOR", Runs::Command { with_args: true }),
    ("VISUAL", Runs::Command { with_args: true }),
    ("GIT_SSH_COMMAND", Runs::Command { with_args: true }),
    ("GIT_EXTERNAL_DIFF", Runs::Command { with_args: true }),
    ("GIT_PROXY_COMMAND", Runs::Command { with_args: true }),
    ("BROWSER", Runs::Command { with_args: true }),
    ("PROMPT_COMMAND", Runs::Command { with_args: false }),
    ("GIT_SSH", Runs::Program),
    ("GIT_ASKPASS", Runs::Program),
    ("SSH_ASKPASS", Runs::Program),
    ("SUDO_ASKPASS", Runs::Program),
    ("LESSOPEN", Runs::LessPipe),
    ("LESSCLOSE", Runs::LessPipe),
    ("LD_PRELOAD", Runs::Loads),
    ("LD_LIBRARY_PATH", Runs::Loads),
    ("LD_AUDIT", Runs::Loads),
    ("BASH_ENV", Runs::Loads),
    ("ENV", Runs::Loads),
    ("PYTHONSTARTUP", Runs::Loads),
    ("PERL5OPT", Runs::Loads),
    ("RUBYOPT", Runs::Loads),
    ("JAVA_TOOL_OPTIONS", Runs::Loads),
    ("_JAVA_OPTIONS", Runs::Loads),
    ("GIT_CONFIG_PARAMETERS", Runs::Loads),
    ("GIT_CONFIG_COUNT", Runs::Loads),
    ("GIT_EXEC_PATH", Runs::Loads),
    ("GIT_TEMPLATE_DIR", Runs::Loads),
    ("RIPGREP_CONFIG_PATH", Runs::Loads),
    ("GIT_CONFIG", Runs::ConfigFile),
    ("GIT_CONFIG_GLOBAL", Runs::ConfigFile),
    ("GIT_CONFIG_SYSTEM", Runs::ConfigFile),
    ("NODE_OPTIONS", Runs::NodeOptions),
];

/// Variable name prefixes treated as `Runs::Loads` (`GIT_CONFIG_KEY_0`, `GIT_CONFIG_VALUE_0`:
/// configuration given through the environment, as with `git -c`).
const LOADS_PREFIXES: &[&str] = &["GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"];

/// Node.js options that only tune the runtime (node(1)); any other option in `NODE_OPTIONS`
/// (`--require`, `--import`, `--loader`, …) may load code and is unknown.
const HARMLESS_NODE_OPTIONS: &[&str] = &[
    "--max-old-space-size",
    "--max-semi-space-size",
    "--stack-size",
    "--stack-trace-limit",
    "--enable-source-maps",
    "--no-warnings",
    "--no-deprecation",
    "--trace-warnings",
    "--trace-deprecation",
    "--trace-uncaught",
    "--trace-exit",
    "--throw-deprecation",
    "--pending-deprecation",
    "--unhandled-rejections",
    "--openssl-legacy-provider",
    "--use-openssl-ca",
    "--use-bundled-ca",
    "--dns-result-order",
    "--max-http-header-size",
    "--experimental-vm-modules",
    "--experimental-specifier-resolution",
    "--no-experimental-fetch",
    "--preserve-symlinks",
    "--preserve-symlinks-main",
    "--disable-warning",
    "--heapsnapshot-near-heap-limit",
    "--title",
    "--conditions",
    "--no-network-family-autoselection",
];

fn runs(name: &str) -> Option<Runs> {
    VARIABLES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| *r)
        .or_else(|| {
            LOADS_PREFIXES
                .iter()
                .any(|p| name.starts_with(p))
                .then_some(Runs::Loads)
        })
}

/// Whether setting `name` can make a program run (see `VARIABLES`).
pub(super) fn runs_programs(name: &str) -> bool {
    runs(name).is_some()
}

impl Walker<'_> {
    /// Judges the value given to a variable that makes tools run programs; other variables
    /// are ignored (their names still reach `env` rules through the invocation).
    pub(super) fn program_variable(&mut self, name: &str, value: &Arg) {
        let Some(runs) = runs(name) else {
            return;
        };
        let text = match value {
            Arg::Static(text) => text.trim(),
            Arg::Dynamic | Arg::Partial { .. } => {
                self.unknown(format!(
                    "`{name}` makes tools run a program, and its value is computed at run time"
                ));
                return;
            }
        };
        if text.is_empty() {
            return;
        }
        match runs {
            Runs::Command { with_args } => {
                if with_args {
                    // The tool appends its own arguments (the file to edit, the host).
                    self.script(&format!("{text} \"$@\""));
                } else {
                    self.script(text);
                }
            }
            Runs::Program => {
                self.dispatch_args(
                    vec![Arg::Static(text.to_string()), Arg::Dynamic],
                    Vec::new(),
                    super::Stdin::Inherited,
                );
            }
            Runs::LessPipe => {
                let command = text.trim_start_matches('|').trim_start_matches('-');
                self.script(&command.replace("%s", "\"$1\""));
            }
            Runs::Loads => self.unknown(format!(
                "`{name}` makes programs load code the hook cannot see"
            )),
            Runs::ConfigFile if text == "/dev/null" => {}
            Runs::ConfigFile => self.unknown(format!(
                "`{name}` names a git configuration file the hook cannot see (it can set pagers, aliases and hooks)"
            )),
            Runs::NodeOptions => {
                let mut previous_harmless = false;
                for option in text.split_whitespace() {
                    let flag = option.split('=').next().unwrap_or_default();
                    // A value may follow its option as the next word (`--stack-size 4096`).
                    let value_of_previous = previous_harmless && !option.starts_with('-');
                    previous_harmless = HARMLESS_NODE_OPTIONS.contains(&flag);
                    if !previous_harmless && !value_of_previous {
                        self.unknown(format!(
                            "`NODE_OPTIONS` holds `{option}`, which may load code the hook cannot see"
                        ));
                        return;
                    }
                }
            }
        }
    }
}
