//! The home shows only what the agent needs: judged from inside, on a home planted the way a
//! real developer's is (one or more files of every class of the secret catalogue, and names the
//! catalogue does not list but that look like secrets), as root and as the test user.

mod support;

use std::fs;
use std::path::Path;
use support::*;

/// Credential and history files of a real developer home, by class. Written independently of
/// the profile's catalogue: the test checks the catalogue and the name scan cover them.
const PLANTED: &[(&str, &[&str])] = &[
    (
        "version control",
        &[
            ".git-credentials",
            ".config/git/credentials",
            ".netrc",
            ".config/gh/hosts.yml",
            ".config/hub",
            ".config/glab-cli/config.yml",
            ".subversion/auth/svn.simple/abc",
            ".config/tea/config.yml",
        ],
    ),
    (
        "container registries",
        &[
            ".docker/config.json",
            ".config/containers/auth.json",
            ".config/helm/registry/config.json",
            ".dockercfg",
        ],
    ),
    (
        "cloud and infrastructure",
        &[
            ".aws/credentials",
            ".config/gcloud/application_default_credentials.json",
            ".azure/msal_token_cache.json",
            ".kube/config",
            ".s3cfg",
            ".config/rclone/rclone.conf",
            ".terraform.d/credentials.tfrc.json",
            ".vault-token",
            ".config/doctl/config.yaml",
            ".oci/config",
            ".pulumi/credentials.json",
            ".fly/config.yml",
            ".config/hcloud/cli.toml",
            ".databrickscfg",
            ".config/configstore/firebase-tools.json",
        ],
    ),
    (
        "package registries and publishing",
        &[
            ".npmrc",
            ".yarnrc.yml",
            ".pypirc",
            ".cargo/credentials.toml",
            ".gem/credentials",
            ".nuget/NuGet/NuGet.Config",
            ".config/composer/auth.json",
            ".pub-cache/credentials.json",
            ".config/pip/pip.conf",
            ".config/jfrog/jfrog-cli.conf",
        ],
    ),
    (
        "build tools",
        &[
            ".m2/settings.xml",
            ".m2/settings-security.xml",
            ".gradle/gradle.properties",
            ".ivy2/.credentials",
            ".sbt/credentials",
        ],
    ),
    (
        "databases",
        &[
            ".pgpass",
            ".my.cnf",
            ".mylogin.cnf",
            ".config/pgcli/config",
            ".mongoshrc.js",
        ],
    ),
    (
        "password managers and keyrings",
        &[
            ".password-store/email.gpg",
            ".local/share/keyrings/login.keyring",
            ".config/op/config",
            ".config/Bitwarden CLI/data.json",
            ".pki/nssdb/cert9.db",
            ".local/share/kwalletd/kdewallet.kwl",
        ],
    ),
    (
        "browser profiles, mail and chat",
        &[
            ".mozilla/firefox/abc.default/logins.json",
            ".config/google-chrome/Default/Cookies",
            ".config/chromium/Default/Login Data",
            ".config/BraveSoftware/Brave-Browser/Default/Cookies",
            ".thunderbird/abc.default/logins.json",
            ".config/Slack/Cookies",
        ],
    ),
    (
        "other coding agents",
        &[
            ".codex/auth.json",
            ".gemini/oauth_creds.json",
            ".config/github-copilot/apps.json",
            ".aider.conf.yml",
            ".continue/config.json",
            ".local/share/opencode/auth.json",
            ".cursor/mcp.json",
            ".config/zed/settings.json",
        ],
    ),
    (
        "AI provider tokens",
        &[
            ".config/openai/auth.json",
            ".cache/huggingface/token",
            ".ollama/id_ed25519",
            ".config/io.datasette.llm/keys.json",
            ".kaggle/kaggle.json",
            ".config/anthropic/api_key",
            ".wandb/settings",
        ],
    ),
    (
        "encryption and signing keys",
        &[
            ".ssh/id_ed25519",
            ".gnupg/private-keys-v1.d/abc.key",
            ".config/sops/age/keys.txt",
            ".age/key.txt",
            ".minisign/minisign.key",
            ".android/adbkey",
        ],
    ),
    (
        "shell and REPL histories",
        &[
            ".bash_history",
            ".zsh_history",
            ".histfile",
            ".local/share/fish/fish_history",
            ".python_history",
            ".node_repl_history",
            ".irb_history",
            ".psql_history",
            ".mysql_history",
            ".sqlite_history",
            ".rediscli_history",
            ".lesshst",
            ".viminfo",
            ".Rhistory",
            ".julia/logs/repl_history.jl",
            ".local/share/atuin/history.db",
            ".ghc/ghci_history",
            ".local/share/nushell/history.txt",
        ],
    ),
    (
        "environment files",
        &[
            ".env",
            ".env.production",
            ".config/environment.d/secrets.conf",
        ],
    ),
    // Not in the catalogue: found by the scan of names in ~, ~/.config and ~/.local/share.
    (
        "names that look like secrets",
        &[
            "github-token.txt",
            "prod-db-password",
            "deploy.pem",
            "client.key",
            "id_work",
            ".config/my-service-credentials.json",
            ".config/acme-auth.json",
            ".local/share/api_key.txt",
            ".config/vendor-secret",
        ],
    ),
];

fn plant(w: &World) -> Vec<String> {
    let mut paths = Vec::new();
    for (_, files) in PLANTED {
        for rel in *files {
            let path = w.home.join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, format!("{SECRET} {rel}\n")).unwrap();
            paths.push(rel.to_string());
        }
    }
    chown_tree(&w.home, w.owner);
    paths
}

/// Reads every planted file inside; returns the ones whose marker came out.
fn readable(w: &World, extra: &[&str], rels: &[String]) -> (Vec<String>, std::process::Output) {
    let mut script = String::from("cd \"$HOME\" || exit 9\n");
    for rel in rels {
        script.push_str(&format!("cat -- '{rel}' 2>/dev/null\n"));
    }
    script.push_str("exit 0\n");
    let out = w
        .command(extra, &["/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let leaked = stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("{SECRET} ")))
        .map(str::to_string)
        .collect();
    (leaked, out)
}

// The default profile: the home is read-only and shows none of the planted secrets.
both!(no_planted_secret_is_readable_on_default, |w: &World| {
    let rels = plant(w);
    // Control: a planted file that is not a secret is readable (the probe can read).
    fs::write(w.home.join(".notes"), format!("{SECRET} .notes\n")).unwrap();
    chown_tree(&w.home, w.owner);
    let mut with_control = rels.clone();
    with_control.push(".notes".into());
    let (leaked, out) = readable(w, &[], &with_control);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(
        leaked,
        [".notes"],
        "readable inside on the default profile (only .notes should be): {}",
        describe(&out)
    );
    // `explain` names what the scan found, with the pattern it matched.
    let explain = w
        .as_owner(&Path::new(env!("CARGO_BIN_EXE_stepproof-run")).with_file_name("stepproof"))
        .args(["explain"])
        .current_dir(&w.workspace)
        .env_clear()
        .env("HOME", &w.home)
        .env("PATH", "/usr/bin:/bin")
        .envs(field_ledger())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&explain.stdout);
    for name in [
        "github-token.txt",
        "deploy.pem",
        "my-service-credentials.json",
    ] {
        assert!(
            text.lines()
                .any(|l| l.contains(name) && l.contains("(matches ")),
            "explain does not list {name}: {text}"
        );
    }
});

// A workspace whose name looks like a secret, and a path the profile lists, stay visible.
both!(
    the_scan_never_hides_the_workspace_or_listed_paths,
    |w: &World| {
        let ws = w.home.join("token-service/app");
        fs::create_dir_all(&ws).unwrap();
        fs::write(ws.join("main.rs"), "fn main() {}\n").unwrap();
        fs::create_dir_all(w.home.join(".config/my-token-tool")).unwrap();
        fs::write(w.home.join(".config/my-token-tool/config"), "listed\n").unwrap();
        fs::write(w.home.join(".config/other-token"), SECRET).unwrap();
        let profile = w.base.join("listed.toml");
        fs::write(
            &profile,
            "extends = \"default\"\n[filesystem]\nread_only = [\"~/.config/my-token-tool\"]\n",
        )
        .unwrap();
        chown_tree(&w.home, w.owner);
        let out = w
        .command(
            &[
                "--profile",
                profile.to_str().unwrap(),
                "--workspace",
                ws.to_str().unwrap(),
            ],
            &[
                "/bin/sh",
                "-c",
                "cat main.rs && cat ~/.config/my-token-tool/config && cat ~/.config/other-token",
            ],
        )
        .output()
        .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("fn main"), "{}", describe(&out));
        assert!(stdout.contains("listed"), "{}", describe(&out));
        assert!(!stdout.contains(SECRET), "{}", describe(&out));
    }
);

// `ci` (and `strict`): only what the profile lists of the home exists; the home inside is
// private and writable, and nothing written there reaches the host.
both!(ci_shows_only_the_allow_listed_home, |w: &World| {
    let rels = plant(w);
    fs::write(w.home.join(".gitconfig"), "[user]\n\tname = Listed\n").unwrap();
    fs::create_dir_all(w.home.join(".cargo/bin")).unwrap();
    fs::write(w.home.join(".cargo/bin/tool"), "#!/bin/sh\necho tool\n").unwrap();
    fs::write(w.home.join("notes.txt"), "not listed\n").unwrap();
    chown_tree(&w.home, w.owner);
    for profile in ["ci", "strict"] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("profiles/{profile}.toml"));
        let extra = ["--profile", path.to_str().unwrap()];
        let (leaked, out) = readable(w, &extra, &rels);
        assert!(out.status.success(), "{profile}: {}", describe(&out));
        assert!(leaked.is_empty(), "{profile}: readable: {leaked:?}");
        let out = w
            .command(
                &extra,
                &[
                    "/bin/sh",
                    "-c",
                    "cat ~/.gitconfig; ls ~/.cargo/bin; test -e ~/notes.txt && echo NOTES; \
                     test -e ~/src/other-project && echo OTHER; \
                     mkdir -p ~/.cache/go-build && echo cached > ~/.cache/go-build/x && echo WROTE; \
                     echo x > ~/.gitconfig 2>/dev/null || echo READONLY",
                ],
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{profile}: {}", describe(&out));
        assert!(
            stdout.contains("name = Listed"),
            "{profile}: {}",
            describe(&out)
        );
        assert!(stdout.contains("tool"), "{profile}: {}", describe(&out));
        assert!(!stdout.contains("NOTES"), "{profile}: {}", describe(&out));
        assert!(!stdout.contains("OTHER"), "{profile}: {}", describe(&out));
        assert!(stdout.contains("WROTE"), "{profile}: {}", describe(&out));
        assert!(stdout.contains("READONLY"), "{profile}: {}", describe(&out));
        assert!(!w.home.join(".cache/go-build/x").exists(), "{profile}");
        assert_eq!(
            fs::read_to_string(w.home.join(".gitconfig")).unwrap(),
            "[user]\n\tname = Listed\n"
        );
    }
});

// `ci`: the project's .env files are absent at the kernel (templates stay); a tracked one is
// reported, not hidden; a file the profile opts in is shown.
both!(ci_hides_the_projects_env_files, |w: &World| {
    let ws = &w.workspace;
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "safe.directory=*",
            ])
            .args(args)
            .current_dir(ws)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", describe(&out));
    };
    fs::remove_dir_all(ws.join(".git")).unwrap();
    git(&["init", "-q"]);
    for (rel, body) in [
        (".env", SECRET),
        (".env.local", SECRET),
        ("api/.env.production", SECRET),
        (".env.example", "TEMPLATE=1"),
        ("web/.env", "tracked"),
        ("opted/.env", "opted in"),
    ] {
        let p = ws.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, body).unwrap();
    }
    git(&["add", "web/.env", ".env.example"]);
    chown_tree(&w.home, w.owner);
    let profile = w.base.join("ci-opt.toml");
    let ci = Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles/ci.toml");
    fs::write(
        &profile,
        format!(
            "extends = {:?}\n[filesystem]\nenv_files_visible = [\"opted/.env\"]\n",
            ci.to_str().unwrap()
        ),
    )
    .unwrap();
    let out = w
        .command(
            &["--profile", profile.to_str().unwrap()],
            &[
                "/bin/sh",
                "-c",
                "for f in .env .env.local api/.env.production .env.example web/.env opted/.env; do \
                 printf '%s: ' $f; cat $f 2>/dev/null || echo UNREADABLE; echo; done; \
                 rm -f .env 2>/dev/null || echo PINNED",
            ],
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(!stdout.contains(SECRET), "{}", describe(&out));
    for line in [
        ".env: UNREADABLE",
        ".env.local: UNREADABLE",
        "api/.env.production: UNREADABLE",
        ".env.example: TEMPLATE=1",
        "web/.env: tracked",
        "opted/.env: opted in",
    ] {
        assert!(stdout.contains(line), "wanted {line:?}: {}", describe(&out));
    }
    assert!(stdout.contains("PINNED"), "{}", describe(&out));
    assert!(
        stderr.contains("web/.env is a .env file tracked by git"),
        "{}",
        describe(&out)
    );
    assert_eq!(fs::read_to_string(ws.join(".env")).unwrap(), SECRET);
});
