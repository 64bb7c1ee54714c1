//! The model login, on the supervisor's side. It finds the user's login (an API key, a
//! long-lived OAuth token, or the claude.ai login in `~/.claude/.credentials.json`), makes the
//! placeholder the sandbox gets instead (random per run, worthless anywhere), and answers "the
//! header to add now" for the credential gateway (and, later, the proxy's terminated
//! `api.anthropic.com`). An expired claude.ai token is refreshed here, under the same locks
//! Claude Code takes for its own refresh, and the refreshed login is written back to the host's
//! store, so a bare `claude` keeps working and no two refreshers spend one refresh token. How
//! often that happens is not the agent's to decide ([`ModelLogin::after_401`]), and every
//! refresh and every refusal to refresh is handed to a recorder ([`RefreshRecord`], the audit
//! log's `login-refresh`).

use crate::http::scan::EchoNeedles;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod https;
mod lock;
mod refresh;
mod store;

pub use https::{client_config, https_request, prepare_client_config, settle_client_configs};
pub use lock::RefreshLock;

use store::{key_rejected, oauth_of, read_store};

/// The caller's `NODE_EXTRA_CA_CERTS`: the CA file Claude Code on this host would trust
/// beside the public roots (a corporate gateway's, a test CA), so StepProof trusts it too.
pub const EXTRA_CA_ENV: &str = "NODE_EXTRA_CA_CERTS";
/// Claude Code's credentials file, in its config directory (`~/.claude`).
pub const STORE_FILE: &str = ".credentials.json";
/// Claude Code's OAuth token endpoint and client (2.1.328).
pub const TOKEN_URL: &str = "https://platform.claude.com/v1/oauth/token";
pub const CLIENT_ID: &str = "9d1c250a-e61b-44d9-88ed-5944d1962f5e";
/// Another token endpoint, read from `stepproof-run`'s own environment only (tests; never from
/// a profile, which may come with a checkout: the refresh token is sent there).
pub const TOKEN_URL_ENV: &str = "STEPPROOF_OAUTH_TOKEN_URL";
/// Claude Code's refresh lock in its config directory (proper-lockfile: a directory, stale
/// after 60 s by its mtime, which the holder touches every 5 s).
pub const LOCK_DIR: &str = ".oauth_refresh.lock";
const LOCK_STALE: Duration = Duration::from_secs(60);
const LOCK_TOUCH: Duration = Duration::from_secs(5);
/// How long to wait for another refresher: beyond the stale time, so a dead holder's lock is
/// broken rather than waited out forever.
const LOCK_WAIT: Duration = Duration::from_secs(75);
/// A token this close to its expiry is refreshed before use (Claude Code uses 5 minutes).
const REFRESH_MARGIN_MS: u64 = 5 * 60 * 1000;
/// A 401 to a token this run took less than this long ago is relayed, not refreshed again: the
/// agent decides how many requests the API refuses, not how often the host's login is spent.
pub const REFRESH_AFTER_401_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// Refreshes a 401 may cause in one run (a token near its expiry is refreshed regardless);
/// an attempt counts whether or not it brought a token.
pub const REFRESHES_AFTER_401_MAX: u32 = 3;
/// After an attempt failed (the refresh token was sent and no login came back), no other is
/// made for this long, whatever asks: a login that has ended, or an endpoint that is down, is
/// not tried once per request.
pub const REFRESH_RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);
/// The placeholder login's expiry: far ahead, so the Claude Code inside never refreshes.
pub const PLACEHOLDER_EXPIRES_AT_MS: u64 = 4_102_444_800_000; // 2100-01-01
const STORE_MAX_BYTES: u64 = 64 * 1024;
const RESPONSE_MAX_BYTES: usize = 256 * 1024;
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// Keys of `claudeAiOauth` the placeholder login carries over (what features depend on), never
/// the tokens.
const CARRIED_KEYS: &[&str] = &[
    "scopes",
    "subscriptionType",
    "rateLimitTier",
    "subscriptionTypeSource",
    "subscriptionTypeVerifiedAt",
];
/// The scopes a refresh asks for when the store names none (Claude Code's claude.ai login).
const DEFAULT_SCOPES: &[&str] = &[
    "user:profile",
    "user:inference",
    "user:sessions:claude_code",
    "user:mcp_servers",
];

/// The credential the gateway sends upstream.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// Sent as `x-api-key`.
    ApiKey(String),
    /// Sent as `Authorization: Bearer …` (an OAuth token, or `ANTHROPIC_AUTH_TOKEN`).
    Bearer(String),
}

impl fmt::Debug for Credential {
    // Never print the secret, not even in a debug log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credential::ApiKey(_) => f.write_str("ApiKey(<redacted>)"),
            Credential::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

impl Credential {
    /// The header line to add; `None` if the secret holds control characters (a line break
    /// would let it write headers of its own) or is empty.
    pub fn header_line(&self) -> Option<Vec<u8>> {
        let (name, value) = match self {
            Credential::ApiKey(key) => ("x-api-key: ", key),
            Credential::Bearer(token) => ("Authorization: Bearer ", token),
        };
        if value.is_empty() || value.bytes().any(|b| b.is_ascii_control()) {
            return None;
        }
        Some(format!("{name}{value}\r\n").into_bytes())
    }

    /// The spellings of the secret an answer could hand back (searched for in what the gateway
    /// relays, never shown): the key or token itself covers the header value it is sent in.
    pub fn echo_needles(&self) -> EchoNeedles {
        let (Credential::ApiKey(secret) | Credential::Bearer(secret)) = self;
        EchoNeedles::of_secret(secret, None)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    #[error(
        "no model login: StepProof found no claude.ai login ({store}), no ANTHROPIC_API_KEY and no CLAUDE_CODE_OAUTH_TOKEN; run `stepproof login` on this machine (outside the sandbox)"
    )]
    NotLoggedIn { store: String },
    #[error("reading the model login {path}: {why}")]
    Store { path: PathBuf, why: String },
    #[error("refreshing the claude.ai login: {0} (run `stepproof login` if the login has ended)")]
    Refresh(String),
    #[error(
        "waiting for the refresh lock {path}: another program (a `claude` or another run) holds it and keeps it fresh"
    )]
    LockBusy { path: PathBuf },
    #[error("taking the refresh lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
    #[error("writing the refreshed login to {path}: {source}")]
    WriteBack { path: PathBuf, source: io::Error },
}

/// What the sandbox gets instead of the login.
#[derive(Clone, Default, PartialEq)]
pub struct Placeholder {
    /// A variable to set inside (`ANTHROPIC_API_KEY`, `CLAUDE_CODE_OAUTH_TOKEN`,
    /// `ANTHROPIC_AUTH_TOKEN`) and its placeholder value.
    pub env: Option<(String, String)>,
    /// A `.credentials.json` for the run's config directory (claude.ai logins).
    pub credentials: Option<serde_json::Value>,
    /// What the inside sends: `x-api-key` values and bearer tokens this run accepts.
    api_key: Option<String>,
    bearer: Option<String>,
}

impl fmt::Debug for Placeholder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Placeholder")
            .field("env", &self.env.as_ref().map(|(n, _)| n))
            .field("credentials", &self.credentials.is_some())
            .finish()
    }
}

impl Placeholder {
    /// The placeholder API key (approved in the seeded `.claude.json`).
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// Every placeholder value the inside holds (the variable, the key or token it sends, the
    /// seeded credentials file's tokens): only the gateway accepts them, the proxy blocks them.
    pub fn values(&self) -> Vec<String> {
        let mut values: Vec<String> = [&self.api_key, &self.bearer]
            .into_iter()
            .flatten()
            .cloned()
            .chain(self.env.iter().map(|(_, v)| v.clone()))
            .collect();
        if let Some(oauth) = self.credentials.as_ref().map(|c| &c["claudeAiOauth"]) {
            for key in ["accessToken", "refreshToken"] {
                if let Some(token) = oauth[key].as_str() {
                    values.push(token.to_owned());
                }
            }
        }
        values.retain(|v| !v.is_empty());
        values.sort();
        values.dedup();
        values
    }

    /// The header a request from inside carries (tests, and the audit's wording).
    pub fn header_line(&self) -> Option<Vec<u8>> {
        match (&self.api_key, &self.bearer) {
            (Some(key), _) => Credential::ApiKey(key.clone()).header_line(),
            (None, Some(token)) => Credential::Bearer(token.clone()).header_line(),
            (None, None) => None,
        }
    }
}

/// Where the login came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// None found.
    None,
    /// A fixed credential (a profile's `[network.gateway] credential = "env:NAME"`).
    Fixed,
    /// A variable of the caller's or the profile's environment, kept outside.
    Env(String),
    /// The claude.ai login in Claude Code's store, refreshed here when it expires.
    ClaudeAi { claude_dir: PathBuf },
}

/// Where a refresh goes and whom it trusts.
#[derive(Clone)]
pub struct RefreshEndpoint {
    pub url: String,
    pub tls: Arc<rustls::ClientConfig>,
}

struct Current {
    credential: Option<Credential>,
    /// claude.ai logins: when the access token expires (ms since the epoch).
    expires_at: Option<u64>,
    /// When this run last took a new token (refreshed, or found in the store).
    taken_at: Option<std::time::Instant>,
    /// Refresh attempts a 401 caused in this run (near expiry excluded).
    refreshes_after_401: u32,
    /// Refreshes that wrote a new login back, in this run.
    refreshes: u32,
    /// Attempts that sent the refresh token and brought no login back, in this run.
    failed_refreshes: u32,
    /// Refusals to refresh, in this run.
    refusals: u64,
    /// When an attempt last failed (see [`REFRESH_RETRY_AFTER_FAILURE`]).
    failed_at: Option<std::time::Instant>,
}

/// What asked for a new token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum RefreshTrigger {
    /// The credential was asked for and the token is within 5 minutes of its expiry (or the
    /// store held none).
    #[serde(rename = "expiry")]
    Expiry,
    /// The API refused the token (401).
    #[serde(rename = "401")]
    Unauthorized,
}

/// What became of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefreshOutcome {
    /// The refresh token was spent and the new login written back to the host's store.
    Refreshed,
    /// The store held a fresh token another refresher wrote: taken, nothing spent.
    TookStored,
    /// Not refreshed: the rule said no (`rule` says which part).
    Refused,
    /// Tried and failed (`error`): the lock, the store, the token endpoint or the write-back.
    Failed,
}

/// One refresh of the host's login, or one refusal to refresh it: the body of the audit
/// record `login-refresh` (never a token). The counts are this run's so far, this one
/// included.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RefreshRecord {
    pub outcome: RefreshOutcome,
    pub trigger: RefreshTrigger,
    /// Why it was done or refused, in words.
    pub rule: String,
    /// What failed (`failed` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the host's refresh token was sent to the token endpoint for it (`refreshed`,
    /// and a `failed` attempt that got as far): each such record is a use of the login.
    pub refresh_token_sent: bool,
    /// Refreshes that wrote a new login back.
    pub refreshes: u32,
    /// Attempts that sent the refresh token and brought no login back.
    pub failed_refreshes: u32,
    /// Attempts a 401 caused (near expiry excluded): the budget's count.
    pub refreshes_after_401: u32,
    /// The budget ([`REFRESHES_AFTER_401_MAX`]).
    pub refreshes_after_401_max: u32,
    /// Refusals to refresh.
    pub refusals: u64,
}

/// Where [`RefreshRecord`]s go (the audit log; see [`ModelLogin::record_refreshes`]).
type Recorder = Box<dyn Fn(&RefreshRecord) + Send + Sync>;

/// How a refresh under the lock ended, when it did not fail.
enum Attempt {
    Refreshed,
    TookStored,
    Refused(String),
}

/// The user's model login: the header to add now, refreshed when it expires.
pub struct ModelLogin {
    source: Source,
    placeholder: Placeholder,
    current: Mutex<Current>,
    refresh: Option<RefreshEndpoint>,
    recorder: std::sync::OnceLock<Recorder>,
}

impl fmt::Debug for ModelLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelLogin")
            .field("source", &self.source)
            .field("placeholder", &self.placeholder)
            .finish_non_exhaustive()
    }
}

pub use crate::sandbox::plan::env::LOGIN_VARIABLES;

/// What [`ModelLogin::discover`] looks at.
pub struct Sources<'a> {
    /// Login variables kept outside (the command's environment first, then the caller's).
    pub env: &'a [(String, String)],
    /// Claude Code's config directory on the host (`~/.claude`, or the caller's
    /// `CLAUDE_CONFIG_DIR`).
    pub claude_dir: PathBuf,
    /// The user's `~/.claude.json`: an API key rejected there is not used.
    pub user_config: PathBuf,
    pub refresh: RefreshEndpoint,
}

impl ModelLogin {
    /// No login: every request is refused with what to do.
    pub fn none() -> ModelLogin {
        ModelLogin::with(Source::None, Placeholder::default(), None, None, None)
    }

    /// A fixed credential, never refreshed.
    pub fn fixed(credential: Credential) -> ModelLogin {
        let placeholder = match &credential {
            Credential::ApiKey(_) => placeholder_for_env("ANTHROPIC_API_KEY"),
            Credential::Bearer(_) => placeholder_for_env("ANTHROPIC_AUTH_TOKEN"),
        };
        ModelLogin::with(Source::Fixed, placeholder, Some(credential), None, None)
    }

    fn with(
        source: Source,
        placeholder: Placeholder,
        credential: Option<Credential>,
        expires_at: Option<u64>,
        refresh: Option<RefreshEndpoint>,
    ) -> ModelLogin {
        ModelLogin {
            source,
            placeholder,
            current: Mutex::new(Current {
                credential,
                expires_at,
                taken_at: None,
                refreshes_after_401: 0,
                refreshes: 0,
                failed_refreshes: 0,
                refusals: 0,
                failed_at: None,
            }),
            refresh,
            recorder: std::sync::OnceLock::new(),
        }
    }

    /// From now on every refresh, and every refusal to refresh, is handed to `record` (the
    /// first call sets it; later ones change nothing). Called with the login's state locked:
    /// `record` must not use the login.
    pub fn record_refreshes(&self, record: impl Fn(&RefreshRecord) + Send + Sync + 'static) {
        let _ = self.recorder.set(Box::new(record));
    }

    fn emit(
        &self,
        current: &Current,
        outcome: RefreshOutcome,
        trigger: RefreshTrigger,
        rule: String,
        error: Option<String>,
        refresh_token_sent: bool,
    ) {
        let record = RefreshRecord {
            outcome,
            trigger,
            rule,
            error,
            refresh_token_sent,
            refreshes: current.refreshes,
            failed_refreshes: current.failed_refreshes,
            refreshes_after_401: current.refreshes_after_401,
            refreshes_after_401_max: REFRESHES_AFTER_401_MAX,
            refusals: current.refusals,
        };
        tracing::info!(?record, "model login");
        if let Some(recorder) = self.recorder.get() {
            recorder(&record);
        }
    }

    /// The login Claude Code on this host would use, in its order: `ANTHROPIC_AUTH_TOKEN`,
    /// `ANTHROPIC_API_KEY` (unless the user rejected that key in `~/.claude.json`),
    /// `CLAUDE_CODE_OAUTH_TOKEN`, then the claude.ai login in the store. `Source::None` when
    /// there is none; an error when the store exists but cannot be used.
    pub fn discover(sources: &Sources<'_>) -> Result<ModelLogin, LoginError> {
        for name in LOGIN_VARIABLES {
            let Some((_, value)) = sources
                .env
                .iter()
                .find(|(n, v)| n == name && !v.trim().is_empty())
            else {
                continue;
            };
            if *name == "ANTHROPIC_API_KEY" && key_rejected(&sources.user_config, value) {
                continue;
            }
            let credential = if *name == "ANTHROPIC_API_KEY" {
                Credential::ApiKey(value.trim().to_owned())
            } else {
                Credential::Bearer(value.trim().to_owned())
            };
            return Ok(ModelLogin::with(
                Source::Env((*name).to_owned()),
                placeholder_for_env(name),
                Some(credential),
                None,
                None,
            ));
        }
        ModelLogin::claude_ai(&sources.claude_dir, sources.refresh.clone())
    }

    /// The claude.ai login in `claude_dir`'s store; `Source::None` when there is no store.
    pub fn claude_ai(
        claude_dir: &Path,
        refresh: RefreshEndpoint,
    ) -> Result<ModelLogin, LoginError> {
        let store_path = claude_dir.join(STORE_FILE);
        let store = match read_store(&store_path)? {
            Some(store) => store,
            None => return Ok(ModelLogin::none()),
        };
        let oauth = oauth_of(&store, &store_path)?;
        if oauth.access.is_empty() && oauth.refresh.is_none() {
            // Claude Code clears both when a login has ended.
            return Ok(ModelLogin::none());
        }
        let mut carried = serde_json::Map::new();
        if let Some(login) = store["claudeAiOauth"].as_object() {
            for key in CARRIED_KEYS {
                if let Some(value) = login.get(*key) {
                    carried.insert((*key).to_owned(), value.clone());
                }
            }
        }
        let access = format!("sk-ant-oat01-{}", placeholder_token());
        carried.insert("accessToken".into(), access.clone().into());
        carried.insert(
            "refreshToken".into(),
            format!("sk-ant-ort01-{}", placeholder_token()).into(),
        );
        carried.insert("expiresAt".into(), PLACEHOLDER_EXPIRES_AT_MS.into());
        // Over `ANTHROPIC_UNIX_SOCKET` Claude Code takes an OAuth login only from
        // `CLAUDE_CODE_OAUTH_TOKEN` (its own relays hand the remote side a placeholder there);
        // the file keeps the scopes and subscription its features look at.
        let placeholder = Placeholder {
            env: Some(("CLAUDE_CODE_OAUTH_TOKEN".to_owned(), access.clone())),
            credentials: Some(serde_json::json!({ "claudeAiOauth": carried })),
            api_key: None,
            bearer: Some(access),
        };
        Ok(ModelLogin::with(
            Source::ClaudeAi {
                claude_dir: claude_dir.to_path_buf(),
            },
            placeholder,
            (!oauth.access.is_empty()).then_some(Credential::Bearer(oauth.access)),
            Some(oauth.expires_at),
            Some(refresh),
        ))
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    pub fn is_none(&self) -> bool {
        self.source == Source::None
    }

    pub fn placeholder(&self) -> &Placeholder {
        &self.placeholder
    }

    /// In words, for the audit log and messages (never a value).
    pub fn describe(&self) -> String {
        match &self.source {
            Source::None => "none".into(),
            Source::Fixed => "the profile's gateway credential".into(),
            Source::Env(name) => format!("{name} (kept outside)"),
            Source::ClaudeAi { claude_dir } => format!(
                "the claude.ai login in {}",
                claude_dir.join(STORE_FILE).display()
            ),
        }
    }

    /// Whether a request from inside may be forwarded: it carries this run's placeholder (as
    /// `x-api-key` or a bearer token), and no credential header that is not one.
    pub fn admits<'a>(
        &self,
        api_keys: impl IntoIterator<Item = &'a [u8]>,
        authorizations: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<(), String> {
        let mut matched = false;
        for key in api_keys {
            match &self.placeholder.api_key {
                Some(ph) if key.trim_ascii() == ph.as_bytes() => matched = true,
                _ => return Err("an x-api-key that is not this run's placeholder".into()),
            }
        }
        for value in authorizations {
            let value = value.trim_ascii();
            let token = value
                .get(..7)
                .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
                .map(|_| value[7..].trim_ascii());
            match (&self.placeholder.bearer, token) {
                (Some(ph), Some(token)) if token == ph.as_bytes() => matched = true,
                _ => {
                    return Err("an Authorization header that is not this run's placeholder".into());
                }
            }
        }
        if matched {
            Ok(())
        } else {
            Err(
                "no credential (neither this run's placeholder key nor its placeholder token)"
                    .into(),
            )
        }
    }

    /// The credential to add now: a claude.ai token about to expire is refreshed first (not
    /// within [`REFRESH_RETRY_AFTER_FAILURE`] of a failed attempt: then the error says so).
    pub fn credential(&self) -> Result<Credential, LoginError> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let due = match current.expires_at {
            Some(at) => now_ms() + REFRESH_MARGIN_MS >= at || current.credential.is_none(),
            None => false,
        };
        if due {
            let why = if current.credential.is_none() {
                "the store holds no access token"
            } else {
                "the token expires within 5 minutes"
            };
            if let Attempt::Refused(why) = self.refresh_locked(
                &mut current,
                None,
                RefreshTrigger::Expiry,
                why.into(),
                false,
            )? {
                return Err(LoginError::Refresh(why));
            }
        }
        current
            .credential
            .clone()
            .ok_or_else(|| self.not_logged_in())
    }

    /// After the API refused `used` (401): a claude.ai login is refreshed (unless another
    /// refresher already replaced the token) and the new credential returned; `None` when
    /// nothing better is to be had, or the rule says no (see [`ModelLogin::after_401`]).
    pub fn rejected(&self, used: &Credential) -> Result<Option<Credential>, LoginError> {
        self.after_401(used).map(Result::ok)
    }
}

/// A placeholder for a login held in a variable.
fn placeholder_for_env(name: &str) -> Placeholder {
    if name == "ANTHROPIC_API_KEY" {
        let key = format!("sk-ant-api03-{}", placeholder_token());
        Placeholder {
            env: Some((name.to_owned(), key.clone())),
            credentials: None,
            api_key: Some(key),
            bearer: None,
        }
    } else {
        let token = format!("sk-ant-oat01-{}", placeholder_token());
        Placeholder {
            env: Some((name.to_owned(), token.clone())),
            credentials: None,
            api_key: None,
            bearer: Some(token),
        }
    }
}

/// `STEPPROOF-PLACEHOLDER-` and 32 random hex digits: unmistakable in a log, and worthless.
fn placeholder_token() -> String {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .unwrap_or_else(|_| {
            // Never reached on Linux; a clock-derived value is still unique per run.
            let t = now_ms().to_le_bytes();
            bytes[..8].copy_from_slice(&t);
            bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        });
    format!("STEPPROOF-PLACEHOLDER-{}", hex::encode(bytes))
}

/// True when this placeholder text is one of StepProof's (it never is a real credential).
pub fn is_placeholder(value: &str) -> bool {
    value.contains("STEPPROOF-PLACEHOLDER-")
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
