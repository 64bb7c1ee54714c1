//! Man pages and shell completions for `stepproof-run` and `stepproof`, written from their
//! clap definitions by the hidden `stepproof generate` (what `scripts/build-tarball` packs): the
//! pages and completions cannot drift from the flags they describe.

use clap::Subcommand;
use clap_complete::{Generator as _, Shell};
use std::path::{Path, PathBuf};

/// `stepproof generate …` (hidden: for packagers).
#[derive(Subcommand, Debug)]
pub enum GenerateCommand {
    /// Write one page per command and visible subcommand (`stepproof-run.1`, `stepproof.1`,
    /// `stepproof-audit-verify.1`, …) into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Write SHELL's completion scripts for both programs into DIR, named as that shell's
    /// completion directories expect (bash: `stepproof-run`, zsh: `_stepproof-run`, fish:
    /// `stepproof-run.fish`).
    Completions {
        shell: Shell,
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum ManualError {
    #[error("creating {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The file name SHELL's completion directory expects for the program NAME. bash-completion
/// loads `completions/NAME` on first use, so the bash script carries no suffix.
pub fn completion_file_name(shell: Shell, name: &str) -> String {
    match shell {
        Shell::Bash => name.to_string(),
        other => other.file_name(name),
    }
}

/// Writes the man pages of COMMANDS (each with its visible subcommands) into DIR; returns the
/// files written.
pub fn write_man_pages(
    commands: &[clap::Command],
    dir: &Path,
) -> Result<Vec<PathBuf>, ManualError> {
    create_dir(dir)?;
    let mut written = Vec::new();
    for command in commands {
        let mut command = command.clone().disable_help_subcommand(true);
        command.build();
        write_pages_of(&command, dir, &mut written)?;
    }
    Ok(written)
}

/// One page for COMMAND, then one for each subcommand a user can see (hidden internals have
/// none).
fn write_pages_of(
    command: &clap::Command,
    dir: &Path,
    written: &mut Vec<PathBuf>,
) -> Result<(), ManualError> {
    let man = clap_mangen::Man::new(command.clone());
    let path = dir.join(man.get_filename());
    let mut page = Vec::new();
    man.render(&mut page)
        .and_then(|()| std::fs::write(&path, &page))
        .map_err(|source| ManualError::Write {
            path: path.clone(),
            source,
        })?;
    written.push(path);
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages_of(sub, dir, written)?;
    }
    Ok(())
}

/// Writes SHELL's completion script of each of COMMANDS into DIR; returns the files written.
pub fn write_completions(
    commands: &[clap::Command],
    shell: Shell,
    dir: &Path,
) -> Result<Vec<PathBuf>, ManualError> {
    create_dir(dir)?;
    let mut written = Vec::new();
    for command in commands {
        let mut command = without_hidden_subcommands(command);
        let name = command.get_name().to_string();
        let path = dir.join(completion_file_name(shell, &name));
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut command, &name, &mut script);
        std::fs::write(&path, &script).map_err(|source| ManualError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

/// COMMAND without its hidden subcommands, which clap_complete's scripts would otherwise offer
/// (`stepproof __probe`). Hidden flags stay (`stepproof-run --selftest`): another argument's
/// requirements may name them, and clap checks those names when it builds the command.
fn without_hidden_subcommands(command: &clap::Command) -> clap::Command {
    let mut visible = clap::Command::new(command.get_name().to_string())
        .args(command.get_arguments().cloned())
        .groups(command.get_groups().cloned())
        .subcommands(
            command
                .get_subcommands()
                .filter(|s| !s.is_hide_set())
                .map(without_hidden_subcommands),
        );
    if let Some(about) = command.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(version) = command.get_version() {
        visible = visible.version(version.to_string());
    }
    visible
}

fn create_dir(dir: &Path) -> Result<(), ManualError> {
    std::fs::create_dir_all(dir).map_err(|source| ManualError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })
}

/// `stepproof generate`: the files written, one a line; exit 0, or 2 with the error.
pub fn run_command(action: GenerateCommand, commands: &[clap::Command]) -> i32 {
    let written = match action {
        GenerateCommand::Man { dir } => write_man_pages(commands, &dir),
        GenerateCommand::Completions { shell, dir } => write_completions(commands, shell, &dir),
    };
    match written {
        Ok(files) => {
            for file in files {
                println!("{}", file.display());
            }
            0
        }
        Err(e) => {
            crate::say!("stepproof generate: {e}");
            2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn commands() -> Vec<clap::Command> {
        vec![crate::cli::run::args::Args::command()]
    }

    #[test]
    fn completion_files_are_named_as_each_shell_looks_for_them() {
        assert_eq!(
            completion_file_name(Shell::Bash, "stepproof-run"),
            "stepproof-run"
        );
        assert_eq!(
            completion_file_name(Shell::Zsh, "stepproof-run"),
            "_stepproof-run"
        );
        assert_eq!(
            completion_file_name(Shell::Fish, "stepproof-run"),
            "stepproof-run.fish"
        );
    }

    #[derive(clap::Parser)]
    struct WithInternals {
        #[command(subcommand)]
        command: Internals,
    }

    #[derive(clap::Subcommand)]
    enum Internals {
        /// Visible.
        Doctor,
        #[command(name = "__probe", hide = true)]
        Probe,
    }

    #[test]
    fn completions_offer_no_hidden_subcommand() {
        let dir = tempfile::tempdir().unwrap();
        let command = WithInternals::command().name("tool");
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let written =
                write_completions(std::slice::from_ref(&command), shell, dir.path()).unwrap();
            let script = std::fs::read_to_string(&written[0]).unwrap();
            assert!(script.contains("doctor"), "{shell}: {script}");
            assert!(!script.contains("__probe"), "{shell}: {script}");
        }
    }

    #[test]
    fn the_run_page_documents_its_flags_and_hides_the_internal_ones() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_man_pages(&commands(), dir.path()).unwrap();
        assert_eq!(written, vec![dir.path().join("stepproof-run.1")]);
        let page = std::fs::read_to_string(&written[0]).unwrap();
        assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
        assert!(page.contains(".TH stepproof-run 1"), "{page}");
        assert!(page.contains("fail\\-on\\-deny"), "{page}");
        assert!(!page.contains("verifier\\-agent"), "{page}");
        assert!(!page.contains("selftest"), "{page}");
    }
}
