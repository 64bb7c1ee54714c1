//! Tests of the model login: finding the user's login, the placeholder, refreshing and spending the host login by the rule.

use super::*;
use std::fs;

#[test]
fn only_this_runs_placeholder_is_admitted() {
    let login = ModelLogin::fixed(Credential::ApiKey("sk-real".into()));
    let key = login.placeholder().api_key().unwrap().to_owned();
    assert!(is_placeholder(&key) && key.starts_with("sk-ant-api03-"));
    let none: [&[u8]; 0] = [];
    assert!(login.admits([key.as_bytes()], none).is_ok());
    assert!(login.admits([b"sk-real".as_slice()], none).is_err());
    assert!(login.admits(none, none).is_err());
    // A placeholder of another run, or a bearer beside the key: refused.
    let other = ModelLogin::fixed(Credential::ApiKey("sk-real".into()));
    assert!(
        login
            .admits([other.placeholder().api_key().unwrap().as_bytes()], none)
            .is_err()
    );
    assert!(
        login
            .admits([key.as_bytes()], [b"Bearer sk-ant-oat01-x".as_slice()])
            .is_err()
    );
    let bearer = ModelLogin::fixed(Credential::Bearer("tok".into()));
    let (name, token) = bearer.placeholder().env.clone().unwrap();
    assert_eq!(name, "ANTHROPIC_AUTH_TOKEN");
    let header = format!("bearer  {token}");
    assert!(bearer.admits(none, [header.as_bytes()]).is_ok());
    assert!(bearer.admits(none, [b"Bearer tok".as_slice()]).is_err());
}

#[test]
fn a_claude_ai_placeholder_keeps_the_features_not_the_tokens() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join(STORE_FILE),
        serde_json::json!({"claudeAiOauth": {
            "accessToken": "sk-ant-oat01-REAL", "refreshToken": "sk-ant-ort01-REAL",
            "expiresAt": 1u64, "scopes": ["user:inference", "user:profile"],
            "subscriptionType": "max", "rateLimitTier": "default_claude_max_20x",
            "somethingElse": "sk-ant-secretish"
        }})
        .to_string(),
    )
    .unwrap();
    let endpoint = RefreshEndpoint {
        url: TOKEN_URL.into(),
        tls: client_config(&[]).unwrap(),
    };
    let login = ModelLogin::claude_ai(dir.path(), endpoint).unwrap();
    let file = login.placeholder().credentials.clone().unwrap();
    let text = file.to_string();
    assert!(
        !text.contains("REAL") && !text.contains("secretish"),
        "{text}"
    );
    let inner = &file["claudeAiOauth"];
    assert_eq!(inner["expiresAt"], PLACEHOLDER_EXPIRES_AT_MS);
    assert_eq!(inner["subscriptionType"], "max");
    assert_eq!(inner["scopes"][1], "user:profile");
    assert!(is_placeholder(inner["accessToken"].as_str().unwrap()));
    assert!(is_placeholder(inner["refreshToken"].as_str().unwrap()));
    let auth = format!("Bearer {}", inner["accessToken"].as_str().unwrap());
    let none: [&[u8]; 0] = [];
    assert!(login.admits(none, [auth.as_bytes()]).is_ok());
    // No store: no login, and what to do.
    let empty = tempfile::tempdir().unwrap();
    let none_login = ModelLogin::claude_ai(
        empty.path(),
        RefreshEndpoint {
            url: TOKEN_URL.into(),
            tls: client_config(&[]).unwrap(),
        },
    )
    .unwrap();
    assert!(none_login.is_none());
    let why = none_login.credential().unwrap_err().to_string();
    assert!(why.contains("stepproof login"), "{why}");
}

#[test]
fn a_401_spends_the_host_login_only_by_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let store_path = dir.path().join(STORE_FILE);
    let store = |access: &str| {
        serde_json::json!({"claudeAiOauth": {
            "accessToken": access, "refreshToken": "sk-ant-ort01-R",
            "expiresAt": now_ms() + 8 * 3600 * 1000, "scopes": ["user:inference"],
        }})
        .to_string()
    };
    fs::write(&store_path, store("sk-ant-oat01-A")).unwrap();
    // Nothing listens there: a refresh that is attempted fails at once.
    let endpoint = RefreshEndpoint {
        url: "https://127.0.0.1:9/v1/oauth/token".into(),
        tls: client_config(&[]).unwrap(),
    };
    let login = ModelLogin::claude_ai(dir.path(), endpoint).unwrap();
    let records = Arc::new(Mutex::new(Vec::<RefreshRecord>::new()));
    let sink = records.clone();
    login.record_refreshes(move |r| sink.lock().unwrap().push(r.clone()));
    let a = Credential::Bearer("sk-ant-oat01-A".into());
    let b = Credential::Bearer("sk-ant-oat01-B".into());
    assert_eq!(login.credential().unwrap(), a);
    // Another refresher wrote B: taken at once, no refresh token spent.
    fs::write(&store_path, store("sk-ant-oat01-B")).unwrap();
    assert_eq!(login.after_401(&a).unwrap(), Ok(b.clone()));
    {
        let records = records.lock().unwrap();
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].outcome, RefreshOutcome::TookStored);
        assert_eq!(records[0].trigger, RefreshTrigger::Unauthorized);
        assert!(!records[0].refresh_token_sent);
        assert_eq!(records[0].refreshes_after_401, 0);
    }
    // A 401 to the token just taken is relayed, however often: the store is not touched,
    // and each refusal is a record that counts the refusals so far.
    let before = fs::read(&store_path).unwrap();
    for _ in 0..200 {
        let why = login.after_401(&b).unwrap().unwrap_err();
        assert!(why.contains("relayed, not refreshed again"), "{why}");
    }
    assert_eq!(fs::read(&store_path).unwrap(), before);
    {
        let records = records.lock().unwrap();
        assert_eq!(records.len(), 201);
        let last = &records[200];
        assert_eq!(
            (
                last.outcome,
                last.refusals,
                last.refreshes,
                last.refresh_token_sent
            ),
            (RefreshOutcome::Refused, 200, 0, false)
        );
        let json = serde_json::to_value(last).unwrap();
        assert_eq!(json["outcome"], "refused");
        assert_eq!(json["trigger"], "401");
        assert!(json.get("error").is_none(), "{json}");
        assert!(!json.to_string().contains("sk-ant"), "{json}");
    }
    // Past the interval, the run's budget holds.
    {
        let mut current = login.current.lock().unwrap();
        current.taken_at = None;
        current.refreshes_after_401 = REFRESHES_AFTER_401_MAX;
    }
    let why = login.after_401(&b).unwrap().unwrap_err();
    assert!(why.contains("its budget"), "{why}");
    // Within it, an attempt counts whether or not it brings a token.
    login.current.lock().unwrap().refreshes_after_401 = 0;
    assert!(matches!(login.after_401(&b), Err(LoginError::Refresh(_))));
    {
        let records = records.lock().unwrap();
        let failed = records.last().unwrap();
        assert_eq!(failed.outcome, RefreshOutcome::Failed);
        assert!(failed.refresh_token_sent && failed.error.is_some());
        assert_eq!(
            (failed.refreshes_after_401, failed.failed_refreshes),
            (1, 1)
        );
    }
    // A failed attempt is not repeated within a minute, whatever asks: a 401 ...
    let why = login.after_401(&b).unwrap().unwrap_err();
    assert!(why.contains("not tried again"), "{why}");
    // ... or a token near its expiry (refreshed whatever the budget, but not the backoff).
    let expiring = serde_json::json!({"claudeAiOauth": {
        "accessToken": "sk-ant-oat01-B", "refreshToken": "sk-ant-ort01-R",
        "expiresAt": now_ms(), "scopes": ["user:inference"],
    }});
    fs::write(&store_path, expiring.to_string()).unwrap();
    let before = fs::read(&store_path).unwrap();
    login.current.lock().unwrap().expires_at = Some(now_ms());
    let e = login.credential().unwrap_err().to_string();
    assert!(e.contains("not tried again"), "{e}");
    let why = login.after_401(&b).unwrap().unwrap_err();
    assert!(why.contains("not tried again"), "{why}");
    // Once the backoff is over, a token near its expiry is tried again (and fails here).
    login.current.lock().unwrap().failed_at = None;
    assert!(matches!(login.after_401(&b), Err(LoginError::Refresh(_))));
    assert_eq!(fs::read(&store_path).unwrap(), before);
    let records = records.lock().unwrap();
    let sent = records.iter().filter(|r| r.refresh_token_sent).count();
    assert_eq!(sent, 2, "{records:#?}");
    assert_eq!(records.last().unwrap().refreshes_after_401, 1);
}

#[test]
fn a_fresh_lock_is_waited_for_and_a_stale_one_broken() {
    let dir = tempfile::tempdir().unwrap();
    let claude = dir.path().join(".claude");
    fs::create_dir(&claude).unwrap();
    // Stale: an mtime 2 minutes old is broken at once.
    let lock = claude.join(LOCK_DIR);
    fs::create_dir(&lock).unwrap();
    File::open(&lock)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(120))
        .unwrap();
    let start = std::time::Instant::now();
    let held = RefreshLock::acquire(&claude).unwrap();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(lock.is_dir() && dir.path().join(".claude.lock").is_dir());
    // Held: a second taker waits until it is released.
    let claude2 = claude.clone();
    let waiter = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        let _second = RefreshLock::acquire(&claude2).unwrap();
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(1500));
    drop(held);
    let waited = waiter.join().unwrap();
    assert!(waited >= Duration::from_millis(1400), "{waited:?}");
    assert!(!lock.exists() && !dir.path().join(".claude.lock").exists());
}
