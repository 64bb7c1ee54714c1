//! Refreshing an expired claude.ai login: how often the agent's 401s may cause one (the rule
//! of [`ModelLogin::after_401`]), under the locks Claude Code takes for its own refresh, the
//! refreshed login written back to the host's store, each outcome handed to the recorder.

use super::https::post_json;
use super::lock::RefreshLock;
use super::store::{OAuth, oauth_of, read_store, write_store};
use super::{
    Attempt, CLIENT_ID, Credential, Current, DEFAULT_SCOPES, LoginError, ModelLogin,
    REFRESH_AFTER_401_INTERVAL, REFRESH_MARGIN_MS, REFRESH_RETRY_AFTER_FAILURE,
    REFRESHES_AFTER_401_MAX, RefreshEndpoint, RefreshOutcome, RefreshTrigger, STORE_FILE, Source,
    now_ms,
};
use std::path::{Path, PathBuf};

impl ModelLogin {
    /// After the API refused `used` (401): the credential to send again, or why the 401 is
    /// relayed as it is. The agent decides how many requests are refused, so the host's login
    /// is refreshed only when the token is near its expiry, or when this run has not taken a
    /// token for [`REFRESH_AFTER_401_INTERVAL`] and has tried to refresh after a 401 fewer than
    /// [`REFRESHES_AFTER_401_MAX`] times; never within [`REFRESH_RETRY_AFTER_FAILURE`] of a
    /// failed attempt. A token another refresher wrote is taken at any time. Every refresh and
    /// every refusal is handed to the recorder ([`ModelLogin::record_refreshes`]).
    pub fn after_401(&self, used: &Credential) -> Result<Result<Credential, String>, LoginError> {
        if self.refresh.is_none() {
            return Ok(Err("this login is not refreshed".into()));
        }
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.credential.as_ref() != Some(used) {
            // Another request of this run has replaced it already: nothing is refreshed.
            return Ok(current
                .credential
                .clone()
                .filter(|c| c != used)
                .ok_or_else(|| "no other credential".to_string()));
        }
        let near_expiry = current
            .expires_at
            .is_some_and(|at| now_ms() + REFRESH_MARGIN_MS >= at);
        let refused = if near_expiry {
            None
        } else if let Some(at) = current.taken_at
            && at.elapsed() < REFRESH_AFTER_401_INTERVAL
        {
            Some(format!(
                "the token was taken {} s ago: a 401 to it is relayed, not refreshed again (a 401 may refresh the login once no token was taken for {} s)",
                at.elapsed().as_secs(),
                REFRESH_AFTER_401_INTERVAL.as_secs()
            ))
        } else if current.refreshes_after_401 >= REFRESHES_AFTER_401_MAX {
            Some(format!(
                "this run has refreshed the login after a 401 {REFRESHES_AFTER_401_MAX} times (its budget)"
            ))
        } else {
            None
        };
        if let Some(why) = refused {
            current.refusals += 1;
            self.emit(
                &current,
                RefreshOutcome::Refused,
                RefreshTrigger::Unauthorized,
                why.clone(),
                None,
                false,
            );
            return Ok(Err(why));
        }
        let why = if near_expiry {
            "a 401, and the token expires within 5 minutes (refreshed whatever the budget)".into()
        } else {
            format!(
                "a 401 to a token {}; attempt {} of the run's {REFRESHES_AFTER_401_MAX} after a 401",
                match current.taken_at {
                    Some(at) => format!("taken {} s ago", at.elapsed().as_secs()),
                    None => "read from the store at launch".into(),
                },
                current.refreshes_after_401 + 1
            )
        };
        if let Attempt::Refused(why) = self.refresh_locked(
            &mut current,
            Some(used),
            RefreshTrigger::Unauthorized,
            why,
            !near_expiry,
        )? {
            return Ok(Err(why));
        }
        Ok(current
            .credential
            .clone()
            .filter(|c| c != used)
            .ok_or_else(|| "the store held nothing better".to_string()))
    }

    pub(super) fn not_logged_in(&self) -> LoginError {
        let store = match &self.source {
            Source::ClaudeAi { claude_dir } => claude_dir.join(STORE_FILE),
            _ => PathBuf::from("~/.claude").join(STORE_FILE),
        };
        LoginError::NotLoggedIn {
            store: store.display().to_string(),
        }
    }

    /// [`ModelLogin::refresh_inner`], and its record: `why` is what asked for it (the rule's
    /// words); `counts_after_401`: an attempt is charged to the budget after a 401.
    pub(super) fn refresh_locked(
        &self,
        current: &mut Current,
        refused: Option<&Credential>,
        trigger: RefreshTrigger,
        why: String,
        counts_after_401: bool,
    ) -> Result<Attempt, LoginError> {
        let failed_before = current.failed_refreshes;
        let result = self.refresh_inner(current, refused, counts_after_401);
        match &result {
            Ok(Attempt::Refreshed) => {
                self.emit(current, RefreshOutcome::Refreshed, trigger, why, None, true);
            }
            Ok(Attempt::TookStored) => self.emit(
                current,
                RefreshOutcome::TookStored,
                trigger,
                format!("{why}; the store held a fresh token another refresher wrote: taken, no refresh token spent"),
                None,
                false,
            ),
            Ok(Attempt::Refused(no)) => {
                current.refusals += 1;
                self.emit(
                    current,
                    RefreshOutcome::Refused,
                    trigger,
                    format!("{why}; {no}"),
                    None,
                    false,
                );
            }
            Err(e) => {
                let sent = current.failed_refreshes > failed_before;
                self.emit(
                    current,
                    RefreshOutcome::Failed,
                    trigger,
                    why,
                    Some(e.to_string()),
                    sent,
                );
            }
        }
        result
    }

    /// Under Claude Code's locks: re-read the store (a bare `claude` or another run may have
    /// refreshed already) and use its token if it is fresh and not the one refused; otherwise
    /// spend the refresh token and write the result back — unless an attempt failed less than
    /// [`REFRESH_RETRY_AFTER_FAILURE`] ago.
    fn refresh_inner(
        &self,
        current: &mut Current,
        refused: Option<&Credential>,
        counts_after_401: bool,
    ) -> Result<Attempt, LoginError> {
        let (Source::ClaudeAi { claude_dir }, Some(endpoint)) = (&self.source, &self.refresh)
        else {
            return Ok(Attempt::Refused("this login is not refreshed".into()));
        };
        let _lock = RefreshLock::acquire(claude_dir)?;
        let store_path = claude_dir.join(STORE_FILE);
        let Some(store) = read_store(&store_path)? else {
            return Err(self.not_logged_in());
        };
        let oauth = oauth_of(&store, &store_path)?;
        let stored = Credential::Bearer(oauth.access.clone());
        let fresh = !oauth.access.is_empty() && now_ms() + REFRESH_MARGIN_MS < oauth.expires_at;
        if fresh && refused != Some(&stored) {
            tracing::info!("model login: the store holds a fresh token; using it");
            current.credential = Some(stored);
            current.expires_at = Some(oauth.expires_at);
            current.taken_at = Some(std::time::Instant::now());
            return Ok(Attempt::TookStored);
        }
        if let Some(at) = current.failed_at
            && at.elapsed() < REFRESH_RETRY_AFTER_FAILURE
        {
            return Ok(Attempt::Refused(format!(
                "the last attempt failed {} s ago: not tried again within {} s of a failure",
                at.elapsed().as_secs(),
                REFRESH_RETRY_AFTER_FAILURE.as_secs()
            )));
        }
        let Some(refresh_token) = oauth.refresh.clone().filter(|t| !t.is_empty()) else {
            return Err(self.not_logged_in());
        };
        if counts_after_401 {
            current.refreshes_after_401 += 1;
        }
        match self.spend(endpoint, &store, &store_path, &oauth, &refresh_token) {
            Ok((access, expires_at)) => {
                current.credential = Some(Credential::Bearer(access));
                current.expires_at = Some(expires_at);
                current.taken_at = Some(std::time::Instant::now());
                current.refreshes += 1;
                current.failed_at = None;
                Ok(Attempt::Refreshed)
            }
            Err(e) => {
                current.failed_refreshes += 1;
                current.failed_at = Some(std::time::Instant::now());
                Err(e)
            }
        }
    }

    /// Sends the refresh token and writes what comes back to the store: the new access token
    /// and its expiry.
    fn spend(
        &self,
        endpoint: &RefreshEndpoint,
        store: &serde_json::Value,
        store_path: &Path,
        oauth: &OAuth,
        refresh_token: &str,
    ) -> Result<(String, u64), LoginError> {
        let scopes = if oauth.scopes.is_empty() {
            DEFAULT_SCOPES.iter().map(|s| s.to_string()).collect()
        } else {
            oauth.scopes.clone()
        };
        let body = serde_json::json!({
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": CLIENT_ID,
            "scope": scopes.join(" "),
        });
        let (status, reply) = post_json(endpoint, &body).map_err(LoginError::Refresh)?;
        let reply: serde_json::Value = serde_json::from_slice(&reply).unwrap_or_default();
        if status != 200 {
            let code = reply["error"].as_str().unwrap_or("no error code");
            return Err(LoginError::Refresh(format!(
                "{} answered {status} ({code})",
                endpoint.url
            )));
        }
        let (Some(access), Some(expires_in)) =
            (reply["access_token"].as_str(), reply["expires_in"].as_u64())
        else {
            return Err(LoginError::Refresh(format!(
                "{} answered without access_token and expires_in",
                endpoint.url
            )));
        };
        let token_ok =
            |t: &str| !t.is_empty() && t.len() <= 4096 && t.bytes().all(|b| b.is_ascii_graphic());
        if !token_ok(access)
            || reply["refresh_token"]
                .as_str()
                .is_some_and(|t| !token_ok(t))
        {
            return Err(LoginError::Refresh(format!(
                "{} answered with a malformed token",
                endpoint.url
            )));
        }
        let expires_at = now_ms().saturating_add(expires_in.saturating_mul(1000));
        let mut updated = store.clone();
        let login = &mut updated["claudeAiOauth"];
        login["accessToken"] = access.into();
        if let Some(new_refresh) = reply["refresh_token"].as_str() {
            login["refreshToken"] = new_refresh.into();
        }
        login["expiresAt"] = expires_at.into();
        if let Some(scope) = reply["scope"].as_str() {
            login["scopes"] = scope.split_whitespace().collect::<Vec<_>>().into();
        }
        let bytes = serde_json::to_vec(&updated).expect("JSON values serialize");
        write_store(store_path, &bytes).map_err(|source| LoginError::WriteBack {
            path: store_path.to_path_buf(),
            source,
        })?;
        tracing::info!(store = %store_path.display(), "model login refreshed and written back");
        Ok((access.to_owned(), expires_at))
    }
}
