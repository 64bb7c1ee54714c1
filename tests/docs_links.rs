//! Every relative link in the documentation resolves: README.md, SECURITY.md, `docs/`, and the
//! READMEs of `examples/` and `action/`. A link's file must exist, and its `#anchor` must be a
//! heading of that file as GitHub spells anchors (lower case, punctuation dropped, spaces as
//! hyphens, a repeated heading numbered). Links outside the repository (`http…`, `mailto:`) are
//! not followed; links inside code (fenced blocks and `code spans`) are not links.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("SECURITY.md")];
    for dir in ["docs", "examples", "action"] {
        for entry in fs::read_dir(root().join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The text outside fenced code blocks and code spans.
fn prose(text: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            out.push('\n');
            continue;
        }
        if fenced {
            out.push('\n');
            continue;
        }
        let mut in_span = false;
        for c in line.chars() {
            if c == '`' {
                in_span = !in_span;
            } else if !in_span {
                out.push(c);
            }
        }
        out.push('\n');
    }
    out
}

/// `](target)` of every inline link.
fn links(text: &str) -> Vec<String> {
    let text = prose(text);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            found.push(rest[..end].trim().to_string());
            rest = &rest[end..];
        }
    }
    found
}

/// GitHub's anchor of a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(heading) = line
            .strip_prefix('#')
            .map(|h| h.trim_start_matches('#'))
            .filter(|h| !fenced && h.starts_with(' '))
        else {
            continue;
        };
        let base = slug(heading);
        let mut name = base.clone();
        let mut n = 0;
        while seen.contains(&name) {
            n += 1;
            name = format!("{base}-{n}");
        }
        seen.insert(name);
    }
    seen
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        for link in links(&text) {
            if link.starts_with("http://")
                || link.starts_with("https://")
                || link.starts_with("mailto:")
            {
                continue;
            }
            checked += 1;
            let (file, anchor) = match link.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let shown = page.strip_prefix(root()).unwrap().display().to_string();
            if !target.exists() {
                broken.push(format!("{shown}: ({link}): no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let target_text = fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&target_text).contains(anchor) {
                    broken.push(format!("{shown}: ({link}): no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
    assert!(checked >= 15, "only {checked} relative links found");
}

#[test]
fn the_readme_is_what_a_newcomer_reads() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md is {lines} lines; the rest belongs in docs/"
    );
    for section in [
        "## Install",
        "## Set up for development, in two commands",
        "## What a denial looks like",
        "## Where the record is",
        "## Three ways to use it",
        "## Read on",
    ] {
        assert!(readme.contains(section), "README.md lacks {section}");
    }
}

#[test]
fn slugs_are_githubs() {
    assert_eq!(
        slug("Exit codes of `stepproof-run`"),
        "exit-codes-of-stepproof-run"
    );
    assert_eq!(slug("The model API's paths"), "the-model-apis-paths");
    assert_eq!(
        anchors("# A\n## A\n```\n# not\n```\n"),
        ["a", "a-1"].iter().map(|s| s.to_string()).collect()
    );
    assert_eq!(
        links("[x](a.md#b) `[y](no)` [z](https://e)"),
        ["a.md#b", "https://e"]
    );
}
