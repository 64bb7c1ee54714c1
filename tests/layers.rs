//! The house's rule, checked: the code lives in rooms, each room imports only the rooms its row
//! below allows, and no file is on a loop of imports.
//!
//! * **Rooms.** A room is a module and every file under it that no smaller room claims
//!   (`supervisor::net` holds `supervisor/net/*.rs`). The table below gives each room one line
//!   of what it owns and the rooms it may import; the module map of docs/architecture.md is generated from it
//!   (`STEPPROOF_WRITE_MODULE_MAP=1 cargo test --test layers` rewrites it) and checked against it.
//!   The table itself must be a ladder (a room that may import another, directly or through
//!   others, may not be imported by it) and say no more than the code (a permission no import
//!   uses is taken off, so that a new import between rooms always shows in the table's diff).
//! * **Imports.** Every path a file names outside comments and strings is read: `crate::…`,
//!   `super::…` (and `super::super::…`), `self::…`, in a `use` (with its brace groups) or in
//!   place, each resolved from the module it is written in (an inline `mod tests { use super::*; }`
//!   names its own file) to the file that defines it.
//! * **Loops.** Over files, every strongly connected component is found (Tarjan), whatever its
//!   length. A module file and its own children may refer to each other (a room's shared types
//!   and the files that use them); every other loop fails, between rooms or between the sibling
//!   files of one room.
//! * **`unsafe`.** Only `sys` holds `unsafe` code (`#[allow(unsafe_code)]` on `pub mod sys` in
//!   `lib.rs`); the one listed exception is the hook binary's C `main`.
//!
//! The binaries (`src/bin/`, `hooks/src/main.rs`) are the top: they may use every room.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A room of the house: its module path (`""` is the crate root, `lib.rs`, alone), one line of
/// what it owns, and the rooms it may import. The crate root and the rooms refer to each other
/// freely: it declares them, and holds only the `say!` family of macros they use.
struct Room {
    path: &'static str,
    owns: &'static str,
    may_import: &'static [&'static str],
}

/// The root crate's rooms, top first.
const ROOT_ROOMS: &[Room] = &[
    Room {
        path: "",
        owns: "the crate map (`lib.rs`): `#![deny(unsafe_code)]`, the never-panicking `say!`/`out!` macros",
        may_import: &[],
    },
    Room {
        path: "cli",
        owns: "THE EDGE: what each command does, in order — a run from the caller's side (`run`, its arguments in `run::args`), host facts, `explain`, `doctor`, `state`, `repair`, `ci` (timeouts, the job summary), the self-test and its escape probes, logging, the man pages and shell completions written from the clap definitions (`manual`: `stepproof generate`)",
        may_import: &[
            "supervisor::launch",
            "supervisor::runbook",
            "supervisor::agent",
            "supervisor::net",
            "supervisor::way_out",
            "sandbox",
            "sandbox::plan",
            "profile",
            "runbook",
            "audit",
            "sys",
            "exit",
            "regular_file",
        ],
    },
    Room {
        path: "supervisor",
        owns: "OUTSIDE the sandbox, never entered by it: the five rooms below (the module file only declares them)",
        may_import: &[],
    },
    Room {
        path: "supervisor::launch",
        owns: "the run as a process: the sandbox started as numbered steps (`start`), the run's cgroup, the terminal relay and event loop (signals, job control, `--timeout`), how the run ended (`outcome`)",
        may_import: &[
            "supervisor::runbook",
            "supervisor::agent",
            "supervisor::net",
            "supervisor::way_out",
            "sandbox",
            "sandbox::plan",
            "profile",
            "audit",
            "sys",
            "exit",
        ],
    },
    Room {
        path: "supervisor::runbook",
        owns: "the runbook engine: the steps' state machine and its servers, evidence, model verifiers, continuing an interrupted run, approvals by webhook, the approver's brief and notifications",
        may_import: &[
            "supervisor::net",
            "profile",
            "runbook",
            "audit",
            "http",
            "sys",
            "exit",
            "regular_file",
        ],
    },
    Room {
        path: "supervisor::agent",
        owns: "the agent's state outside: its config directory (seeded with the placeholder login), the sessions kept per workspace, build caches, housekeeping",
        may_import: &[
            "supervisor::net",
            "sandbox",
            "sandbox::plan",
            "runbook",
            "audit",
            "sys",
        ],
    },
    Room {
        path: "supervisor::net",
        owns: "services at the network boundary: the allow-list proxy (and `proxy::terminate`, TLS ended for hosts with a credential rule), the model gateway, the model login, service credentials, server-managed settings",
        may_import: &["http", "sandbox::plan", "profile", "regular_file"],
    },
    Room {
        path: "supervisor::way_out",
        owns: "what crosses back: the sweep (persistence paths, git rules, quarantine, setuid), the watcher during the run, the patch of quarantined changes, profile tampering, output files, the end a run owes recorded at launch and finished after a kill (`recover`) — never the network",
        may_import: &["sandbox::plan", "profile", "audit", "sys"],
    },
    Room {
        path: "sandbox",
        owns: "INSIDE: the executors in order (init, mounts, namespaces, Landlock, seccomp, caps, rlimits) and what crosses the clone (channels, events, fd passing, the terminal, the report)",
        may_import: &["sandbox::plan", "profile", "sys", "exit"],
    },
    Room {
        path: "sandbox::plan",
        owns: "DATA: profile + host facts → the plan that runs and that `explain` prints (mounts, Landlock rules, the agent's layer, environment, persistence paths, secrets, the hook's compiled policy)",
        may_import: &["profile", "runbook", "audit", "sys"],
    },
    Room {
        path: "runbook",
        owns: "the runbook FILE: types, loading with file:line:column, `check`, `explain` and its hash, the JSON Schema, the client commands run inside, the shipped slash commands and agent",
        may_import: &["profile", "audit", "regular_file"],
    },
    Room {
        path: "profile",
        owns: "the vocabulary reviewers read: loading, `extends`, validation with file and line, the policy hash, limits, the network allow-list, credentials, approvals",
        may_import: &["audit", "regular_file"],
    },
    Room {
        path: "audit",
        owns: "the hash-chained log: records, the writer (`sink`), the receiver of records from inside, `verify`, `show`, the runs' directories and the marker of work a run owes (`owed`), the OTLP export",
        may_import: &["regular_file", "http"],
    },
    Room {
        path: "http",
        owns: "GROUND: the one chunked coding (`chunked`), HTTP/1.1 framing and the counted tunnel (`io`), the one blocking client (`client`), URLs split (`url`), the search of an answer for the credential its request carried (`scan`), the accept loop (`server`), TLS client configurations (`tls`)",
        may_import: &[],
    },
    Room {
        path: "sys",
        owns: "GROUND: every raw system call, each `unsafe` block with its SAFETY note; the crate's only `#[allow(unsafe_code)]`",
        may_import: &["exit"],
    },
    Room {
        path: "exit",
        owns: "GROUND: StepProof's exit codes",
        may_import: &[],
    },
    Room {
        path: "regular_file",
        owns: "GROUND: files named on the command line, opened without waiting on a FIFO and read with a cap",
        may_import: &[],
    },
];

/// The hook crate's rooms, top first (`hooks/src/main.rs` is its binary).
const HOOK_ROOMS: &[Room] = &[
    Room {
        path: "",
        owns: "the hook crate's map (`lib.rs`, `#![forbid(unsafe_code)]`) and the built-in profiles' text",
        may_import: &[],
    },
    Room {
        path: "contract",
        owns: "Claude Code's hook contract: each event's input, its answer and how it fails; `stepproof check`",
        may_import: &["load", "policy", "shell", "pattern", "decision"],
    },
    Room {
        path: "load",
        owns: "the compiled policy's file format, and loading what one call needs of it, cheaply",
        may_import: &["policy", "shell", "config", "pattern", "decision"],
    },
    Room {
        path: "policy",
        owns: "a profile's `[hook]` compiled into the policy the hook loads, and tool calls judged with it",
        may_import: &["shell", "config", "disposable", "pattern", "decision"],
    },
    Room {
        path: "disposable",
        owns: "which trees may be removed without asking: known build output the repository ignores (its ignore files read, never git run), or below the private /tmp",
        may_import: &["pattern"],
    },
    Room {
        path: "shell",
        owns: "what a Bash command does, found by parsing it and walking the syntax tree: wrappers, git, sed, awk, options, variables",
        may_import: &["pattern"],
    },
    Room {
        path: "config",
        owns: "the `[hook]` section of a profile, as people write and review it",
        may_import: &["decision"],
    },
    Room {
        path: "pattern",
        owns: "the matchers rules compile to: wildcards over names, globs over paths, patterns over argument lists",
        may_import: &[],
    },
    Room {
        path: "decision",
        owns: "the three answers (allow < ask < deny: the most restrictive wins) and the verdict that carries one with its rule",
        may_import: &[],
    },
    Room {
        path: "audit",
        owns: "the records the hook sends to the supervisor's audit socket",
        may_import: &[],
    },
];

/// Files allowed an `#[allow(unsafe_code)]`, and why.
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    (
        "src/lib.rs",
        "on `pub mod sys`: the one room of raw system calls",
    ),
    (
        "hooks/src/main.rs",
        "the hook binary's C `main` (`#[unsafe(no_mangle)]`, no unsafe block)",
    ),
];

// ---------------------------------------------------------------------------------------------
// Reading the code

/// The source with comments, strings and character literals blanked (newlines kept, so line
/// numbers hold): what is left is code.
fn code_of(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend(bytes.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let after_ident = i > 0 && ident(b[i - 1]);
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j.min(rest.len())]);
            i += j.min(rest.len());
        } else if !after_ident && raw_string_len(rest).is_some() {
            let len = raw_string_len(rest).unwrap_or(rest.len());
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let len = (j + 1).min(rest.len());
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\u{1F600}', 'é') or a lifetime ('a, 'static).
            let len = if rest.get(1) == Some(&b'\\') {
                // The escaped character is at 2; the closing quote comes after it.
                rest.get(3..)
                    .and_then(|tail| tail.iter().position(|&c| c == b'\''))
                    .map(|p| p + 4)
            } else {
                let text = std::str::from_utf8(&rest[1..rest.len().min(6)]).unwrap_or_else(|e| {
                    std::str::from_utf8(&rest[1..1 + e.valid_up_to()]).unwrap_or_default()
                });
                text.chars()
                    .next()
                    .map(char::len_utf8)
                    .filter(|&n| rest.get(1 + n) == Some(&b'\''))
                    .map(|n| n + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, &rest[..len]);
                    i += len;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII bytes were replaced")
}

/// The length of a raw string literal at the start of `text` (`r"…"`, `r#"…"#`, `br##"…"##`).
fn raw_string_len(text: &[u8]) -> Option<usize> {
    let start = match text {
        [b'r', ..] => 1,
        [b'b' | b'c', b'r', ..] => 2,
        _ => return None,
    };
    let hashes = text[start..].iter().take_while(|&&c| c == b'#').count();
    if text.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    let end = text[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(body + end + close.len())
}

/// One path a file names: the module it is written in, the path as written (from `crate`,
/// `super` or `self`), and its line.
#[derive(Debug)]
struct Named {
    context: Vec<String>,
    path: Vec<String>,
    line: usize,
}

/// Every `crate::`, `super::` and `self::` path in `code` (see [`code_of`]), written in module
/// `module` or in an inline module inside it.
fn named_paths(code: &str, module: &[String]) -> Vec<Named> {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut found = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_mod: Option<String> = None;
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => line += 1,
            b'{' => {
                if let Some(name) = pending_mod.take() {
                    inline.push((name, depth));
                }
                depth += 1;
            }
            b'}' => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
            }
            b';' => pending_mod = None,
            _ => {}
        }
        if !ident(c) || (i > 0 && ident(b[i - 1])) {
            i += 1;
            continue;
        }
        let end = i + b[i..].iter().take_while(|&&c| ident(c)).count();
        let word = &code[i..end];
        if word == "mod" {
            let rest = &code[end..];
            let name_start = rest.len() - rest.trim_start().len();
            let name: String = rest[name_start..]
                .chars()
                .take_while(|&c| c.is_alphanumeric() || c == '_')
                .collect();
            if !name.is_empty() {
                pending_mod = Some(name);
            }
        } else if matches!(word, "crate" | "super" | "self")
            && code[end..].starts_with("::")
            && !(i > 0 && b[i - 1] == b':')
        {
            let mut context = module.to_vec();
            context.extend(inline.iter().map(|(name, _)| name.clone()));
            let mut paths = Vec::new();
            collect(&code[i..], Vec::new(), &mut paths);
            for path in paths {
                found.push(Named {
                    context: context.clone(),
                    path,
                    line,
                });
            }
        }
        i = end;
    }
    found
}

/// Reads one path (or a brace group of them) at the start of `text`, after `prefix`. Modules
/// are lower case: a type, trait or constant ends the module path, and so does `*`.
fn collect(text: &str, prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    if !group[start..i].trim().is_empty() {
                        collect(&group[start..i], prefix.clone(), found);
                    }
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    collect(&group[start..i], prefix.clone(), found);
                    start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let mut path = prefix;
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let segment = &rest[..end];
        if segment.is_empty() || segment.starts_with(|c: char| c.is_uppercase()) {
            break;
        }
        path.push(segment.to_string());
        rest = rest[end..].trim_start();
        match rest.strip_prefix("::") {
            Some(next) if next.trim_start().starts_with('{') => {
                collect(next, path, found);
                return;
            }
            Some(next) => rest = next.trim_start(),
            None => break,
        }
    }
    if !path.is_empty() {
        found.push(path);
    }
}

/// The absolute module path `path` names when written in module `context`.
fn absolute(context: &[String], path: &[String]) -> Vec<String> {
    let mut abs = Vec::new();
    for (i, segment) in path.iter().enumerate() {
        match segment.as_str() {
            "crate" if i == 0 => abs.clear(),
            "self" if i == 0 => abs = context.to_vec(),
            "super" if i == 0 => {
                abs = context.to_vec();
                abs.pop();
            }
            "super" => {
                abs.pop();
            }
            "self" => {}
            _ => abs.push(segment.clone()),
        }
    }
    abs
}

// ---------------------------------------------------------------------------------------------
// The house of one crate

struct File {
    module: Vec<String>,
    shown: String,
    code: String,
}

/// `src/sandbox/plan/mod.rs` → `sandbox::plan`; `src/lib.rs` → the root.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod" || p == "lib") {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The library's files of the crate at `root` (binaries left out: they are the top).
fn read_crate(root: &Path, shown_dir: &str) -> Vec<File> {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    paths.sort();
    paths
        .into_iter()
        .filter_map(|path| {
            let module = module_of(root, &path);
            if module.first().is_some_and(|m| m == "bin") || module == ["main"] {
                return None;
            }
            let shown = format!("{shown_dir}/{}", path.strip_prefix(root).unwrap().display());
            let code = code_of(&fs::read_to_string(&path).unwrap());
            Some(File {
                module,
                shown,
                code,
            })
        })
        .collect()
}

fn joined(module: &[String]) -> String {
    if module.is_empty() {
        "(crate root)".to_string()
    } else {
        module.join("::")
    }
}

/// The room a module is in: the longest room path it is or is under (the root room holds only
/// the crate root itself).
fn room_of<'a>(rooms: &'a [Room], module: &[String]) -> Option<&'a Room> {
    let name = module.join("::");
    rooms
        .iter()
        .filter(|r| {
            if r.path.is_empty() {
                module.is_empty()
            } else {
                name == r.path || name.starts_with(&format!("{}::", r.path))
            }
        })
        .max_by_key(|r| r.path.len())
}

/// What is wrong with a crate's house; empty when it holds.
#[derive(Debug, Default)]
struct Problems {
    table: Vec<String>,
    roomless: Vec<String>,
    forbidden: Vec<String>,
    cycles: Vec<String>,
}

impl Problems {
    fn is_empty(&self) -> bool {
        self.table.is_empty()
            && self.roomless.is_empty()
            && self.forbidden.is_empty()
            && self.cycles.is_empty()
    }
}

/// One import between two files: the first line where the importer names it.
type Edges = BTreeMap<(usize, usize), usize>;

fn edges_of(files: &[File]) -> Edges {
    let index: BTreeMap<&[String], usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.as_slice(), i))
        .collect();
    let mut edges = Edges::new();
    for (from, file) in files.iter().enumerate() {
        for named in named_paths(&file.code, &file.module) {
            let abs = absolute(&named.context, &named.path);
            // The file that defines it: the longest module prefix that is a file.
            let to = (0..=abs.len())
                .rev()
                .find_map(|n| index.get(&abs[..n]).copied());
            if let Some(to) = to.filter(|&to| to != from) {
                edges.entry((from, to)).or_insert(named.line);
            }
        }
    }
    edges
}

fn is_ancestor(a: &[String], b: &[String]) -> bool {
    a.len() < b.len() && b.starts_with(a)
}

/// Strongly connected components of more than one node (Tarjan), each sorted.
fn components(nodes: usize, next: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        next: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        counter: usize,
        found: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.counter);
            self.low[v] = self.counter;
            self.counter += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in self.next.get(&v).into_iter().flatten() {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        next,
        index: vec![None; nodes],
        low: vec![0; nodes],
        on_stack: vec![false; nodes],
        stack: Vec::new(),
        counter: 0,
        found: Vec::new(),
    };
    for v in 0..nodes {
        if walk.index[v].is_none() {
            walk.visit(v);
        }
    }
    walk.found.sort();
    walk.found
}

/// One loop through the nodes of `component`, starting at its first node (a shortest way
/// back, by breadth-first search inside the component).
fn one_loop(component: &[usize], next: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<usize> {
    let inside: BTreeSet<usize> = component.iter().copied().collect();
    let start = component[0];
    let mut came_from: BTreeMap<usize, usize> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in next.get(&v).into_iter().flatten() {
            if !inside.contains(&w) {
                continue;
            }
            if w == start {
                let mut path = vec![v];
                let mut at = v;
                while at != start {
                    at = came_from[&at];
                    path.push(at);
                }
                path.reverse();
                return path;
            }
            if let std::collections::btree_map::Entry::Vacant(e) = came_from.entry(w) {
                e.insert(v);
                queue.push_back(w);
            }
        }
    }
    component.to_vec()
}

/// Checks one crate's files against its table of rooms.
fn check_house(files: &[File], rooms: &[Room]) -> Problems {
    let mut problems = Problems::default();
    // The table: known names, each room used, a ladder with no way back.
    let names: BTreeMap<&str, usize> = rooms.iter().enumerate().map(|(i, r)| (r.path, i)).collect();
    let mut ladder: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (i, room) in rooms.iter().enumerate() {
        for target in room.may_import {
            match names.get(target) {
                Some(&t) if t != i => {
                    ladder.entry(i).or_default().insert(t);
                }
                Some(_) => problems
                    .table
                    .push(format!("room `{}` lists itself", room.path)),
                None => problems.table.push(format!(
                    "room `{}` may import `{target}`, which is no room of the table",
                    room.path
                )),
            }
        }
        if !files
            .iter()
            .any(|f| room_of(rooms, &f.module).is_some_and(|r| r.path == room.path))
        {
            problems.table.push(format!(
                "room `{}` holds no file: take it off the table",
                room.path
            ));
        }
    }
    for component in components(rooms.len(), &ladder) {
        let way: Vec<&str> = one_loop(&component, &ladder)
            .iter()
            .map(|&i| rooms[i].path)
            .collect();
        problems.table.push(format!(
            "the table is not a ladder: {} -> {}",
            way.join(" -> "),
            way[0]
        ));
    }
    // Every file in a room; every import between rooms allowed by the table.
    let edges = edges_of(files);
    for file in files {
        if room_of(rooms, &file.module).is_none() {
            problems.roomless.push(file.shown.clone());
        }
    }
    for (&(from, to), &line) in &edges {
        let (Some(a), Some(b)) = (
            room_of(rooms, &files[from].module),
            room_of(rooms, &files[to].module),
        ) else {
            continue;
        };
        if a.path == b.path
            || a.path.is_empty()
            || b.path.is_empty()
            || a.may_import.contains(&b.path)
        {
            continue;
        }
        problems.forbidden.push(format!(
            "{}:{line}: room `{}` imports `{}` (room `{}`), which its row does not allow",
            files[from].shown,
            a.path,
            joined(&files[to].module),
            b.path
        ));
    }
    // The table says no more than the code: a permission nothing uses is a widening no review
    // sees when a later change starts to use it.
    let mut used: BTreeSet<(&str, &str)> = BTreeSet::new();
    for &(from, to) in edges.keys() {
        if let (Some(a), Some(b)) = (
            room_of(rooms, &files[from].module),
            room_of(rooms, &files[to].module),
        ) {
            used.insert((a.path, b.path));
        }
    }
    for room in rooms {
        for target in room.may_import {
            if !used.contains(&(room.path, *target)) && names.contains_key(target) {
                problems.table.push(format!(
                    "room `{}` may import `{target}` but does not: take it off its row",
                    room.path
                ));
            }
        }
    }
    // Loops over files, a module file and its own descendants excepted.
    let mut next: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for &(from, to) in edges.keys() {
        let (a, b) = (&files[from].module, &files[to].module);
        if !is_ancestor(a, b) && !is_ancestor(b, a) {
            next.entry(from).or_default().insert(to);
        }
    }
    for component in components(files.len(), &next) {
        let way = one_loop(&component, &next);
        let mut steps = Vec::new();
        for (k, &v) in way.iter().enumerate() {
            let w = way[(k + 1) % way.len()];
            steps.push(format!(
                "{}:{} -> {}",
                files[v].shown,
                edges[&(v, w)],
                joined(&files[w].module)
            ));
        }
        let members: Vec<&str> = component.iter().map(|&v| files[v].shown.as_str()).collect();
        problems.cycles.push(format!(
            "loop of {} files ({}): {}",
            component.len(),
            members.join(", "),
            steps.join("; ")
        ));
    }
    problems
}

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_root_crate_lives_in_its_rooms_with_no_loop() {
    let files = read_crate(&manifest().join("src"), "src");
    let problems = check_house(&files, ROOT_ROOMS);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_hook_crate_lives_in_its_rooms_with_no_loop() {
    let files = read_crate(&manifest().join("hooks/src"), "hooks/src");
    let problems = check_house(&files, HOOK_ROOMS);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn unsafe_code_lives_in_sys() {
    let mut found = Vec::new();
    for dir in ["src", "hooks/src"] {
        let mut paths = Vec::new();
        rust_files(&manifest().join(dir), &mut paths);
        for path in paths {
            let shown = format!(
                "{dir}/{}",
                path.strip_prefix(manifest().join(dir)).unwrap().display()
            );
            let code = code_of(&fs::read_to_string(&path).unwrap());
            let in_sys = shown.starts_with("src/sys/");
            for (n, line) in code.lines().enumerate() {
                let allows = line.contains("allow(unsafe_code)");
                let is_unsafe = line
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .any(|w| w == "unsafe");
                let allowed_here = UNSAFE_ALLOWED.iter().any(|(f, _)| *f == shown);
                let stray_allow = allows && !allowed_here;
                let stray_unsafe =
                    is_unsafe && !in_sys && !allows && !line.contains("unsafe(no_mangle)");
                if stray_allow || stray_unsafe {
                    found.push(format!("{shown}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "unsafe code outside src/sys/: {found:#?}");
}

/// The plan is final when built (`sandbox::plan`): no code outside `plan/` takes a plan to
/// change it or edits its mount list. What a kind of run adds is planned inside
/// (`plan::run_kind`), and the one part only the launch knows — the organisation's
/// server-managed settings — is taken by the plan's own method. Test code is left out (a test
/// may build a plan by hand).
#[test]
fn nothing_outside_the_plan_edits_a_plan() {
    const EDITS: &[&str] = &[
        "&mut SandboxPlan",
        "&mut crate::sandbox::plan::SandboxPlan",
        "&mut plan::SandboxPlan",
        "plan.mounts.push(",
        "plan.mounts.insert(",
        "plan.mounts.splice(",
        "plan.mounts.retain(",
        "plan.mounts.extend(",
        "plan.mounts.remove(",
        "plan.mounts.iter_mut(",
        "plan.mounts.clear(",
        "plan.mounts =",
        "&mut plan.mounts",
        "&mut plan.agent",
        "plan.agent.as_mut(",
    ];
    let mut paths = Vec::new();
    rust_files(&manifest().join("src"), &mut paths);
    let mut found = Vec::new();
    for path in paths {
        let shown = format!(
            "src/{}",
            path.strip_prefix(manifest().join("src")).unwrap().display()
        );
        let in_plan = shown.starts_with("src/sandbox/plan/") || shown == "src/sandbox/plan.rs";
        let test_file = shown.ends_with("/tests.rs") || shown.contains("/tests/");
        if in_plan || test_file {
            continue;
        }
        let code = code_of(&fs::read_to_string(&path).unwrap());
        // An inline test module ends the file's production code.
        let production = code.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in production.lines().enumerate() {
            let squeezed: String = line.split_whitespace().collect::<Vec<_>>().join(" ");
            if let Some(edit) = EDITS.iter().find(|e| squeezed.contains(*e)) {
                found.push(format!("{shown}:{}: `{edit}` in: {}", n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "a plan is edited outside sandbox::plan (plan it there, from HostFacts): {found:#?}"
    );
}

// ---------------------------------------------------------------------------------------------
// The module map in docs/architecture.md

const MAP_START: &str = "<!-- module map: generated from tests/layers.rs; STEPPROOF_WRITE_MODULE_MAP=1 cargo test --test layers rewrites it -->";
const MAP_END: &str = "<!-- end of module map -->";

fn module_map() -> String {
    let mut out = String::new();
    out.push_str(MAP_START);
    out.push_str("\n\n| room | owns | may import |\n| --- | --- | --- |\n");
    let code = |s: &str| format!("`{s}`");
    let list = |room: &Room| {
        if room.may_import.is_empty() {
            "nothing of ours".to_string()
        } else {
            room.may_import
                .iter()
                .map(|m| code(m))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    out.push_str(
        "| `bin/stepproof-run.rs`, `bin/stepproof.rs` | the two binaries: arguments (`stepproof-run`'s in `cli::run::args`, where `stepproof generate` reads them too), one call into `cli`, the exit | every room |\n",
    );
    for room in ROOT_ROOMS {
        let name = if room.path.is_empty() {
            "`lib.rs`".to_string()
        } else {
            code(room.path)
        };
        out.push_str(&format!("| {name} | {} | {} |\n", room.owns, list(room)));
    }
    out.push_str(
        "| `hooks/` `main.rs` | the `stepproof-hook` binary: reads the call, answers, fails closed | its library |\n",
    );
    for room in HOOK_ROOMS {
        let name = if room.path.is_empty() {
            "`hooks/` `lib.rs`".to_string()
        } else {
            format!("`hooks/` {}", code(room.path))
        };
        let list = if room.may_import.is_empty() {
            "nothing of ours".to_string()
        } else {
            room.may_import
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!("| {name} | {} | {list} |\n", room.owns));
    }
    out.push('\n');
    out.push_str(MAP_END);
    out
}

#[test]
fn the_readme_module_map_is_the_table() {
    let path = manifest().join("docs/architecture.md");
    let readme = fs::read_to_string(&path).unwrap();
    let (Some(start), Some(end)) = (readme.find(MAP_START), readme.find(MAP_END)) else {
        panic!("docs/architecture.md has no module map between `{MAP_START}` and `{MAP_END}`");
    };
    let current = &readme[start..end + MAP_END.len()];
    let wanted = module_map();
    if current == wanted {
        return;
    }
    if std::env::var_os("STEPPROOF_WRITE_MODULE_MAP").is_some() {
        let updated = format!(
            "{}{wanted}{}",
            &readme[..start],
            &readme[end + MAP_END.len()..]
        );
        fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/architecture.md's module map is not the table of tests/layers.rs; rewrite it with \
         STEPPROOF_WRITE_MODULE_MAP=1 cargo test --test layers. Wanted:\n{wanted}"
    );
}

// ---------------------------------------------------------------------------------------------
// The guard, held against planted loops

fn fixture(name: &str) -> Vec<File> {
    let dir = manifest().join("tests/fixtures/layers").join(name);
    read_crate(&dir, name)
}

const FIXTURE_ROOMS: &[Room] = &[
    Room {
        path: "",
        owns: "",
        may_import: &[],
    },
    Room {
        path: "top",
        owns: "",
        may_import: &["room"],
    },
    Room {
        path: "room",
        owns: "",
        may_import: &[],
    },
];

#[test]
fn a_planted_three_file_loop_is_found() {
    let problems = check_house(&fixture("three_file_loop"), FIXTURE_ROOMS);
    assert!(
        problems.forbidden.is_empty() && problems.roomless.is_empty(),
        "{problems:#?}"
    );
    assert_eq!(problems.cycles.len(), 1, "{problems:#?}");
    let cycle = &problems.cycles[0];
    assert!(cycle.starts_with("loop of 3 files"), "{cycle}");
    for file in ["room/a.rs", "room/b.rs", "room/c.rs"] {
        assert!(cycle.contains(file), "{cycle}");
    }
}

#[test]
fn a_planted_super_loop_is_found() {
    let problems = check_house(&fixture("super_loop"), FIXTURE_ROOMS);
    assert!(
        problems.forbidden.is_empty() && problems.roomless.is_empty(),
        "{problems:#?}"
    );
    assert_eq!(problems.cycles.len(), 1, "{problems:#?}");
    let cycle = &problems.cycles[0];
    // x -> y through `super::y`, y -> x through `super::super::room::x` in a nested module.
    assert!(cycle.starts_with("loop of 2 files"), "{cycle}");
    assert!(
        cycle.contains("room/x.rs") && cycle.contains("room/y.rs"),
        "{cycle}"
    );
}

#[test]
fn a_room_importing_upward_and_a_table_loop_are_found() {
    let problems = check_house(&fixture("upward"), FIXTURE_ROOMS);
    // room/low.rs names `crate::top::high::Thing`: the room `room` may import nothing.
    assert_eq!(problems.forbidden.len(), 1, "{problems:#?}");
    assert!(
        problems.forbidden[0].contains("room `room` imports `top::high`"),
        "{problems:#?}"
    );
    // The same two files are a loop across rooms.
    assert_eq!(problems.cycles.len(), 1, "{problems:#?}");
    const LOOPED: &[Room] = &[
        Room {
            path: "",
            owns: "",
            may_import: &[],
        },
        Room {
            path: "top",
            owns: "",
            may_import: &["room"],
        },
        Room {
            path: "room",
            owns: "",
            may_import: &["top"],
        },
    ];
    let problems = check_house(&fixture("upward"), LOOPED);
    assert!(problems.forbidden.is_empty(), "{problems:#?}");
    assert!(
        problems.table.iter().any(|p| p.contains("not a ladder")),
        "{problems:#?}"
    );
}

#[test]
fn what_is_not_a_loop_is_not_reported() {
    // A module file and its children referring to each other, `use super::*` in an inline test
    // module, paths in comments, strings, raw strings and doc text, `Self::`, `$crate::`.
    let problems = check_house(&fixture("no_loop"), FIXTURE_ROOMS);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_path_reader_reads_use_groups_and_relative_paths() {
    let code = code_of(
        "use crate::{a::b, c::{d, e::F}};\nlet x = crate::g::h::I::new();\n// crate::j\nuse crate::Z;\n\
         use super::{self as k, l::m};\nlet s = \"crate::n\";\nlet r = r#\"super::o\"#;\nlet c = '\"';\n\
         mod inner { use super::super::p::q; use self::r::S; }\nuse super::*;",
    );
    let module: Vec<String> = vec!["top".into(), "here".into()];
    let got: Vec<String> = named_paths(&code, &module)
        .iter()
        .map(|n| joined(&absolute(&n.context, &n.path)))
        .collect();
    assert_eq!(
        got,
        [
            "a::b",
            "c::d",
            "c::e",
            "g::h",
            "(crate root)",
            "top",
            "top::l::m",
            "top::p::q",
            "top::here::inner::r",
            "top"
        ]
    );
}
