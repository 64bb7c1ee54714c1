//! Tests of the shell analysis: what a Bash command does, walked from its syntax tree.

use super::*;

fn names(command: &str) -> Vec<String> {
    analyze(command)
        .into_iter()
        .map(|e| match e {
            Effect::Exec(i) => i.name,
            Effect::Read(p) => format!("<{p}"),
            Effect::Write(p) => format!(">{p}"),
            Effect::Unknown(_) => "?".into(),
            Effect::ComputedWrite(_) => ">?".into(),
        })
        .collect()
}

#[test]
fn normalises_names() {
    for spelling in [
        "/usr/bin/rm x",
        "\\rm x",
        "r''m x",
        "\"rm\" x",
        "$'\\x72m' x",
        "'r'\"m\" x",
    ] {
        assert_eq!(names(spelling), ["rm", ">x"], "{spelling}");
    }
}

#[test]
fn walks_every_construct() {
    assert_eq!(names("a | b && c || d; e &"), ["a", "b", "c", "d", "e"]);
    assert_eq!(names("(a; { b; })"), ["a", "b"]);
    assert_eq!(
        names("if a; then b; elif c; then d; else e; fi"),
        ["a", "b", "c", "d", "e"]
    );
    assert_eq!(names("for x in $(a); do b; done"), ["a", "b"]);
    assert_eq!(
        names("while a; do b; done; until c; do d; done"),
        ["a", "b", "c", "d"]
    );
    assert_eq!(names("case $(a) in x) b;; esac"), ["a", "b"]);
    assert_eq!(names("f() { a; }; f"), ["a"]);
    assert_eq!(names("echo \"$(a `b`)\""), ["echo", "a", "b"]);
    assert_eq!(names("diff <(a) >(b)"), ["diff", "a", "b"]);
    assert_eq!(names("x=$(a) y=${z:-$(b)}"), ["", "a", "b"]);
    assert_eq!(names("cat <<EOF\n$(a)\nEOF"), ["cat", "a"]);
    assert_eq!(names("echo $(( $(a) + 1 ))"), ["echo", "a"]);
}

#[test]
fn brace_expansions_are_the_words_bash_makes() {
    let words = |text: &str| expand_braces(text).unwrap_or_default().join(" ");
    assert_eq!(words("{main,+main}"), "main +main");
    assert_eq!(words("x{a,b{c,:d}}"), "xa xbc xb:d");
    assert_eq!(words("{a,b}{1,2}"), "a1 a2 b1 b2");
    assert_eq!(words("f{,.bak}"), "f f.bak");
    assert_eq!(words("{1..3}"), "1 2 3");
    assert_eq!(words("{3..1}"), "3 2 1");
    assert_eq!(words("{1..10..4}"), "1 5 9");
    assert_eq!(words("{a..c}"), "a b c");
    assert_eq!(words("{x}"), "{x}");
    assert_eq!(expand_braces("{1..100000}"), None);
    assert_eq!(expand_braces("'{a,b}'"), None);
    assert!(is_brace_expansion("{a,b}") && is_brace_expansion("{1..2}"));
    assert!(!is_brace_expansion("stash@{1}") && !is_brace_expansion("'{a,b}'"));
    assert!(!is_brace_expansion("@{upstream}..HEAD"));
    assert_eq!(names("git push origin {main,+main}"), ["git"]);
}

#[test]
fn peels_wrappers_and_shells() {
    assert_eq!(
        names("env -i A=1 nice -n 5 nohup timeout 10 rm x"),
        ["rm", ">x"]
    );
    assert_eq!(names("sh -c 'a; b'"), ["a", "b"]);
    assert_eq!(names("bash -lc \"a | b\""), ["a", "b"]);
    assert_eq!(names("eval 'a && b'"), ["a", "b"]);
    assert_eq!(names("sh <<'EOF'\na\nEOF"), ["a"]);
    assert_eq!(names("bash <<< 'a'"), ["a"]);
    assert_eq!(names("echo a | sh"), ["echo", "?"]);
    assert_eq!(names("sh x.sh"), ["?"]);
    assert_eq!(
        names("find . -name x -exec rm {} \\;"),
        ["find", "rm", ">."]
    );
    assert_eq!(names("xargs -n1 rm"), ["rm", ">?"]);
    assert_eq!(names("sudo -u root rm x"), ["sudo", "rm", ">x"]);
    assert_eq!(names("command rm x; exec rm y"), ["rm", ">x", "rm", ">y"]);
    assert_eq!(
        names("command -v rm; command rm -v x"),
        ["command", "rm", ">x"]
    );
    assert_eq!(names("time rm x"), ["rm", ">x"]);
    assert_eq!(names(&"busybox ".repeat(5000)), ["?"]);
    // Found by the fuzzer: brush-parser's tokenizer loops forever on this.
    assert_eq!(names("at $(<< <x${"), ["?"]);
    assert_eq!(names("echo ${a[${a[${a[${a[${a[${a[1]}]}]}]}]}]}"), ["?"]);
    assert_eq!(names("[[ -n ${a[1]} ]] && b"), ["b"]);
    // Found by the fuzzer: exponential parse time, and an option without its value.
    assert_eq!(names(&format!("(( ii={}", "(".repeat(60))), ["?"]);
    assert_eq!(names("a 77777777777777777777<<<b"), ["?"]);
    // Deep nesting would overflow the stack (an abort, not a deny): unknown instead.
    let braces = format!("{}a;{}", "{ ".repeat(3000), " }".repeat(3000));
    assert_eq!(names(&braces), ["?"]);
    let ifs = format!("{}a;{}", "if b; then ".repeat(3000), " fi;".repeat(3000));
    assert_eq!(names(&ifs), ["?"]);
    // The worst that passes the guards: scripts nested as deep as allowed, each nested
    // just under the limit. It must finish without overflowing the stack.
    let mut script = "a".to_string();
    for level in 0..MAX_DEPTH + 2 {
        script = format!(
            "{}sh <<'E{level}'\n{script}\nE{level}\n{}",
            "{ ".repeat(MAX_NESTING - 2),
            "}\n".repeat(MAX_NESTING - 2)
        );
    }
    assert!(names(&script).contains(&"?".to_string()));
    assert_eq!(names("xargs -I"), ["echo"]);
    assert_eq!(names("/usr/bin/time -o"), ["?", "time"]);
}

#[test]
fn computed_names_and_redirections() {
    assert_eq!(names("$x a"), ["?"]);
    assert_eq!(names("$(a) b"), ["?", "a"]);
    assert_eq!(names("r* x"), ["?"]);
    assert_eq!(names("{rm,-rf,/}"), ["?"]);
    assert_eq!(names("{'rm',x}"), ["?"]);
    assert_eq!(names("'{a,b}'"), ["{a,b}"]);
    assert_eq!(names("a > out.txt 2>&1 < in"), ["a", ">out.txt", "<in"]);
    assert_eq!(names("a > $f"), ["a", "?"]);
    assert_eq!(names("a &> ~/log"), ["a", ">~/log"]);
    assert_eq!(names("if then"), ["?"]);
    assert_eq!(names("( ( a ) )"), ["a"]);
    assert_eq!(names("x; (( i++ ))"), ["x"]);
    assert_eq!(names("cd /etc && a > passwd"), ["cd", "a", ">/etc/passwd"]);
    assert_eq!(names("cd sub; a > f"), ["cd", "a", ">sub/f"]);
    assert_eq!(names("cd $d; a > f"), ["cd", "a", "?"]);
}
