//! Tests of profiles: loading, `extends`, validation with file and line, the policy hash.

use super::load::builtin_source;
use super::parse::parse_toml;
use super::*;

fn load_text(text: &str) -> Result<Profile, ProfileError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, text).unwrap();
    Profile::load(Some(&path))
}

/// Every problem found in the merged profile names the file and line that set the value,
/// in the layer of an `extends` chain where it is spelled.
#[test]
fn semantic_problems_name_file_and_line() {
    for (text, line, needle) in [
        ("[network]\nproxy_port = 0\n", 2, "network.proxy_port = 0"),
        (
            "# c\n\n[process]\nsandbox_uid = 0\n",
            4,
            "sandbox_uid must not be 0",
        ),
        (
            "[process.limits]\nnproc = 10\nnofile = 99999999\n",
            3,
            "nofile",
        ),
        ("process.limits.pids = 0\n", 1, "pids"),
        ("[filesystem]\ntmp_size_mib = 0\n", 2, "tmp_size_mib"),
        (
            "[filesystem]\nprotected = [\n  \"ok\",\n  \"../x\",\n]\n",
            4,
            "../x",
        ),
        (
            "[filesystem]\nwritable = [\"/tmp\", \"/\"]\n",
            2,
            "filesystem.writable",
        ),
        ("[filesystem]\nhidden_names = [\"*\"]\n", 2, "hidden_names"),
        ("[filesystem]\nhome_allow = [\"/usr\"]\n", 2, "home_allow"),
        ("[process]\nenv = [\"A=B\"]\n", 2, "process.env"),
        (
            "[network]\nmode = \"allowlist\"\nallow = [\n \"a.example:443\",\n \"https://b.example\",\n]\n",
            5,
            "https://b.example",
        ),
        (
            "[network]\nmode = \"host\"\n[network.gateway]\nupstream = \"api.anthropic.com\"\ncredential = \"env:K\"\n",
            3,
            "network.gateway",
        ),
        (
            "[network.gateway]\nlogin_paths = [\n  \"GET /api/oauth/usage\",\n  \"post /v1/files\",\n]\n",
            4,
            "post /v1/files",
        ),
        (
            "[network.gateway]\nlogin_paths = [\"GET /v1/files/../../api/oauth/profile\"]\n",
            2,
            "not plain",
        ),
        (
            "\n[network.gateway]\nupstream = \"api.anthropic.com\"\n",
            2,
            "`credential` is missing",
        ),
    ] {
        let e = load_text(text).unwrap_err();
        let shown = e.to_string();
        assert!(
            matches!(e, ProfileError::Syntax { line: l, .. } if l == line)
                && shown.contains(needle)
                && shown.contains(&format!("p.toml:{line}:")),
            "{text}: {shown}"
        );
    }
    // Set in the file an `extends` names: that file and its line.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("base.toml"),
        "\n[network]\nproxy_port = 0\n",
    )
    .unwrap();
    let child = dir.path().join("child.toml");
    std::fs::write(&child, "extends = \"base.toml\"\n").unwrap();
    let shown = Profile::load(Some(&child)).unwrap_err().to_string();
    assert!(
        shown.contains("base.toml:3:1: network.proxy_port = 0"),
        "{shown}"
    );
    // Set again in the child: the child's line (the value that counts).
    std::fs::write(
        &child,
        "extends = \"base.toml\"\n[network]\nproxy_port = 0\n",
    )
    .unwrap();
    let shown = Profile::load(Some(&child)).unwrap_err().to_string();
    assert!(shown.contains("child.toml:3:1:"), "{shown}");
}

#[test]
fn credential_rules_load_allow_their_host_and_are_hashed() {
    let base = "[network]\nmode = \"allowlist\"\nallow = [\"api.anthropic.com\"]\n";
    let rule = "[[network.credentials]]\nname = \"gh\"\nhost = \"github.com\"\npaths = [\"/o/r.git/\"]\nsource = \"env:GITHUB_TOKEN\"\nbasic = \"x-access-token\"\ngit = true\n";
    let p = load_text(&format!("{base}{rule}")).unwrap();
    assert_eq!(p.network.credentials.len(), 1);
    assert!(
        p.network
            .allow
            .compiled()
            .match_host(&allow::Host::Name("github.com".into()), 443)
            .is_some()
    );
    let without = load_text(base).unwrap();
    assert_ne!(p.policy_hash(), without.policy_hash());
    // Another scope, another hash.
    let wider = load_text(&format!("{base}{}", rule.replace("/o/r.git/", "/"))).unwrap();
    assert_ne!(p.policy_hash(), wider.policy_hash());
    // Problems are placed at their line.
    for (text, line, needle) in [
        (
            format!("{base}{}", rule.replace("env:GITHUB_TOKEN", "vault:x")),
            8,
            "network.credentials.source",
        ),
        (
            format!("{base}{}", rule.replace("\"/o/r.git/\"", "\"o/r\"")),
            7,
            "network.credentials.paths",
        ),
        (format!("{base}{rule}{rule}"), 5, "two credential rules"),
        (
            format!("[network]\nmode = \"none\"\n{rule}"),
            3,
            "need mode \"allowlist\"",
        ),
    ] {
        let e = load_text(&text).unwrap_err();
        let shown = e.to_string();
        assert!(
            matches!(e, ProfileError::Syntax { line: l, .. } if l == line)
                && shown.contains(needle),
            "{text}: {shown}"
        );
    }
}

/// Presets allow their hosts; a child profile that sets `presets` replaces the list (ci and
/// strict set none, so default's never reach them); an unknown name is placed at its line.
#[test]
fn presets_allow_their_hosts_and_a_child_replaces_them() {
    let allowed = |p: &Profile, name: &str| {
        p.network
            .allow
            .compiled()
            .match_host(&allow::Host::Name(name.into()), 443)
            .is_some()
    };
    let default = Profile::builtin_default().unwrap();
    assert_eq!(default.network.presets, ["rust", "python", "go", "node"]);
    // npm's registry is in, read-only (GET and HEAD through the proxy's TLS termination).
    assert!(allowed(&default, "registry.npmjs.org"));
    assert_eq!(default.network.read_only, ["registry.npmjs.org"]);
    for host in [
        "index.crates.io",
        "static.crates.io",
        "pypi.org",
        "proxy.golang.org",
    ] {
        assert!(allowed(&default, host), "{host}");
    }
    // The other upload hosts are in no default preset.
    for host in ["github.com", "upload.pypi.org", "crates.io"] {
        assert!(!allowed(&default, host), "{host}");
    }
    for name in ["ci", "strict"] {
        let p = load_text(&format!("extends = \"{name}\"\n")).unwrap();
        assert!(p.network.presets.is_empty(), "{name}");
        assert!(p.network.read_only.is_empty(), "{name}");
        assert!(!allowed(&p, "registry.npmjs.org"), "{name}");
        assert!(!allowed(&p, "index.crates.io"), "{name}");
        assert!(allowed(&p, "api.anthropic.com"), "{name}");
    }
    let child = load_text("extends = \"ci\"\n[network]\npresets = [\"node\"]\n").unwrap();
    assert_eq!(child.network.presets, ["node"]);
    assert!(allowed(&child, "registry.npmjs.org") && !allowed(&child, "pypi.org"));
    assert_eq!(child.network.read_only, ["registry.npmjs.org"]);
    // `network.read_only` names more such hosts (allowed, GET and HEAD only); a bad entry
    // is refused.
    let own = load_text(
        "extends = \"ci\"\n[network]\nread_only = [\"Mirror.Example:8443\", \"registry.npmjs.org\"]\n",
    )
    .unwrap();
    assert_eq!(
        own.network.read_only,
        ["mirror.example:8443", "registry.npmjs.org"]
    );
    assert!(
        own.network
            .allow
            .compiled()
            .match_host(&allow::Host::Name("mirror.example".into()), 8443)
            .is_some()
    );
    for bad in ["*.example.com", "a b", "x.example:0", ""] {
        let err = load_text(&format!("[network]\nread_only = [{bad:?}]\n")).unwrap_err();
        assert!(
            err.to_string().contains("network.read_only"),
            "{bad}: {err}"
        );
    }
    assert_ne!(child.policy_hash(), default.policy_hash());
    let err =
        load_text("[network]\nallow = []\npresets = [\n \"rust\",\n \"ruby\",\n]\n").unwrap_err();
    assert!(
        matches!(err, ProfileError::Syntax { line: 5, .. })
            && err.to_string().contains("unknown preset \"ruby\""),
        "{err}"
    );
}

#[test]
fn builtin_profiles_load() {
    for (name, _) in BUILTIN {
        let (origin, text, _, json) = builtin_source(name).unwrap();
        // The JSON form build.rs compiles in loads to exactly what the TOML says.
        let from_json: ProfileFile = serde_json::from_str(json.unwrap()).unwrap();
        let from_toml = parse_toml(&origin, &text).unwrap();
        assert_eq!(format!("{from_json:?}"), format!("{from_toml:?}"), "{name}");
    }
    let p = Profile::builtin_default().unwrap();
    assert_eq!(p.name, "default");
    assert!(
        p.filesystem
            .hidden
            .contains(&PathSpec::parse("~/.ssh").unwrap())
    );
}

#[test]
fn a_profile_is_a_regular_file_of_bounded_size() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = Profile::load(Some(&fifo)).unwrap_err().to_string();
    assert_eq!(
        err,
        format!(
            "reading profile {}: is not a regular file (a FIFO)",
            fifo.display()
        )
    );
    // The same for a file named by `extends`.
    let child = dir.path().join("child.toml");
    std::fs::write(&child, "name = \"c\"\nextends = \"fifo.toml\"\n").unwrap();
    let err = Profile::load(Some(&child)).unwrap_err().to_string();
    assert!(
        err.contains("fifo.toml: is not a regular file (a FIFO)"),
        "{err}"
    );
    // Said at the `extends` line, as is an empty name (the profile's own directory) or
    // a directory.
    assert!(err.starts_with(&format!("{}:2:", child.display())), "{err}");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    for (extends, says) in [
        ("", "empty: name a built-in profile or a file"),
        ("sub", "is not a regular file (a directory)"),
    ] {
        std::fs::write(&child, format!("name = \"c\"\n\nextends = \"{extends}\"\n")).unwrap();
        let err = Profile::load(Some(&child)).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("{}:3:", child.display())) && err.contains(says),
            "{extends:?}: {err}"
        );
    }

    let big = dir.path().join("big.toml");
    let mut text = "name = \"big\"\n".to_string();
    while text.len() as u64 <= MAX_PROFILE_BYTES {
        text.push_str("# a comment to make the file larger than any profile needs\n");
    }
    std::fs::write(&big, &text).unwrap();
    let err = Profile::load(Some(&big)).unwrap_err().to_string();
    assert!(err.ends_with("is larger than 4 MiB: not read"), "{err}");
}

#[test]
fn unknown_key_names_line_and_column() {
    let err = load_text("name = \"x\"\n[filesystem]\nwritabel = []\n").unwrap_err();
    let text = err.to_string();
    assert!(text.contains(":3:1:"), "{text}");
    assert!(text.contains("writabel"), "{text}");
}

#[test]
fn wrong_type_is_refused() {
    let err = load_text("[network]\nmode = \"sometimes\"\n").unwrap_err();
    assert!(err.to_string().contains(":2:8:"), "{err}");
}

#[test]
fn extends_unions_lists_and_overrides_scalars() {
    let p = load_text(
        "extends = \"default\"\nname = \"mine\"\n[filesystem]\nhidden = [\"~/.vault\"]\n[network]\nmode = \"host\"\n",
    )
    .unwrap();
    let base = Profile::builtin_default().unwrap();
    assert_eq!(p.name, "mine");
    assert_eq!(p.network.mode, NetworkMode::Host);
    assert_eq!(p.filesystem.hidden.len(), base.filesystem.hidden.len() + 1);
    assert_ne!(p.policy_hash(), base.policy_hash());
}

#[test]
fn extends_loop_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.toml"), "extends = \"b.toml\"\n").unwrap();
    std::fs::write(dir.path().join("b.toml"), "extends = \"a.toml\"\n").unwrap();
    let err = Profile::load(Some(&dir.path().join("a.toml"))).unwrap_err();
    assert!(matches!(err, ProfileError::ExtendsLoop { .. }), "{err}");
}

/// `network.gateway.login_paths` alone is for the gateway StepProof puts in (no route of
/// its own); a child adds to its base's paths and keeps its base's route unless it names
/// one; without paths the hash is what it was.
#[test]
fn login_paths_are_a_union_apart_from_the_route() {
    let only = load_text(
        "extends = \"default\"\n[network.gateway]\nlogin_paths = [\"GET /api/oauth/usage\", \"POST /v1/files\", \"GET /api/oauth/usage\"]\n",
    )
    .unwrap();
    assert!(only.network.gateway.is_none());
    let shown: Vec<String> = only
        .network
        .login_paths
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(shown, ["GET /api/oauth/usage", "POST /v1/files"]);
    let default = Profile::builtin_default().unwrap();
    assert_ne!(only.policy_hash(), default.policy_hash());
    let plain = load_text("extends = \"default\"\n").unwrap();
    assert_eq!(plain.policy_hash(), default.policy_hash());

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("base.toml"),
        "[network]\nmode = \"allowlist\"\n[network.gateway]\nupstream = \"gw.example\"\ncredential = \"env:K\"\nlogin_paths = [\"GET /api/oauth/usage\"]\n",
    )
    .unwrap();
    let child = dir.path().join("child.toml");
    std::fs::write(
        &child,
        "extends = \"base.toml\"\nnetwork.gateway.login_paths = [\"POST /v1/files\"]\n",
    )
    .unwrap();
    let merged = Profile::load(Some(&child)).unwrap();
    let gateway = merged.network.gateway.as_ref().unwrap();
    assert_eq!(
        (gateway.upstream.as_str(), gateway.credential.as_str()),
        ("gw.example", "env:K")
    );
    assert_eq!(merged.network.login_paths.len(), 2);
    // Where it is set, for messages: the outermost file that sets it, and its line.
    let at = merged
        .where_set(&["network", "gateway", "login_paths"])
        .unwrap();
    assert!(at.ends_with("child.toml:2"), "{at}");
}

#[test]
fn hash_is_stable_and_symbolic() {
    let a = Profile::builtin_default().unwrap().policy_hash();
    let b = Profile::builtin_default().unwrap().policy_hash();
    assert_eq!(a, b);
    assert!(a.starts_with("sha256:") && a.len() == 7 + 64);
}

#[test]
fn bad_values_are_refused() {
    assert!(load_text("[process]\nsandbox_uid = 0\n").is_err());
    // Entries that would cover what StepProof places itself, refused with file:line.
    for (text, line) in [
        ("name = \"x\"\n[filesystem]\nread_only = [\"/etc\"]\n", 3),
        (
            "[filesystem]\nhidden = [\n  \"/tmp/x\",\n  \"/etc/claude-code/managed-settings.d\",\n]\n",
            4,
        ),
        ("[filesystem]\nwritable = [\"/run\"]\n", 2),
        ("[filesystem]\nread_only = ['/']\n", 2),
        ("[filesystem]\nwritable = [\"~/.local\"]\n", 2),
        (
            "[filesystem]\nwritable = [\"~/.local/state/stepproof/runs\"]\n",
            2,
        ),
    ] {
        let e = load_text(text).unwrap_err().to_string();
        assert!(
            e.contains(&format!("p.toml:{line}:")) && e.contains("StepProof places itself"),
            "{text}: {e}"
        );
    }
    assert!(
        load_text("[filesystem]\nread_only = [\"/etc/ssl\"]\nhidden = [\"~/.local/share\"]\n")
            .is_ok()
    );
    // Values that wrapped (tmpfs reads size=0 as unlimited) are refused with their range.
    for (text, key) in [
        (
            "[filesystem]\ntmp_size_mib = 17592186044416\n",
            "tmp_size_mib",
        ),
        ("[filesystem]\ntmp_size_mib = 0\n", "tmp_size_mib"),
        ("[process]\nsandbox_uid = 65534\n", "65534"),
        ("[process]\nsandbox_uid = 4294967295\n", "sandbox_uid"),
        (
            "[process.limits]\nnproc = 0\nnofile = 1024\ncore = 0\n",
            "nproc",
        ),
        (
            "[process.limits]\nnproc = 10\nnofile = 99999999\ncore = 0\n",
            "nofile",
        ),
        (
            "[process.limits]\nnproc = 10\nnofile = 64\ncore = 0\nfsize = 0\n",
            "fsize",
        ),
        ("[process.limits]\nmemory = 0\n", "memory"),
        ("[process.limits]\nmemory = \"1M\"\n", "memory"),
        ("[process.limits]\npids = 0\n", "pids"),
        ("[network]\nproxy_port = 0\n", "proxy_port"),
    ] {
        let e = load_text(text).unwrap_err().to_string();
        assert!(
            e.contains(key) && (e.contains("range") || e.contains("65534")),
            "{text}: {e}"
        );
    }
    assert!(load_text("[filesystem]\nprotected = [\"../x\"]\n").is_err());
    assert!(load_text("[filesystem]\nwritable = [\"/\"]\n").is_err());
    assert!(load_text("[filesystem]\nhidden = [\"\"]\n").is_err());
    // The secret scan's patterns are names, and never all of the home.
    for bad in ["*", "?*", "a/b*", ""] {
        let text = format!("[filesystem]\nhidden_names = [{bad:?}]\n");
        assert!(load_text(&text).is_err(), "{text}");
    }
    assert!(load_text("[filesystem]\nhome_allow = [\"/usr\"]\n").is_err());
    assert!(load_text("[filesystem]\nhome_allow = [\"~\"]\n").is_err());
    assert!(load_text("[filesystem]\nhome = \"everything\"\n").is_err());
    assert!(load_text("[filesystem]\nenv_files_visible = [\"../.env\"]\n").is_err());
    assert!(load_text("[process]\nenv = [\"A=B\"]\n").is_err());
    // Keys and variables that would take the hook away, refused with file:line.
    for (text, line, needle) in [
        (
            "[claude.managed_settings]\ndisableAllHooks = true\n",
            2,
            "StepProof owns",
        ),
        (
            "\n[claude.managed_settings]\npolicyHelper = \"/bin/x\"\n",
            3,
            "StepProof owns",
        ),
        (
            "[claude.managed_settings.env]\nCLAUDE_CODE_SIMPLE = \"1\"\n",
            2,
            "StepProof owns",
        ),
        (
            "[process]\nenv = [\n  \"PATH\",\n  \"CLAUDE_CODE_SIMPLE\",\n]\n",
            4,
            "managed hooks off",
        ),
        (
            "[process.set_env]\nCLAUDE_CODE_MANAGED_SETTINGS_PATH = \"/tmp/m.json\"\n",
            2,
            "managed hooks off",
        ),
    ] {
        let e = load_text(text).unwrap_err().to_string();
        assert!(
            e.contains(&format!("p.toml:{line}:")) && e.contains(needle),
            "{text}: {e}"
        );
    }
    let p =
        load_text("[claude.managed_settings.permissions]\ndeny = [\"Bash(rm -rf *)\"]\n").unwrap();
    assert_eq!(
        p.claude.managed_settings["permissions"]["deny"][0],
        "Bash(rm -rf *)"
    );
    let err = load_text("[network]\nmode = \"allowlist\"\nallow = [\"*\"]\n").unwrap_err();
    assert!(err.to_string().contains("`*`"), "{err}");
}
