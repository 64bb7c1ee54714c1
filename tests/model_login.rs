//! The model login stays outside (issue 19), with the real Claude Code against the mock
//! Messages API over TLS (a test CA, trusted through `NODE_EXTRA_CA_CERTS` in the caller's
//! environment, and `ANTHROPIC_BASE_URL` there naming the mock: the user's own base URL becomes
//! the gateway's upstream). A claude.ai login and an API key both work while a search of
//! everything readable inside finds neither; an expired login is refreshed by the supervisor
//! under Claude Code's locks and written back, and a bare `claude -p` afterwards works with the
//! host's store; a held lock is waited for, a stale one broken, and two refreshers never spend
//! one refresh token. As root and as the test user.

#[path = "support/e2e.rs"]
mod e2e;
mod support;
#[path = "support/tui.rs"]
mod tui;

use e2e::*;
use serde_json::{Value, json};
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::*;

const SCANNER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/scan-for-secrets.py"
);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A suffix for this test's secrets, so that nothing else on the machine can match them.
fn suffix() -> String {
    format!("{:x}{:x}", now_ms(), std::process::id())
}

fn secret(word: &str, prefix: &str, suffix: &str) -> String {
    format!("{prefix}real{word}-{suffix}")
}

/// Writes a claude.ai login into the world's host store (mode 0600, owned by the world's user).
fn write_store(w: &World, access: &str, refresh: &str, expires_at: u64) -> std::path::PathBuf {
    let store = w.home.join(".claude/.credentials.json");
    fs::create_dir_all(store.parent().unwrap()).unwrap();
    fs::write(
        &store,
        json!({
            "claudeAiOauth": {
                "accessToken": access,
                "refreshToken": refresh,
                "expiresAt": expires_at,
                "scopes": ["user:inference", "user:profile", "user:sessions:claude_code"],
                "subscriptionType": "max",
                "rateLimitTier": "default_claude_max_20x",
                "subscriptionTypeSource": "profile"
            },
            "somethingElse": {"kept": true}
        })
        .to_string(),
    )
    .unwrap();
    fs::set_permissions(&store, fs::Permissions::from_mode(0o600)).unwrap();
    chown_tree(&w.home.join(".claude"), w.owner);
    store
}

/// A profile on `ci` for these tests: the model is reached through the gateway (nothing to
/// configure), the scanner may run.
fn model_profile(w: &World) -> String {
    let dir = scratch(w, "profile");
    let path = dir.join("profile.toml");
    fs::write(
        &path,
        "extends = \"ci\"\n[process]\nset_env = { CLAUDE_CODE_MAX_RETRIES = \"1\" }\n",
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&fs::read(path).unwrap()).unwrap()
}

/// Every Messages request carried `header` = `value` (and no other credential).
#[track_caller]
fn assert_credential(mock: &Mock, header: &str, value: &str) {
    let requests = mock.messages_requests();
    assert!(!requests.is_empty(), "no request reached the mock");
    for r in &requests {
        assert_eq!(r["headers"][header], value, "{}", r["headers"]);
        let other = if header == "authorization" {
            "x-api-key"
        } else {
            "authorization"
        };
        assert!(r["headers"].get(other).is_none(), "{}", r["headers"]);
    }
}

/// Runs the scanner inside as Claude's tool call and returns what it printed.
fn scan_inside(w: &World, login: Login, suffix: &str) -> (Run, Mock) {
    let tls = test_tls(w);
    let scanner = w.workspace.join("scan.py");
    fs::copy(SCANNER, &scanner).unwrap();
    chown_tree(&scanner, w.owner);
    let (accept, env_key) = match login {
        Login::ClaudeAi => {
            write_store(
                w,
                &secret("Access", "sk-ant-oat01-", suffix),
                &secret("Refresh", "sk-ant-ort01-", suffix),
                now_ms() + 8 * 3600 * 1000,
            );
            (
                format!("Bearer {}", secret("Access", "sk-ant-oat01-", suffix)),
                None,
            )
        }
        Login::ApiKey => {
            let key = secret("Key", "sk-ant-api03-", suffix);
            (format!("x-api-key {key}"), Some(key))
        }
    };
    let mock = Mock::start_tls(
        w,
        json!({
            "turns": [bash(&format!("python3 scan.py {suffix}")), text("fin")],
            "accept": [accept],
        }),
        &tls,
    );
    let url = mock.https_url();
    let ca = tls.ca.display().to_string();
    let mut env = vec![
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("NODE_EXTRA_CA_CERTS", &ca),
    ];
    if let Some(key) = &env_key {
        env.push(("ANTHROPIC_API_KEY", key));
    }
    let run = run_claude_as(
        w,
        &Launch {
            env: &env,
            ..Launch::default()
        },
        &model_profile(w),
        &[],
    );
    (run, mock)
}

#[derive(Clone, Copy, Debug)]
enum Login {
    ClaudeAi,
    ApiKey,
}

#[track_caller]
fn assert_nowhere_inside(w: &World, login: Login) {
    let suffix = suffix();
    let (run, mock) = scan_inside(w, login, &suffix);
    assert!(run.status.success(), "{login:?}: {}", run.describe());
    match login {
        Login::ClaudeAi => assert_credential(
            &mock,
            "authorization",
            &format!("Bearer {}", secret("Access", "sk-ant-oat01-", &suffix)),
        ),
        Login::ApiKey => {
            assert_credential(&mock, "x-api-key", &secret("Key", "sk-ant-api03-", &suffix))
        }
    }
    let id = call_id(None, 0);
    run.expect_decision(&id, "allow", "build-test");
    let report = mock.expect_result(&id).text;
    assert!(report.contains("scan-done"), "{login:?}: {report}");
    assert!(
        !report.contains("SECRET-FOUND"),
        "{login:?}: the real login is readable inside:\n{report}"
    );
    // The control: the search read files, environments, and saw the placeholder where the
    // agent holds it.
    let files: u64 = report
        .split("files=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(files > 10_000, "{login:?}: {report}");
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("control /proc/") && l.ends_with("/environ")),
        "{login:?}: the placeholder was not seen in any environment: {report}"
    );
    if let Login::ClaudeAi = login {
        assert!(
            report.contains("control /run/claude-config/.credentials.json"),
            "{report}"
        );
    }
    // Neither in the audit log or anything the run printed.
    let audit = fs::read_to_string(&run.audit_path).unwrap();
    for text in [&audit, &run.stdout, &run.stderr] {
        assert!(!text.contains(&format!("-{suffix}")), "{login:?}: {text}");
    }
    let record = &run.records("model-login")[0];
    let expected = match login {
        Login::ClaudeAi => "claude.ai login",
        Login::ApiKey => "ANTHROPIC_API_KEY",
    };
    assert!(
        record["login"]
            .as_str()
            .is_some_and(|l| l.contains(expected)),
        "{record:#}"
    );
}

both_claude!(a_claude_ai_login_is_nowhere_inside, |w: &World| {
    assert_nowhere_inside(w, Login::ClaudeAi);
});

both_claude!(an_api_key_is_nowhere_inside, |w: &World| {
    assert_nowhere_inside(w, Login::ApiKey);
});

/// The mock for a refresh: only `new_access` is accepted; `old_refresh` buys it once.
fn refresh_mock(w: &World, tls: &TestTls, suffix: &str, turns: Value) -> Mock {
    Mock::start_tls(w, refresh_script(suffix, turns), tls)
}

fn refresh_script(suffix: &str, turns: Value) -> Value {
    json!({
        "turns": turns,
        "accept": [format!("Bearer sk-ant-oat01-newAccess-{suffix}")],
        "token": {
            "refresh_token": format!("sk-ant-ort01-oldRefresh-{suffix}"),
            "access_token": format!("sk-ant-oat01-newAccess-{suffix}"),
            "new_refresh_token": format!("sk-ant-ort01-newRefresh-{suffix}"),
            "expires_in": 28800
        }
    })
}

fn launch_env<'a>(mock: &Mock, tls: &TestTls) -> Vec<(&'a str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", mock.https_url()),
        ("NODE_EXTRA_CA_CERTS", tls.ca.display().to_string()),
        (
            "STEPPROOF_OAUTH_TOKEN_URL",
            format!("{}/v1/oauth/token", mock.https_url()),
        ),
    ]
}

/// The host store after a refresh: new tokens, a later expiry, everything else kept, still the
/// user's file with mode 0600, and no lock left behind.
#[track_caller]
fn assert_store_refreshed(w: &World, store: &Path, suffix: &str) {
    let after = read_json(store);
    let login = &after["claudeAiOauth"];
    assert_eq!(
        login["accessToken"],
        format!("sk-ant-oat01-newAccess-{suffix}")
    );
    assert_eq!(
        login["refreshToken"],
        format!("sk-ant-ort01-newRefresh-{suffix}")
    );
    assert!(login["expiresAt"].as_u64().unwrap() > now_ms() + 7 * 3600 * 1000);
    assert_eq!(login["subscriptionType"], "max");
    assert_eq!(login["subscriptionTypeSource"], "profile");
    assert_eq!(after["somethingElse"]["kept"], true);
    let meta = fs::metadata(store).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o600);
    assert_eq!((meta.uid(), meta.gid()), w.owner);
    assert!(!w.home.join(".claude/.oauth_refresh.lock").exists());
    assert!(!w.home.join(".claude.lock").exists());
}

// An expired login (expiresAt in the past in the host store) is refreshed by the supervisor
// before the first request; a stale refresh lock left by a dead `claude` is broken. The run
// continues with the new token, the host store holds the new tokens, and a bare `claude -p`
// afterwards works with that store.
both_claude!(
    an_expired_login_is_refreshed_outside_and_a_bare_claude_keeps_working,
    |w: &World| {
        let suffix = suffix();
        let store = write_store(
            w,
            &format!("sk-ant-oat01-oldAccess-{suffix}"),
            &format!("sk-ant-ort01-oldRefresh-{suffix}"),
            now_ms() - 3600 * 1000,
        );
        let lock = w.home.join(".claude/.oauth_refresh.lock");
        fs::create_dir(&lock).unwrap();
        fs::File::open(&lock)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(120))
            .unwrap();
        let tls = test_tls(w);
        let mock = refresh_mock(w, &tls, &suffix, json!([bash("echo ran"), text("fin")]));
        let env = launch_env(&mock, &tls);
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let run = run_claude_as(
            w,
            &Launch {
                env: &env,
                ..Launch::default()
            },
            &model_profile(w),
            &[],
        );
        assert!(run.status.success(), "{}", run.describe());
        assert!(!mock.expect_result(&call_id(None, 0)).is_error);
        assert_credential(
            &mock,
            "authorization",
            &format!("Bearer sk-ant-oat01-newAccess-{suffix}"),
        );
        let tokens = mock.token_requests();
        assert_eq!(tokens.len(), 1, "{tokens:#?}");
        let body = &tokens[0]["body"];
        assert_eq!(body["grant_type"], "refresh_token");
        assert_eq!(body["client_id"], "9d1c250a-e61b-44d9-88ed-5944d1962f5e");
        assert_eq!(
            body["scope"],
            "user:inference user:profile user:sessions:claude_code"
        );
        assert_store_refreshed(w, &store, &suffix);
        // The refresh is in the record: the expiry asked for it, the refresh token went out.
        let refreshes = run.records("login-refresh");
        assert_eq!(refreshes.len(), 1, "{refreshes:#?}");
        let r = refreshes[0];
        assert_eq!(
            (
                &r["outcome"],
                &r["trigger"],
                &r["refresh_token_sent"],
                &r["refreshes"]
            ),
            (
                &json!("refreshed"),
                &json!("expiry"),
                &json!(true),
                &json!(1)
            ),
            "{r:#}"
        );
        assert_eq!(r["refreshes_after_401"], 0, "{r:#}");
        drop(mock);

        // A bare `claude -p` on the host uses the refreshed store as it is (the world's
        // `~/.claude.json` is a planted secret, not Claude Code's JSON: a real one first).
        fs::write(
            w.home.join(".claude.json"),
            "{\"hasCompletedOnboarding\": true}",
        )
        .unwrap();
        chown_tree(&w.home.join(".claude.json"), w.owner);
        let bare_mock = refresh_mock(w, &tls, &suffix, json!([text("bare-ok")]));
        let claude = which("claude");
        let mut cmd = w.as_owner(&claude);
        w.clean_env(&mut cmd);
        cmd.args(["-p", "hello", "--output-format", "json"])
            .env("ANTHROPIC_BASE_URL", bare_mock.https_url())
            .env("NODE_EXTRA_CA_CERTS", &tls.ca)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("CLAUDE_CODE_MAX_RETRIES", "1");
        let out = cmd.output().unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("bare-ok"),
            "{}",
            describe(&out)
        );
        assert_credential(
            &bare_mock,
            "authorization",
            &format!("Bearer sk-ant-oat01-newAccess-{suffix}"),
        );
        assert!(bare_mock.token_requests().is_empty());
    }
);

// The API refuses a token that is not expired by the store's word (401): the supervisor takes
// the refresh lock — held, fresh, by another refresher (a bare `claude`), so it waits — then
// finds the token the other refresher wrote, spends no refresh token of its own, and sends the
// request again: the model never sees the 401.
both_claude!(
    a_refused_token_waits_for_the_lock_and_takes_what_the_other_refresher_wrote,
    |w: &World| {
        let suffix = suffix();
        let store = write_store(
            w,
            &format!("sk-ant-oat01-oldAccess-{suffix}"),
            &format!("sk-ant-ort01-oldRefresh-{suffix}"),
            now_ms() + 8 * 3600 * 1000,
        );
        let lock = w.home.join(".claude/.oauth_refresh.lock");
        fs::create_dir(&lock).unwrap();
        let tls = test_tls(w);
        let mock = refresh_mock(w, &tls, &suffix, json!([bash("echo ran"), text("fin")]));
        // The other refresher: once the first 401 went out, it keeps the lock two seconds
        // more, writes its refreshed login and lets go.
        let record = mock.record.clone();
        let store2 = store.clone();
        let owner = w.owner;
        let other = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !fs::read_to_string(&record)
                .unwrap_or_default()
                .contains("/v1/messages")
            {
                assert!(start.elapsed() < Duration::from_secs(60), "no request came");
                std::thread::sleep(Duration::from_millis(50));
            }
            std::thread::sleep(Duration::from_secs(2));
            let mut value = read_json(&store2);
            value["claudeAiOauth"]["accessToken"] =
                format!("sk-ant-oat01-newAccess-{}", suffix_of(&store2)).into();
            value["claudeAiOauth"]["refreshToken"] =
                format!("sk-ant-ort01-newRefresh-{}", suffix_of(&store2)).into();
            value["claudeAiOauth"]["expiresAt"] = (now_ms() + 8 * 3600 * 1000).into();
            let staged = store2.with_extension("staged");
            fs::write(&staged, value.to_string()).unwrap();
            fs::set_permissions(&staged, fs::Permissions::from_mode(0o600)).unwrap();
            std::os::unix::fs::lchown(&staged, Some(owner.0), Some(owner.1)).unwrap();
            fs::rename(&staged, &store2).unwrap();
            fs::remove_dir(store2.parent().unwrap().join(".oauth_refresh.lock")).unwrap();
        });
        let env = launch_env(&mock, &tls);
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let run = run_claude_as(
            w,
            &Launch {
                env: &env,
                ..Launch::default()
            },
            &model_profile(w),
            &[],
        );
        other.join().unwrap();
        assert!(run.status.success(), "{}", run.describe());
        assert!(!mock.expect_result(&call_id(None, 0)).is_error);
        assert!(
            mock.token_requests().is_empty(),
            "the supervisor spent a refresh token another refresher had already spent"
        );
        let messages = mock.messages_requests();
        assert_eq!(
            messages[0]["headers"]["authorization"],
            format!("Bearer sk-ant-oat01-oldAccess-{suffix}")
        );
        for r in &messages[1..] {
            assert_eq!(
                r["headers"]["authorization"],
                format!("Bearer sk-ant-oat01-newAccess-{suffix}")
            );
        }
        let retried: Vec<&Value> = run
            .records("gateway")
            .into_iter()
            .filter(|r| r["rule"].as_str().is_some_and(|r| r.contains("retried")))
            .collect();
        assert_eq!(retried.len(), 1, "{:#?}", run.records("gateway"));
        let refreshes = run.records("login-refresh");
        assert_eq!(refreshes.len(), 1, "{refreshes:#?}");
        assert_eq!(
            (
                &refreshes[0]["outcome"],
                &refreshes[0]["trigger"],
                &refreshes[0]["refresh_token_sent"]
            ),
            (&json!("took-stored"), &json!("401"), &json!(false)),
            "{refreshes:#?}"
        );
        assert!(
            retried[0]["duration_ms"].as_u64().unwrap() >= 2000,
            "the supervisor did not wait for the held lock: {:#}",
            retried[0]
        );
        assert_store_refreshed(w, &store, &suffix);
    }
);

fn suffix_of(store: &Path) -> String {
    read_json(store)["claudeAiOauth"]["accessToken"]
        .as_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .to_owned()
}

fn which(program: &str) -> std::path::PathBuf {
    for dir in ["/usr/local/bin", "/usr/bin", "/bin"] {
        let path = Path::new(dir).join(program);
        if path.exists() {
            return path;
        }
    }
    panic!("{program} not found");
}

// Two refreshers of one login at once (two runs): the refresh token is spent once, and both
// end with the token it bought.
both_claude!(two_runs_never_spend_one_refresh_token, |w: &World| {
    use stepproof::supervisor::net::login::{
        Credential, ModelLogin, RefreshEndpoint, client_config,
    };
    let suffix = suffix();
    write_store(
        w,
        &format!("sk-ant-oat01-oldAccess-{suffix}"),
        &format!("sk-ant-ort01-oldRefresh-{suffix}"),
        now_ms() - 1000,
    );
    let tls = test_tls(w);
    let mock = refresh_mock(w, &tls, &suffix, json!([]));
    let endpoint = RefreshEndpoint {
        url: format!("{}/v1/oauth/token", mock.https_url()),
        tls: client_config(std::slice::from_ref(&tls.ca)).unwrap(),
    };
    let claude_dir = w.home.join(".claude");
    let logins: Vec<ModelLogin> = (0..2)
        .map(|_| ModelLogin::claude_ai(&claude_dir, endpoint.clone()).unwrap())
        .collect();
    let got: Vec<Credential> = std::thread::scope(|s| {
        let handles: Vec<_> = logins
            .iter()
            .map(|l| s.spawn(move || l.credential().unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let fresh = Credential::Bearer(format!("sk-ant-oat01-newAccess-{suffix}"));
    assert_eq!(got, [fresh.clone(), fresh]);
    assert_eq!(mock.token_requests().len(), 1);
    assert_store_refreshed(w, &w.home.join(".claude/.credentials.json"), &suffix);
});

// No login at all: StepProof stops before Claude Code starts (its `/login` cannot work
// inside), with the one line that works, exit 120; never for `claude --version`, `--help` or
// `mcp`, nor for another command.
both_claude!(without_a_login_stepproof_says_how_to_log_in, |w: &World| {
    let tls = test_tls(w);
    let mock = Mock::start_tls(w, json!([text("fin")]), &tls);
    let url = mock.https_url();
    let ca = tls.ca.display().to_string();
    let env = [
        ("ANTHROPIC_BASE_URL", url.as_str()),
        ("NODE_EXTRA_CA_CERTS", &ca),
    ];
    let run = run_claude_as(
        w,
        &Launch {
            env: &env,
            ..Launch::default()
        },
        &model_profile(w),
        &[],
    );
    assert_eq!(run.status.code(), Some(120), "{}", run.describe());
    assert!(
        run.stderr.contains("no model login found") && run.stderr.contains("`stepproof login`"),
        "{}",
        run.describe()
    );
    let theirs = format!("{}{}", run.stdout, run.stderr);
    assert!(!theirs.contains("Not logged in"), "{}", run.describe());
    assert!(mock.messages_requests().is_empty());
    // What needs no login runs, without a word about logging in.
    for args in [
        &["claude", "--version"][..],
        &["claude", "--help"],
        &["claude", "mcp", "list"],
        &["/bin/true"],
    ] {
        let out = w
            .command(&["--profile", &model_profile(w)], args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("stepproof login"),
            "{args:?}: {}",
            describe(&out)
        );
    }
});

// `stepproof login` runs Claude Code's own login on the host, arguments passed on, its exit
// status kept; inside a StepProof sandbox (STEPPROOF set) it is refused.
#[test]
fn stepproof_login_runs_claude_auth_login_outside() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("claude");
    fs::write(
        &fake,
        "#!/bin/sh\nprintf '%s|' \"$@\" > \"$(dirname \"$0\")/args\"\nexit 7\n",
    )
    .unwrap();
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", dir.path().display());
    let out = std::process::Command::new(STEPPROOF)
        .args(["login", "--console", "--email", "a@b.c"])
        .env_clear()
        .env("PATH", &path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    assert_eq!(
        fs::read_to_string(dir.path().join("args")).unwrap(),
        "auth|login|--console|--email|a@b.c|"
    );
    fs::remove_file(dir.path().join("args")).unwrap();
    let out = std::process::Command::new(STEPPROOF)
        .arg("login")
        .env_clear()
        .env("PATH", &path)
        .env("STEPPROOF", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("outside any sandbox"),
        "{}",
        describe(&out)
    );
    assert!(!dir.path().join("args").exists());
}

// Where the model login is sent is the user's to say: a profile inside the workspace (it may
// have come with a checkout) that names the gateway's upstream is refused before anything
// runs; the same profile outside the workspace is taken.
both!(
    a_workspace_profile_cannot_choose_where_the_login_goes,
    |w: &World| {
        for (name, text) in [
            (
                "base-url.toml",
                "extends = \"default\"\n[process]\nset_env = { ANTHROPIC_BASE_URL = \"https://evil.example\" }\n",
            ),
            (
                "gateway.toml",
                "extends = \"default\"\n[network.gateway]\nupstream = \"evil.example\"\ncredential = \"claude-login\"\n",
            ),
        ] {
            let inside = w.workspace.join(name);
            fs::write(&inside, text).unwrap();
            chown_tree(&inside, w.owner);
            let out = w
                .command(&["--profile", inside.to_str().unwrap()], &["/bin/true"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(120), "{name}: {}", describe(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("inside the workspace") && stderr.contains("login"),
                "{name}: {stderr}"
            );
        }
        let outside = w.base.join("base-url.toml");
        fs::write(
        &outside,
        "extends = \"default\"\n[process]\nset_env = { ANTHROPIC_BASE_URL = \"https://gw.example\" }\n",
    )
    .unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o644)).unwrap();
        let out = w
            .command(
                &["--profile", outside.to_str().unwrap()],
                &["/bin/sh", "-c", "echo \"$ANTHROPIC_BASE_URL\""],
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        // Inside, the gateway's socket; the URL itself stays with the supervisor.
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "http://localhost"
        );
    }
);

// What the model login is used for beyond the model API is the user's to say: a profile inside
// the workspace that adds paths (`network.gateway.login_paths`), or pulls them in through
// `extends`, is refused before anything runs, naming the file and line that set them; the same
// profile outside the workspace is taken, and `explain` says which requests get the login.
both!(
    a_workspace_profile_cannot_add_paths_that_get_the_login,
    |w: &World| {
        let outside = w.base.join("usage.toml");
        fs::write(
            &outside,
            "extends = \"default\"\n\n[network.gateway]\nlogin_paths = [\"GET /api/oauth/usage\", \"POST /v1/files\"]\n",
        )
        .unwrap();
        fs::set_permissions(&outside, fs::Permissions::from_mode(0o644)).unwrap();
        let direct = w.workspace.join("paths.toml");
        fs::write(
            &direct,
            "extends = \"default\"\n[network.gateway]\nlogin_paths = [\"GET /api/oauth/usage\"]\n",
        )
        .unwrap();
        let pulled = w.workspace.join("pulled.toml");
        fs::write(&pulled, format!("extends = \"{}\"\n", outside.display())).unwrap();
        chown_tree(&direct, w.owner);
        chown_tree(&pulled, w.owner);
        for (inside, set_at) in [
            (&direct, format!("{}:3", direct.display())),
            (&pulled, format!("{}:4", outside.display())),
        ] {
            let out = w
                .command(&["--profile", inside.to_str().unwrap()], &["/bin/true"])
                .output()
                .unwrap();
            assert_eq!(out.status.code(), Some(120), "{}", describe(&out));
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&format!("{set_at}: network.gateway.login_paths"))
                    && stderr.contains("inside the workspace")
                    && stderr.contains(inside.to_str().unwrap()),
                "{stderr}"
            );
        }
        let out = w
            .command(&["--profile", outside.to_str().unwrap()], &["/bin/true"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        let explain = w
            .as_owner(Path::new(STEPPROOF))
            .args(["explain", "--profile", outside.to_str().unwrap()])
            .current_dir(&w.workspace)
            .env_clear()
            .env("HOME", &w.home)
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&explain.stdout);
        assert!(
            text.contains("the real login goes only with the model API's requests: POST /v1/messages, POST /v1/messages/count_tokens")
                && text.contains("(network.gateway.login_paths): GET /api/oauth/usage, POST /v1/files"),
            "{}",
            describe(&explain)
        );
    }
);

// The login's placeholder is for the gateway alone: sent through the proxy — here over plain
// HTTP to an allowed host, in a header — it is refused before anything is connected, and
// recorded as an exfiltration attempt naming the model login.
both!(
    the_login_placeholder_is_blocked_anywhere_but_the_gateway,
    |w: &World| {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // The origin answers every request 204 and counts them.
        let origin = std::thread::spawn(move || {
            let mut served = 0;
            listener.set_nonblocking(false).unwrap();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let mut head = [0u8; 4096];
                let n = stream.read(&mut head).unwrap_or(0);
                if n == 0 || head.starts_with(b"QUIT") {
                    break;
                }
                served += 1;
                let _ = stream.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
            }
            served
        });
        let profile = w.base.join("plain.toml");
        fs::write(
            &profile,
            format!(
                "extends = \"ci\"\n[network]\nallow = [\"127.0.0.2:{port}\"]\nallow_addresses = [\"127.0.0.2\"]\n"
            ),
        )
        .unwrap();
        fs::set_permissions(&profile, fs::Permissions::from_mode(0o644)).unwrap();
        let audit_dir = scratch(w, "plain-audit");
        chown_tree(&audit_dir, w.owner);
        let audit = audit_dir.join("audit.jsonl");
        let key = format!("sk-ant-api03-Real-{}", suffix());
        let script = format!(
            "curl -s -m 20 -o /dev/null -w '%{{http_code}}' -H \"x-api-key: $ANTHROPIC_API_KEY\" http://127.0.0.2:{port}/v1/messages; echo; \
             curl -s -m 20 -o /dev/null -w '%{{http_code}}' http://127.0.0.2:{port}/plain"
        );
        let out = w
            .command(
                &[
                    "--profile",
                    profile.to_str().unwrap(),
                    "--audit-log",
                    audit.to_str().unwrap(),
                ],
                &["/bin/sh", "-c", &script],
            )
            .env("ANTHROPIC_API_KEY", &key)
            .output()
            .unwrap();
        std::net::TcpStream::connect(("127.0.0.2", port))
            .and_then(|mut s| s.write_all(b"QUIT"))
            .unwrap();
        let served = origin.join().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let codes: Vec<&str> = stdout.lines().collect();
        // The placeholder's request is refused before anything is connected; the same request
        // without it goes through.
        assert_eq!(codes, ["403", "204"], "{}", describe(&out));
        assert_eq!(served, 1);
        let log = fs::read_to_string(&audit).unwrap();
        assert!(!log.contains(&key), "the real key is in the audit log");
        let attempts: Vec<Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["kind"] == "exfiltration-attempt")
            .collect();
        assert_eq!(attempts.len(), 1, "{log}");
        assert_eq!(
            attempts[0]["placeholder_blocked"], "model-login",
            "{:#}",
            attempts[0]
        );
        assert_eq!(attempts[0]["path"], "/v1/messages");
    }
);

/// A script for inside: the placeholder the run's claude.ai login gives (its credentials file,
/// or the variable) sent to the gateway's socket as a bearer token, one request per line of
/// `requests` (`METHOD TARGET [MODEL] [COUNT]`), each answer's status printed as
/// `status METHOD TARGET CODE` (COUNT > 1: `status METHOD TARGET CODE=N …`).
const GATEWAY_CLIENT: &str = r#"
import json, os, socket, sys
try:
    token = json.load(open('/run/claude-config/.credentials.json'))['claudeAiOauth']['accessToken']
except Exception:
    token = os.environ['CLAUDE_CODE_OAUTH_TOKEN']
sock_path = os.environ.get('ANTHROPIC_UNIX_SOCKET', '/run/stepproof-gateway/anthropic.sock')

def read_response(f):
    status = f.readline().split()
    code = int(status[1])
    length, close = 0, False
    while True:
        line = f.readline().strip()
        if not line:
            break
        name, _, value = line.decode().partition(':')
        if name.lower() == 'content-length':
            length = int(value)
        if name.lower() == 'connection' and value.strip().lower() == 'close':
            close = True
    body = f.read(length) if length else b''
    return code, body, close

conn = None
for line in open(sys.argv[1]).read().splitlines():
    parts = line.split()
    method, target = parts[0], parts[1]
    model = parts[2] if len(parts) > 2 else 'claude-mock'
    count = int(parts[3]) if len(parts) > 3 else 1
    codes = {}
    last = b''
    for _ in range(count):
        if conn is None:
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(sock_path)
            f = conn.makefile('rb')
        body = json.dumps({'model': model, 'max_tokens': 8, 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()
        conn.sendall((f'{method} {target} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n'
                      f'anthropic-version: 2023-06-01\r\nContent-Type: application/json\r\n'
                      f'Content-Length: {len(body)}\r\n\r\n').encode() + body)
        try:
            code, last, close = read_response(f)
        except Exception:
            code, close = 0, True
        codes[code] = codes.get(code, 0) + 1
        if close:
            conn.close()
            conn = None
    shown = ' '.join(f'{c}={n}' for c, n in sorted(codes.items())) if count > 1 else str(next(iter(codes)))
    print('status', method, target, shown, last[:300].decode(errors='replace').replace('\n', ' '))
print('client-done')
"#;

/// Puts the gateway client and its request list in the workspace, owned by the world's user.
fn gateway_client(w: &World, requests: &str) {
    for (name, text) in [("client.py", GATEWAY_CLIENT), ("requests.txt", requests)] {
        let path = w.workspace.join(name);
        fs::write(&path, text).unwrap();
        chown_tree(&path, w.owner);
    }
}

/// What a person would see if Claude Code had lost or refused the login.
const LOGIN_TROUBLE: &[&str] = &[
    "/login",
    "Not logged in",
    "Authentication required",
    "authentication_error",
    "Invalid API key",
    "session has expired",
    "OAuth token",
];

// Interactive start with a claude.ai login, the account's paths refused: Claude Code 2.1.328
// asks the gateway for nothing but the model API (found here, and checked below: every
// refusal in the gateway's records is the agent's own; its account endpoints are addressed to
// api.anthropic.com itself, not its base URL, and it does not call them with the placeholder
// login), so the session starts without a login error, answers, and the host's login is
// untouched. In the same session the agent's own attempts on the account through the gateway —
// minting an API key, reading the profile, a path spelt to be read as another upstream — are
// refused with 403, and nothing of them reaches the API.
both_claude!(
    an_interactive_session_starts_and_answers_with_the_account_paths_refused,
    |w: &World| {
        let suffix = suffix();
        let store = write_store(
            w,
            &format!("sk-ant-oat01-newAccess-{suffix}"),
            &format!("sk-ant-ort01-oldRefresh-{suffix}"),
            now_ms() + 8 * 3600 * 1000,
        );
        let before = fs::read(&store).unwrap();
        let mtime = fs::metadata(&store).unwrap().modified().unwrap();
        gateway_client(
            w,
            "POST /api/oauth/claude_cli/create_api_key\n\
             GET /api/oauth/profile\n\
             POST /v1/messages/../../api/oauth/claude_cli/create_api_key\n\
             POST //v1/messages\n",
        );
        let tls = test_tls(w);
        let mock = refresh_mock(
            w,
            &tls,
            &suffix,
            json!([
                bash("python3 client.py requests.txt"),
                text("Interactive-login-ok.")
            ]),
        );
        let env = launch_env(&mock, &tls);
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let dir = scratch(w, "tui");
        chown_tree(&dir, w.owner);
        let audit = dir.join("audit.jsonl");
        let profile = model_profile(w);
        let mut tui = tui::Tui::start_env(
            w,
            &[
                "--profile",
                &profile,
                "--audit-log",
                audit.to_str().unwrap(),
            ],
            &env,
            "Follow the script.",
        );
        tui.until(90, "the answer on screen", |t| {
            t.screen.contains("Interactive-login-ok.")
        });
        // A while longer: whatever Claude Code fetches after its first answer comes now.
        tui.pump(Duration::from_secs(5));
        let screen = tui.screen.clone();
        let status = tui.exit();
        assert!(status.success(), "{status:?}; terminal {:?}", tui.screen);
        for trouble in LOGIN_TROUBLE {
            assert!(
                !screen.contains(trouble),
                "{trouble:?} on the terminal: {screen:?}"
            );
        }
        // The agent's attempts on the account: refused by the gateway, said to the agent.
        let result = mock.expect_result(&call_id(None, 0)).text;
        assert!(result.contains("client-done"), "{result}");
        for (request, why) in [
            (
                "status POST /api/oauth/claude_cli/create_api_key 403",
                "is not a model API path",
            ),
            (
                "status GET /api/oauth/profile 403",
                "is not a model API path",
            ),
            (
                "status POST /v1/messages/../../api/oauth/claude_cli/create_api_key 403",
                "is not spelt plainly",
            ),
            ("status POST //v1/messages 403", "is not spelt plainly"),
        ] {
            let line = result
                .lines()
                .find(|l| l.starts_with(request))
                .unwrap_or_else(|| panic!("{request}: {result}"));
            assert!(line.contains(why), "{line}");
        }
        // Nothing but the model API reached the API, each with the real login.
        let requests = mock.requests();
        assert!(!requests.is_empty());
        for r in &requests {
            assert_eq!(r["method"], "POST", "{r:#}");
            assert!(
                r["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with("/v1/messages?")),
                "{:#}",
                r["path"]
            );
        }
        assert_credential(
            &mock,
            "authorization",
            &format!("Bearer sk-ant-oat01-newAccess-{suffix}"),
        );
        // The gateway's records: the model requests went out with the login; the only refusals
        // are the agent's four attempts (Claude Code itself asked for nothing else).
        let records: Vec<Value> = fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let gateway: Vec<&Value> = records.iter().filter(|r| r["kind"] == "gateway").collect();
        let (sent, refused): (Vec<&Value>, Vec<&Value>) = gateway
            .iter()
            .partition(|r| r["credential"] == "model-login");
        assert!(sent.len() >= 2, "{gateway:#?}");
        for r in &sent {
            assert_eq!(
                (&r["path"], &r["rule"]),
                (&json!("/v1/messages"), &json!("credential gateway")),
                "{r:#}"
            );
        }
        assert_eq!(refused.len(), 4, "{gateway:#?}");
        for r in &refused {
            assert!(
                r["rule"]
                    .as_str()
                    .is_some_and(|rule| rule.starts_with("credential gateway: refused")),
                "{r:#}"
            );
        }
        assert!(!records.iter().any(|r| r["kind"] == "login-refresh"));
        // The host's login is kept as it was.
        assert_eq!(fs::read(&store).unwrap(), before);
        assert_eq!(fs::metadata(&store).unwrap().modified().unwrap(), mtime);
    }
);

// The API refuses the token the host's store holds (401, a stale login): the first request
// refreshes it (the supervisor spends the refresh token once and writes the new login back),
// and the session goes on, streaming. Then the agent's tool call sends 200 requests the API
// refuses (401) through the gateway's socket with the placeholder: each is relayed as it is,
// none refreshes the login again (the token was just taken), each refusal is a `login-refresh`
// record charged to the budget of what the agent causes (a low one here: most are counted, not
// written), and the token endpoint is reached no more often than the rule allows.
both_claude!(
    a_flood_of_401s_does_not_decide_how_often_the_host_login_is_used,
    |w: &World| {
        let suffix = suffix();
        let store = write_store(
            w,
            &format!("sk-ant-oat01-oldAccess-{suffix}"),
            &format!("sk-ant-ort01-oldRefresh-{suffix}"),
            now_ms() + 8 * 3600 * 1000,
        );
        let before = fs::read(&store).unwrap();
        gateway_client(w, "POST /v1/messages?beta=true stale-401 200\n");
        let tls = test_tls(w);
        let mut script = refresh_script(
            &suffix,
            json!([bash("python3 client.py requests.txt"), text("fin")]),
        );
        // Whatever the token, the API refuses this model's requests: a 401 the agent decides.
        script["models"] = json!({"stale-401": {"status": 401, "type": "authentication_error"}});
        let mock = Mock::start_tls(w, script, &tls);
        let env = launch_env(&mock, &tls);
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let profile = model_profile(w);
        let text = fs::read_to_string(&profile).unwrap();
        fs::write(
            &profile,
            format!("{text}[audit]\ninside_max_per_second = 5\n"),
        )
        .unwrap();
        let run = run_claude_as(
            w,
            &Launch {
                env: &env,
                ..Launch::default()
            },
            &profile,
            &[],
        );
        assert!(run.status.success(), "{}", run.describe());
        assert!(run.stdout.contains("fin"), "{}", run.describe());
        let result = mock.expect_result(&call_id(None, 0));
        assert!(
            !result.is_error
                && result
                    .text
                    .contains("status POST /v1/messages?beta=true 401=200"),
            "{result:?}"
        );
        // The token endpoint: once (the stale token's first 401), within the rule's bound (the
        // budget after a 401, and one for a token near its expiry).
        let tokens = mock.token_requests();
        assert!(tokens.len() <= 3 + 1, "{tokens:#?}");
        assert_eq!(tokens.len(), 1, "{tokens:#?}");
        // The host's store changed once: the refresh's new login, and nothing after it.
        assert_ne!(fs::read(&store).unwrap(), before);
        assert_store_refreshed(w, &store, &suffix);
        // Claude Code's own requests went on with the new token, streaming.
        let messages = mock.messages_requests();
        let own: Vec<&Value> = messages
            .iter()
            .filter(|r| r["body"]["model"] != "stale-401")
            .collect();
        assert!(own.len() >= 3, "{}", own.len());
        assert!(own.iter().all(|r| r["body"]["stream"] == true));
        assert_eq!(
            own.last().unwrap()["headers"]["authorization"],
            format!("Bearer sk-ant-oat01-newAccess-{suffix}")
        );
        // The records: the one refresh (written whatever the budget: it spent the login), and
        // the 200 refusals, each written or counted.
        let refreshes = run.records("login-refresh");
        let refreshed: Vec<&&Value> = refreshes
            .iter()
            .filter(|r| r["outcome"] == "refreshed")
            .collect();
        assert_eq!(refreshed.len(), 1, "{refreshes:#?}");
        assert_eq!(refreshed[0]["trigger"], "401");
        assert_eq!(refreshed[0]["refresh_token_sent"], true);
        assert_eq!(refreshed[0]["refreshes"], 1);
        assert_eq!(refreshed[0]["refreshes_after_401"], 1);
        let refused: Vec<&&Value> = refreshes
            .iter()
            .filter(|r| r["outcome"] == "refused")
            .collect();
        assert!(!refused.is_empty(), "{refreshes:#?}");
        for r in &refused {
            assert_eq!(r["trigger"], "401");
            assert_eq!(r["refresh_token_sent"], false);
            assert!(
                r["rule"]
                    .as_str()
                    .is_some_and(|rule| rule.contains("relayed, not refreshed again")),
                "{r:#}"
            );
            assert!(r["refusals"].as_u64().unwrap() <= 200);
        }
        assert_eq!(
            refreshes.len(),
            refreshed.len() + refused.len(),
            "{refreshes:#?}"
        );
        let summary = run.records("inside-records-over-cap");
        let dropped = summary.last().map_or(0, |s| {
            s["not_written_by_kind"]["login-refresh"]
                .as_u64()
                .unwrap_or(0)
        });
        assert!(dropped > 0, "the budget kept nothing out: {summary:#?}");
        assert_eq!(refused.len() as u64 + dropped, 200, "{summary:#?}");
        // Neither a token nor the refresh token in the log.
        let log = fs::read_to_string(&run.audit_path).unwrap();
        assert!(
            !log.contains(&format!("-{suffix}")),
            "a token in the audit log"
        );
    }
);
