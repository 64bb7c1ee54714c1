//! git's grammar: its global options (`-C`, `-c`, `--git-dir`, `--no-pager`, …, matched
//! exactly, as git.c does), the subcommand, and the subcommand's options as parse-options
//! reads them (clusters, attached values, unambiguous abbreviations of long options). The
//! rules see `git SUBCOMMAND ARGS` with the global options taken off and the options written
//! out (`git -C x push -fu` → `git push -f -u`); what git would run on the way (a `-c` pager,
//! `rebase --exec`, `grep -O`, `--upload-pack`) and the files it would write (`--output`) are
//! effects of their own.

use super::options::{Grammar, Name, Parsed};
use super::{Stdin, Walker};
use crate::pattern::{Arg, is_env_file, wildcard};

/// `git push` (git 2.47, `git push -h` and `--git-completion-helper-all`).
const PUSH: Grammar = Grammar {
    short: "vqdnfuo:46",
    long: "verbose quiet repo= all branches mirror delete tags dry-run porcelain force \
        force-with-lease? force-if-includes recurse-submodules= thin receive-pack= exec= \
        set-upstream progress prune no-verify verify follow-tags signed? atomic push-option= \
        ipv4 ipv6",
    abbreviations: true,
    stop_at_operand: false,
};

const FETCH: Grammar = Grammar {
    short: "vqafmtnj:pPkuo:46",
    long: "verbose quiet all set-upstream append atomic upload-pack= force multiple tags jobs= \
        prefetch prune prune-tags recurse-submodules? dry-run porcelain write-fetch-head keep \
        update-head-ok progress depth= shallow-since= shallow-exclude= deepen= unshallow \
        refetch update-shallow refmap= server-option= ipv4 ipv6 negotiation-tip= \
        negotiate-only filter= auto-maintenance auto-gc show-forced-updates \
        write-commit-graph stdin submodule-prefix= recurse-submodules-default=",
    abbreviations: true,
    stop_at_operand: false,
};

const PULL: Grammar = Grammar {
    short: "vqr::ns:X:S::aftpj::ko:46",
    long: "verbose quiet progress recurse-submodules? rebase? stat summary log? signoff? \
        squash commit edit cleanup= ff ff-only verify verify-signatures autostash strategy= \
        strategy-option= gpg-sign? allow-unrelated-histories all append upload-pack= force \
        tags prune jobs? dry-run keep depth= shallow-since= shallow-exclude= deepen= \
        unshallow update-shallow refmap= server-option= ipv4 ipv6 negotiation-tip= \
        show-forced-updates set-upstream no-stat no-summary no-log no-commit no-edit no-ff \
        no-verify no-rebase no-autostash no-tags",
    abbreviations: true,
    stop_at_operand: false,
};

const CLONE: Grammar = Grammar {
    short: "vqnlsj:o:b:u:c:46",
    long: "verbose quiet progress reject-shallow no-checkout checkout bare naked mirror local \
        no-hardlinks hardlinks shared recurse-submodules? recursive? jobs= template= \
        reference= reference-if-able= dissociate origin= branch= upload-pack= depth= \
        shallow-since= shallow-exclude= single-branch no-tags tags shallow-submodules \
        separate-git-dir= ref-format= config= server-option= ipv4 ipv6 filter= \
        also-filter-submodules remote-submodules sparse bundle-uri=",
    abbreviations: true,
    stop_at_operand: false,
};

const LS_REMOTE: Grammar = Grammar {
    short: "qtbo:",
    long: "quiet tags branches heads refs upload-pack= exit-code get-url sort= symref \
        server-option=",
    abbreviations: true,
    stop_at_operand: false,
};

const RESET: Grammar = Grammar {
    short: "qpN",
    long: "quiet no-refresh refresh mixed soft hard merge keep recurse-submodules? patch \
        intent-to-add pathspec-from-file= pathspec-file-nul",
    abbreviations: true,
    stop_at_operand: false,
};

const CHECKOUT: Grammar = Grammar {
    short: "b:B:lqmdt::f23p",
    long: "guess overlay quiet recurse-submodules? progress merge conflict= detach track? \
        force orphan= overwrite-ignore ignore-other-worktrees ours theirs patch \
        ignore-skip-worktree-bits pathspec-from-file= pathspec-file-nul no-guess no-overlay \
        no-track",
    abbreviations: true,
    stop_at_operand: false,
};

const RESTORE: Grammar = Grammar {
    short: "s:SWqm23p",
    long: "source= staged worktree ignore-unmerged overlay quiet recurse-submodules? progress \
        merge conflict= ours theirs patch ignore-skip-worktree-bits pathspec-from-file= \
        pathspec-file-nul no-overlay",
    abbreviations: true,
    stop_at_operand: false,
};

const SWITCH: Grammar = Grammar {
    short: "c:C:qmdt::f",
    long: "create= force-create= guess discard-changes quiet recurse-submodules? progress \
        merge conflict= detach track? force orphan= overwrite-ignore ignore-other-worktrees \
        no-guess no-track",
    abbreviations: true,
    stop_at_operand: false,
};

const BRANCH: Grammar = Grammar {
    short: "vqt::u:radDmMcClfi",
    long: "verbose quiet track? set-upstream-to= unset-upstream color? remotes contains= \
        no-contains= abbrev? all delete move omit-empty copy list show-current \
        create-reflog edit-description force merged= no-merged= column? sort= points-at= \
        ignore-case recurse-submodules format= set-upstream no-color no-abbrev no-column",
    abbreviations: true,
    stop_at_operand: false,
};

const CLEAN: Grammar = Grammar {
    short: "qnfide:xX",
    long: "quiet dry-run force interactive exclude=",
    abbreviations: true,
    stop_at_operand: false,
};

const REBASE: Grammar = Grammar {
    short: "qvnC:fmiS::x:r::s:X:",
    long: "onto= keep-base no-verify verify quiet verbose no-stat stat signoff \
        committer-date-is-author-date reset-author-date ignore-whitespace whitespace= \
        force-rebase no-ff ff continue skip abort quit edit-todo show-current-patch apply \
        merge interactive rerere-autoupdate empty= keep-empty autosquash update-refs \
        gpg-sign? autostash exec= rebase-merges? fork-point strategy= strategy-option= root \
        reschedule-failed-exec reapply-cherry-picks no-autosquash no-autostash \
        no-update-refs no-rebase-merges no-fork-point no-keep-empty",
    abbreviations: true,
    stop_at_operand: false,
};

const GREP: Grammar = Grammar {
    short: "viwaIrEGFPnhHlLzocC:B:A:pWf:e:qO::m:",
    long: "cached no-index untracked exclude-standard recurse-submodules invert-match \
        ignore-case word-regexp text textconv recursive max-depth= extended-regexp \
        basic-regexp fixed-strings perl-regexp line-number column full-name \
        files-with-matches name-only files-without-match null only-matching count color? \
        break heading context= before-context= after-context= threads= show-function \
        function-context and or not quiet all-match open-files-in-pager? ext-grep \
        max-count= index no-textconv no-color no-recursive",
    abbreviations: true,
    stop_at_operand: false,
};

const MERGE: Grammar = Grammar {
    short: "nes:X:m:F:vqS::",
    long: "stat summary log? squash commit edit cleanup= ff ff-only rerere-autoupdate \
        verify-signatures strategy= strategy-option= message= file= into-name= verbose \
        quiet abort quit continue allow-unrelated-histories progress gpg-sign? autostash \
        overwrite-ignore signoff verify no-stat no-commit no-edit no-ff no-verify",
    abbreviations: true,
    stop_at_operand: false,
};

const CHERRY_PICK: Grammar = Grammar {
    short: "nesm:X:S::x",
    long: "quit continue abort skip cleanup= no-commit edit signoff mainline= rerere-autoupdate \
        strategy= strategy-option= gpg-sign? ff allow-empty allow-empty-message empty= \
        keep-redundant-commits",
    abbreviations: true,
    stop_at_operand: false,
};

const ARCHIVE: Grammar = Grammar {
    short: "o:vl",
    long: "format= prefix= add-file= add-virtual-file= output= worktree-attributes verbose \
        remote= exec= list mtime= compression-level=",
    abbreviations: true,
    stop_at_operand: false,
};

const DIFFTOOL: Grammar = Grammar {
    short: "gdyt:x:",
    long: "gui dir-diff no-prompt prompt symlinks no-symlinks tool= tool-help extcmd= \
        trust-exit-code no-trust-exit-code no-index",
    abbreviations: true,
    stop_at_operand: false,
};

/// `git worktree` and its subcommands' options together (add, list, lock, move, prune,
/// remove, repair, unlock): the subcommand is the first operand.
const WORKTREE: Grammar = Grammar {
    short: "fb:B:dqnvz",
    long: "force detach checkout lock reason= orphan track guess-remote quiet porcelain \
        verbose expire= dry-run relative-paths no-checkout no-track no-guess-remote",
    abbreviations: true,
    stop_at_operand: false,
};

const RM: Grammar = Grammar {
    short: "nrfq",
    long: "cached dry-run force quiet ignore-unmatch sparse pathspec-from-file= \
        pathspec-file-nul",
    abbreviations: true,
    stop_at_operand: false,
};

/// The subcommand's grammar, when the hook knows it (others keep their arguments as given).
fn grammar(subcommand: &str) -> Option<&'static Grammar> {
    Some(match subcommand {
        "push" => &PUSH,
        "fetch" => &FETCH,
        "pull" => &PULL,
        "clone" => &CLONE,
        "ls-remote" => &LS_REMOTE,
        "reset" => &RESET,
        "checkout" => &CHECKOUT,
        "restore" => &RESTORE,
        "switch" => &SWITCH,
        "branch" => &BRANCH,
        "clean" => &CLEAN,
        "rebase" => &REBASE,
        "grep" => &GREP,
        "merge" => &MERGE,
        "cherry-pick" | "revert" => &CHERRY_PICK,
        "archive" => &ARCHIVE,
        "difftool" => &DIFFTOOL,
        "rm" => &RM,
        "worktree" => &WORKTREE,
        _ => return None,
    })
}

/// Subcommands that take the diff and revision options' `--output=<file>` (diff-options in
/// git-diff(1)); each checked with git 2.47 by writing a file.
const DIFF_FAMILY: &[&str] = &[
    "diff",
    "log",
    "show",
    "whatchanged",
    "format-patch",
    "range-diff",
    "diff-tree",
    "diff-index",
    "diff-files",
    "stash",
    "rev-list",
    "shortlog",
    "blame",
    "annotate",
    "reflog",
];

/// Merge strategies built into git (git-merge(1) MERGE STRATEGIES); another name runs the
/// program `git-merge-NAME`.
const BUILTIN_STRATEGIES: &[&str] = &["ort", "recursive", "resolve", "octopus", "ours", "subtree"];

/// What a git configuration value is to git (git-config(1) VARIABLES).
#[derive(Debug, Clone, Copy)]
enum ConfigKey {
    /// Read as data: harmless.
    Harmless,
    /// A shell command line git runs.
    Command,
    /// A program's path git runs.
    Program,
    /// A command line, a boolean or nothing (pagers, `core.fsmonitor`).
    CommandOrBool,
    /// A command line when it starts with `!` (helpers, `submodule.*.update`); a name or path
    /// otherwise (another program).
    BangCommand,
    /// An alias (`!` runs a command line; otherwise git arguments).
    Alias,
    /// Something the hook cannot follow (hooks directories, included files, other programs).
    Unknown,
}

/// Keys (lower case, `*` for a subsection) whose values git runs.
const CONFIG_RUNS: &[(&str, ConfigKey)] = &[
    ("core.pager", ConfigKey::CommandOrBool),
    ("pager.*", ConfigKey::CommandOrBool),
    ("core.editor", ConfigKey::Command),
    ("sequence.editor", ConfigKey::Command),
    ("core.sshcommand", ConfigKey::Command),
    ("core.gitproxy", ConfigKey::Command),
    ("core.fsmonitor", ConfigKey::CommandOrBool),
    ("core.alternaterefscommand", ConfigKey::Command),
    ("core.askpass", ConfigKey::Program),
    ("core.hookspath", ConfigKey::Unknown),
    ("core.worktree", ConfigKey::Unknown),
    ("diff.external", ConfigKey::Command),
    ("diff.*.command", ConfigKey::Command),
    ("diff.*.textconv", ConfigKey::Command),
    ("merge.*.driver", ConfigKey::Command),
    ("filter.*.clean", ConfigKey::Command),
    ("filter.*.smudge", ConfigKey::Command),
    ("filter.*.process", ConfigKey::Command),
    ("difftool.*.cmd", ConfigKey::Command),
    ("mergetool.*.cmd", ConfigKey::Command),
    ("difftool.*.path", ConfigKey::Program),
    ("mergetool.*.path", ConfigKey::Program),
    ("browser.*.cmd", ConfigKey::Command),
    ("browser.*.path", ConfigKey::Program),
    ("man.*.cmd", ConfigKey::Command),
    ("man.*.path", ConfigKey::Program),
    ("web.browser", ConfigKey::Program),
    ("gpg.program", ConfigKey::Program),
    ("gpg.*.program", ConfigKey::Program),
    ("gpg.ssh.defaultkeycommand", ConfigKey::Command),
    ("interactive.difffilter", ConfigKey::Command),
    ("trailer.*.command", ConfigKey::Command),
    ("trailer.*.cmd", ConfigKey::Command),
    ("uploadpack.packobjectshook", ConfigKey::Command),
    ("remote.*.uploadpack", ConfigKey::Command),
    ("remote.*.receivepack", ConfigKey::Command),
    ("remote.*.vcs", ConfigKey::Unknown),
    // A mirror or a `+` push refspec makes a plain `git push` rewrite or delete remote refs.
    ("remote.*.mirror", ConfigKey::Unknown),
    ("remote.*.push", ConfigKey::Unknown),
    ("submodule.*.update", ConfigKey::BangCommand),
    ("credential.helper", ConfigKey::BangCommand),
    ("credential.*.helper", ConfigKey::BangCommand),
    ("alias.*", ConfigKey::Alias),
    ("include.path", ConfigKey::Unknown),
    ("includeif.*.path", ConfigKey::Unknown),
    ("init.templatedir", ConfigKey::Unknown),
    ("protocol.allow", ConfigKey::Unknown),
    ("protocol.*.allow", ConfigKey::Unknown),
    ("sendemail.*", ConfigKey::Unknown),
    ("instaweb.*", ConfigKey::Unknown),
];

/// Sections whose keys are data (display, identity, defaults of commands), when no entry of
/// `CONFIG_RUNS` matches first.
const CONFIG_HARMLESS_SECTIONS: &[&str] = &[
    "user",
    "author",
    "committer",
    "color",
    "advice",
    "i18n",
    "column",
    "status",
    "log",
    "format",
    "pretty",
    "merge",
    "diff",
    "pull",
    "push",
    "fetch",
    "rebase",
    "rerere",
    "branch",
    "init",
    "commit",
    "tag",
    "blame",
    "grep",
    "gc",
    "maintenance",
    "pack",
    "index",
    "feature",
    "safe",
    "checkout",
    "clone",
    "am",
    "apply",
    "help",
    "transfer",
    "http",
    "credential",
    "submodule",
    "remote",
    "url",
    "versionsort",
    "notes",
    "stash",
    "worktree",
    "fsck",
    "repack",
    "splitindex",
    "reset",
];

/// Keys of `core` that are data.
const CORE_HARMLESS: &[&str] = &[
    "quotepath",
    "autocrlf",
    "eol",
    "safecrlf",
    "filemode",
    "ignorecase",
    "abbrev",
    "longpaths",
    "symlinks",
    "untrackedcache",
    "whitespace",
    "commentchar",
    "commentstring",
    "precomposeunicode",
    "bigfilethreshold",
    "compression",
    "loosecompression",
    "preloadindex",
    "checkstat",
    "trustctime",
    "logallrefupdates",
    "sparsecheckout",
    "sparsecheckoutcone",
    "splitindex",
    "multipackindex",
    "commitgraph",
    "deltabasecachesize",
    "packedgitlimit",
    "packedgitwindowsize",
    "attributesfile",
    "excludesfile",
    "warnambiguousrefs",
    "fsyncmethod",
    "fsync",
    "createobject",
    "notesref",
    "restrictinheritedhandles",
    "unsetenvvars",
    "hidedotfiles",
    "checkroundtripencoding",
    "autocrlfsafe",
    "maxtreedepth",
];

fn classify_config(key: &str) -> ConfigKey {
    // Section and variable names are case-insensitive; a subsection (the middle) is not, but
    // lower-casing it only makes more keys match the patterns above.
    let lower = key.to_ascii_lowercase();
    if let Some((_, kind)) = CONFIG_RUNS.iter().find(|(p, _)| wildcard(p, &lower)) {
        return *kind;
    }
    let section = lower.split('.').next().unwrap_or_default();
    let variable = lower.rsplit('.').next().unwrap_or_default();
    if section == "core" && CORE_HARMLESS.contains(&variable) && lower.matches('.').count() == 1 {
        return ConfigKey::Harmless;
    }
    if CONFIG_HARMLESS_SECTIONS.contains(&section) && section != "core" {
        return ConfigKey::Harmless;
    }
    ConfigKey::Unknown
}

fn is_boolean(value: &str) -> bool {
    matches!(
        value.to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    )
}

/// What `Walker::git` judges after git itself.
struct GitAfter {
    settings: Vec<(String, Arg)>,
    problems: Vec<String>,
    parsed: Option<Parsed>,
    subcommand: String,
    /// The subcommand's arguments, when it is of the diff family (`--output=FILE`).
    output_args: Option<Vec<Arg>>,
    directory: Option<Option<String>>,
}

/// git's global options that take a value, written `--name=value` or `--name value`.
const GLOBAL_WITH_VALUE: &[&str] = &[
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--config-env",
    "--attr-source",
    "--shallow-file",
];

/// git's global switches (git(1) OPTIONS; git.c matches them exactly: no abbreviations).
const GLOBAL_SWITCHES: &[&str] = &[
    "-p",
    "--paginate",
    "-P",
    "--no-pager",
    "--no-replace-objects",
    "--no-lazy-fetch",
    "--no-optional-locks",
    "--no-advice",
    "--bare",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--html-path",
    "--man-path",
    "--info-path",
];

impl Walker<'_> {
    /// `git …`: the global options are judged and taken off, the subcommand's options
    /// written out, what git runs on the way judged as itself (after git, so that a message
    /// names git first).
    pub(super) fn git(&mut self, args: Vec<Arg>, assigns: Vec<String>) {
        let mut i = 0;
        // `-C` directories, joined: relative output files are under them.
        let mut directory: Option<Option<String>> = None;
        // `-c KEY=VALUE` and `--config-env KEY=ENV` (a value from the environment: computed).
        let mut settings: Vec<(String, Arg)> = Vec::new();
        let mut problems: Vec<String> = Vec::new();
        let mut version_or_help = None;
        while i < args.len() {
            let text = match &args[i] {
                Arg::Static(s) => s.clone(),
                Arg::Dynamic | Arg::Partial { .. } => {
                    self.exec("git".into(), args, assigns);
                    return self.unknown(
                        "a git argument computed at run time stands where git reads its options or subcommand",
                    );
                }
            };
            if !text.starts_with('-') {
                break;
            }
            let value_of = |i: usize| args.get(i + 1).cloned();
            match text.as_str() {
                "-C" => {
                    let dir = match value_of(i) {
                        Some(Arg::Static(d)) => directory
                            .clone()
                            .unwrap_or(Some(String::new()))
                            .map(|prev| join(&prev, &d)),
                        _ => None,
                    };
                    directory = Some(dir);
                    i += 2;
                }
                "-c" => {
                    match value_of(i) {
                        Some(Arg::Static(pair)) => {
                            let (key, value) = pair.split_once('=').unwrap_or((&pair, ""));
                            settings.push((key.to_string(), Arg::Static(value.to_string())));
                        }
                        _ => problems.push("`git -c` with a setting computed at run time".into()),
                    }
                    i += 2;
                }
                "-v" | "--version" => {
                    version_or_help = Some("--version");
                    i += 1;
                }
                "-h" | "--help" => {
                    version_or_help = Some("help");
                    i += 1;
                }
                "--exec-path" => {
                    version_or_help = Some("--exec-path");
                    i += 1;
                }
                s if GLOBAL_SWITCHES.contains(&s) || s.starts_with("--list-cmds=") => i += 1,
                s if s.starts_with("--exec-path=") => {
                    problems.push("`git --exec-path=DIR` runs git's own programs from DIR".into());
                    i += 1;
                }
                s => {
                    let (name, attached) = match s.split_once('=') {
                        Some((n, v)) => (n, Some(Arg::Static(v.to_string()))),
                        None => (s, None),
                    };
                    if !GLOBAL_WITH_VALUE.contains(&name) {
                        // git refuses an unknown option and runs nothing; the rules see it
                        // as written.
                        return self.exec("git".into(), args, assigns);
                    }
                    let value = match attached {
                        Some(v) => {
                            i += 1;
                            Some(v)
                        }
                        None => {
                            i += 2;
                            value_of(i - 2)
                        }
                    };
                    if name == "--config-env" {
                        match value {
                            Some(Arg::Static(pair)) => {
                                let key = pair.split_once('=').map_or(pair.as_str(), |(k, _)| k);
                                settings.push((key.to_string(), Arg::Dynamic));
                            }
                            _ => problems.push("`git --config-env` computed at run time".into()),
                        }
                    }
                }
            }
        }
        let aliases: Vec<(String, String)> = settings
            .iter()
            .filter_map(|(key, value)| match (key.split_once('.'), value) {
                (Some((section, name)), Arg::Static(v))
                    if section.eq_ignore_ascii_case("alias") =>
                {
                    Some((name.to_string(), v.clone()))
                }
                _ => None,
            })
            .collect();
        let mut after = GitAfter {
            settings,
            problems,
            parsed: None,
            subcommand: String::new(),
            output_args: None,
            directory,
        };
        if i >= args.len() {
            let shown = match version_or_help {
                Some(word) => vec![Arg::Static(word.to_string())],
                None => args,
            };
            self.exec("git".into(), shown, assigns);
            return self.git_after(after);
        }
        let Arg::Static(mut subcommand) = args[i].clone() else {
            return self.unknown("git's subcommand is computed at run time");
        };
        let mut rest: Vec<Arg> = args[i + 1..].to_vec();
        // An alias given with `-c alias.NAME=…` replaces the subcommand (once: git does not
        // expand an alias inside an alias of the same name either).
        if let Some((_, expansion)) = aliases
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(&subcommand))
        {
            let expansion = expansion.clone();
            if let Some(command) = expansion.strip_prefix('!') {
                self.script(&format!("{command} \"$@\""));
                return self.git_after(after);
            }
            let mut words = expansion.split_whitespace().map(str::to_string);
            match words.next() {
                Some(first) => {
                    let mut expanded: Vec<Arg> = words.map(Arg::Static).collect();
                    expanded.extend(rest);
                    rest = expanded;
                    subcommand = first;
                }
                None => {
                    self.exec("git".into(), args, assigns);
                    return self.git_after(after);
                }
            }
        }
        // `git CMD --help` is `git help CMD` (git.c turns it so), and `git CMD -h` alone prints
        // the command's usage.
        let asks_help = match rest.as_slice() {
            [Arg::Static(first), ..] if first == "--help" => true,
            [Arg::Static(only)] => only == "-h",
            _ => false,
        };
        if asks_help {
            rest = vec![Arg::Static(std::mem::replace(
                &mut subcommand,
                "help".into(),
            ))];
        }
        let canonical = match grammar(&subcommand) {
            Some(grammar) => {
                let mut parsed = grammar.parse(&rest);
                spell_out(&subcommand, &mut parsed);
                let canonical = parsed.canonical();
                after.parsed = Some(parsed);
                canonical
            }
            None => rest.clone(),
        };
        let env_files = shown_env_files(&subcommand, &rest, after.directory.as_ref());
        let change = git_change(&subcommand, after.parsed.as_ref(), &rest);
        if DIFF_FAMILY.contains(&subcommand.as_str()) {
            after.output_args = Some(rest);
        }
        after.subcommand = subcommand.clone();
        let mut shown = vec![Arg::Static(subcommand)];
        shown.extend(canonical);
        // The secret first, so that a message names it.
        for path in env_files {
            self.file(Some(path), false);
        }
        self.exec_changing("git".into(), shown, assigns, change, Vec::new());
        self.git_after(after);
    }

    /// What `git` would run or write besides being itself.
    fn git_after(&mut self, after: GitAfter) {
        for problem in after.problems {
            self.unknown(problem);
        }
        for (key, value) in after.settings {
            self.git_config(&key, value);
        }
        if let Some(parsed) = &after.parsed {
            for written in &parsed.ambiguous {
                self.unknown(format!(
                    "`git {} --{written}` abbreviates several options (git refuses it)",
                    after.subcommand
                ));
            }
            self.git_runs(&after.subcommand, parsed);
        }
        // `git archive -o FILE` (or `--output`, abbreviated too) writes the archive there.
        if let (Some(parsed), "archive") = (&after.parsed, after.subcommand.as_str()) {
            for value in parsed.values(&["o", "output"]) {
                match value {
                    Some(Arg::Static(path)) => {
                        let path = match after.directory.as_ref() {
                            Some(Some(dir)) => join(dir, path),
                            _ => path.clone(),
                        };
                        self.file(Some(path), true);
                    }
                    Some(_) => self.computed_write("git archive --output=…"),
                    None => {}
                }
            }
        }
        if let Some(args) = &after.output_args {
            self.git_output(&after.subcommand, args, after.directory.as_ref());
        }
    }

    /// What a subcommand's options make git run.
    fn git_runs(&mut self, subcommand: &str, parsed: &Parsed) {
        let commands: &[&str] = match subcommand {
            "grep" => &["O", "open-files-in-pager"],
            "rebase" => &["x", "exec"],
            "fetch" | "pull" | "ls-remote" => &["upload-pack"],
            "clone" => &["u", "upload-pack"],
            "push" => &["receive-pack", "exec"],
            "archive" => &["exec"],
            "difftool" => &["x", "extcmd"],
            _ => &[],
        };
        for value in parsed.values(commands) {
            match value {
                // `grep -O` alone opens the default pager, like any pager git starts.
                None => {}
                Some(Arg::Static(command)) => self.script(&format!("{command} \"$@\"")),
                Some(Arg::Dynamic | Arg::Partial { .. }) => self.unknown(format!(
                    "`git {subcommand}` runs a command computed at run time"
                )),
            }
        }
        if matches!(
            subcommand,
            "merge" | "pull" | "rebase" | "cherry-pick" | "revert"
        ) {
            for value in parsed.values(&["s", "strategy"]) {
                match value {
                    Some(Arg::Static(s)) if BUILTIN_STRATEGIES.contains(&s.as_str()) => {}
                    Some(Arg::Static(s)) => self.unknown(format!(
                        "`git {subcommand} --strategy={s}` runs the program git-merge-{s}"
                    )),
                    _ => self.unknown(format!(
                        "`git {subcommand} --strategy` computed at run time"
                    )),
                }
            }
        }
        if subcommand == "clone" {
            for value in parsed.values(&["c", "config"]) {
                match value {
                    Some(Arg::Static(pair)) => {
                        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                        self.git_config(key, Arg::Static(value.to_string()));
                    }
                    _ => self.unknown("`git clone --config` computed at run time"),
                }
            }
            if parsed.has(&["template"]) {
                self.unknown("`git clone --template` copies hooks the hook cannot see");
            }
        }
    }

    /// `--output=FILE` (or `--output FILE`) of a diff-family command writes FILE; so does
    /// format-patch's `-o DIR`.
    fn git_output(&mut self, subcommand: &str, args: &[Arg], directory: Option<&Option<String>>) {
        // format-patch also writes its patches into `-o DIR` / `--output-directory DIR`
        // (git 2.47 accepts no abbreviation of it).
        let patches = subcommand == "format-patch";
        let mut i = 0;
        while i < args.len() {
            let path = match &args[i] {
                Arg::Static(s) if s == "--" => break,
                Arg::Static(s)
                    if s == "--output" || (patches && (s == "-o" || s == "--output-directory")) =>
                {
                    i += 1;
                    args.get(i).cloned()
                }
                Arg::Static(s) => {
                    let directory_value = || {
                        s.strip_prefix("--output-directory=")
                            .or_else(|| s.strip_prefix("-o"))
                    };
                    s.strip_prefix("--output=")
                        .or_else(|| patches.then(directory_value).flatten())
                        .map(|p| Arg::Static(p.to_string()))
                }
                computed
                    if computed.static_prefix().starts_with("--output=")
                        || (patches && computed.static_prefix().starts_with("-o")) =>
                {
                    Some(Arg::Dynamic)
                }
                _ => None,
            };
            match (path, directory) {
                (Some(Arg::Static(p)), _) if p.starts_with('/') => self.file(Some(p), true),
                (Some(Arg::Static(p)), None) => self.file(Some(p), true),
                (Some(Arg::Static(p)), Some(Some(dir))) => self.file(Some(join(dir, &p)), true),
                (None, _) => {}
                _ => self.computed_write(&super::render_words(&format!("git {subcommand}"), args)),
            }
            i += 1;
        }
    }

    /// Judges one `-c KEY=VALUE` (or `--config-env`, `clone --config`).
    fn git_config(&mut self, key: &str, value: Arg) {
        let kind = classify_config(key);
        let text = match &value {
            Arg::Static(t) => Some(t.as_str()),
            Arg::Dynamic | Arg::Partial { .. } => None,
        };
        match (kind, text) {
            (ConfigKey::Harmless, _) => {}
            // Used, an alias replaced the subcommand above; unused, it runs nothing.
            (ConfigKey::Alias, Some(_)) => {}
            (ConfigKey::CommandOrBool, Some(t)) if is_boolean(t) => {}
            (ConfigKey::Command | ConfigKey::CommandOrBool, Some(t)) => {
                self.script(&format!("{t} \"$@\""));
            }
            (ConfigKey::BangCommand, Some("")) => {}
            (ConfigKey::BangCommand, Some(t)) => match t.strip_prefix('!') {
                Some(command) => self.script(&format!("{command} \"$@\"")),
                None => self.unknown(format!(
                    "`git -c {key}={t}` runs a helper program the hook cannot see"
                )),
            },
            (ConfigKey::Program, Some("")) => {}
            (ConfigKey::Program, Some(t)) => self.dispatch_args(
                vec![Arg::Static(t.to_string()), Arg::Dynamic],
                Vec::new(),
                Stdin::Inherited,
            ),
            (ConfigKey::Unknown, _) => self.unknown(format!(
                "`git -c {key}`: a setting the hook does not know to be harmless (it may make git run programs)"
            )),
            (_, None) => self.unknown(format!(
                "`git --config-env {key}=…` makes git run a program named in the environment"
            )),
        }
    }
}

/// Subcommands that read the repository and change nothing in it, whatever their options
/// (except an `--output` file, looked at separately).
const READING_SUBCOMMANDS: &[&str] = &[
    "status",
    "diff",
    "log",
    "show",
    "blame",
    "annotate",
    "rev-parse",
    "ls-files",
    "grep",
    "describe",
    "shortlog",
    "whatchanged",
    "rev-list",
    "cat-file",
    "ls-tree",
    "merge-base",
    "for-each-ref",
    "show-ref",
    "name-rev",
    "count-objects",
    "version",
    "help",
    "diff-tree",
    "diff-index",
    "diff-files",
    "range-diff",
    "cherry",
    "check-ignore",
    "check-attr",
    "var",
    "ls-remote",
];

/// What a git subcommand changes, as far as its spelling tells (`None`: nothing). `parsed` is the
/// subcommand's options when the hook knows its grammar, `rest` its arguments as given.
fn git_change(subcommand: &str, parsed: Option<&Parsed>, rest: &[Arg]) -> Option<&'static str> {
    let first = rest.iter().find(|a| !a.static_prefix().starts_with('-'));
    let first = first.map(|a| a.as_static().unwrap_or("…"));
    let any = |names: &[&str]| {
        rest.iter()
            .any(|a| a.as_static().is_some_and(|t| names.contains(&t)))
    };
    let writes_output = rest
        .iter()
        .any(|a| a.static_prefix().starts_with("--output"));
    match subcommand {
        _ if writes_output => Some("writes files"),
        "branch" => {
            let parsed = parsed?;
            let deletes = parsed.has(&["d", "D", "delete"]);
            let renames = parsed.has(&["m", "M", "move", "c", "C", "copy"]);
            let other = parsed.has(&[
                "u",
                "set-upstream-to",
                "unset-upstream",
                "edit-description",
                "f",
                "force",
                "set-upstream",
                "t",
                "track",
            ]);
            let lists = parsed.has(&[
                "l",
                "list",
                "a",
                "all",
                "r",
                "remotes",
                "contains",
                "no-contains",
                "merged",
                "no-merged",
                "points-at",
                "show-current",
            ]);
            if deletes {
                Some("deletes a branch")
            } else if renames {
                Some("renames or copies a branch")
            } else if other || (!lists && !parsed.operands().is_empty()) {
                Some("creates or changes a branch")
            } else {
                None
            }
        }
        "remote" => match first {
            None | Some("show" | "get-url") => None,
            Some(_) => Some("changes the repository's remotes"),
        },
        "reflog" => match first {
            Some("expire" | "delete") => Some("deletes reflog entries"),
            _ => None,
        },
        "config" => {
            let reads = any(&[
                "--get",
                "--get-all",
                "--get-regexp",
                "--get-urlmatch",
                "--list",
                "-l",
                "get",
                "list",
            ]);
            (!reads).then_some("changes git's configuration")
        }
        "submodule" => match first {
            None | Some("status" | "summary") => None,
            Some(_) => Some("changes submodules"),
        },
        "stash" => match first {
            Some("list" | "show") => None,
            _ => Some("changes stashed work"),
        },
        "tag" => {
            let lists =
                rest.is_empty() || any(&["-l", "--list", "-n", "--contains", "--points-at"]);
            (!lists).then_some("creates or deletes a tag")
        }
        "worktree" => match first {
            Some("list") => None,
            _ => Some("changes worktrees"),
        },
        s if READING_SUBCOMMANDS.contains(&s) => None,
        _ => Some("changes the repository or the working tree"),
    }
}

/// Writes out what a subcommand does that its spelling leaves implicit, so that rules can
/// name it: the paths `git checkout` overwrites follow `--` (`git checkout REV FILE`, `git
/// checkout src/x.rs`), `git restore` without `--staged` restores the working tree
/// (`--worktree`), `git branch -d -f` is `-D`.
fn spell_out(subcommand: &str, parsed: &mut Parsed) {
    // `-t` takes its value attached (`-tdirect`); git 2.47 refuses any other value (`git
    // checkout -tf main` fails), but the cluster reads as `-t -f` to a person, and a git that
    // read it so would throw changes away: the letters count as the switches they spell.
    if matches!(subcommand, "checkout" | "switch") {
        let spelled: Vec<char> = parsed
            .values(&["t"])
            .flatten()
            .filter_map(|v| match v {
                Arg::Static(t) if t != "direct" && t != "inherit" => Some(t.chars()),
                _ => None,
            })
            .flatten()
            .collect();
        for letter in spelled {
            parsed.imply(Name::Short(letter));
        }
    }
    match subcommand {
        "checkout" if !parsed.has(&["b", "B", "orphan", "detach"]) => {
            let operands = parsed.operands();
            let first_path = match operands.as_slice() {
                [] => None,
                [only] if looks_like_path(only) => Some(0),
                [_] => None,
                _ => Some(1),
            };
            if let Some(index) = first_path {
                parsed.paths_from(index);
            }
        }
        "restore" if !parsed.has(&["S", "staged", "W", "worktree"]) => {
            parsed.imply(Name::Long("worktree"));
        }
        "branch" if parsed.has(&["d", "delete"]) && parsed.has(&["f", "force"]) => {
            parsed.imply(Name::Short('D'));
        }
        _ => {}
    }
}

/// Whether `git checkout WORD` names files rather than a branch: git decides by what exists,
/// the hook by the spelling. `.`, `./…`, `../…`, absolute paths, globs, pathspec magic
/// (`:/`, `:(…)`) and a last component with a file extension (`src/main.rs`, `README.md`;
/// not `v1.2` or `release-1.0`) are paths; a plain name is taken for a branch.
fn looks_like_path(word: &Arg) -> bool {
    let Arg::Static(word) = word else {
        // A computed word may name files: ask rather than allow.
        return true;
    };
    if word == "."
        || word == ".."
        || word.starts_with("./")
        || word.starts_with("../")
        || word.starts_with('/')
        || word.starts_with(':')
        || word.contains(['*', '?', '['])
    {
        return true;
    }
    let last = word.rsplit('/').next().unwrap_or_default();
    match last.rsplit_once('.') {
        Some((stem, extension)) => {
            !stem.is_empty()
                && !extension.is_empty()
                && extension.starts_with(|c: char| c.is_ascii_alphabetic())
                && extension.chars().all(|c| c.is_ascii_alphanumeric())
        }
        None => false,
    }
}

/// The `.env` files a printing subcommand names (`git show HEAD:.env`, `git log -p -- .env`,
/// `git cat-file -p :app/.env.local`): their contents, as committed, would be printed.
fn shown_env_files(
    subcommand: &str,
    args: &[Arg],
    directory: Option<&Option<String>>,
) -> Vec<String> {
    if !matches!(
        subcommand,
        "show" | "cat-file" | "log" | "diff" | "blame" | "annotate" | "grep" | "whatchanged"
    ) {
        return Vec::new();
    }
    args.iter()
        .filter_map(|arg| match arg {
            Arg::Static(text) if !text.starts_with('-') => {
                let path = text.rsplit_once(':').map_or(text.as_str(), |(_, p)| p);
                let path = path.trim_start_matches('/');
                is_env_file(super::basename(path)).then(|| match directory {
                    Some(Some(dir)) => join(dir, path),
                    _ => path.to_string(),
                })
            }
            _ => None,
        })
        .collect()
}

fn join(dir: &str, path: &str) -> String {
    if path.starts_with('/') || dir.is_empty() {
        path.to_string()
    } else {
        format!("{}/{path}", dir.trim_end_matches('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkout_operand_is_a_path_when_it_looks_like_one() {
        for path in [
            ".",
            "..",
            "./src",
            "../x",
            "/abs",
            ":/top",
            "*.rs",
            "src/main.rs",
            "README.md",
        ] {
            assert!(looks_like_path(&Arg::Static(path.into())), "{path}");
        }
        for branch in [
            "main",
            "feature/login",
            "v1.2",
            "release-1.0",
            "HEAD~1",
            "origin/main",
            "-",
        ] {
            assert!(!looks_like_path(&Arg::Static(branch.into())), "{branch}");
        }
        assert!(looks_like_path(&Arg::Dynamic));
    }
}
