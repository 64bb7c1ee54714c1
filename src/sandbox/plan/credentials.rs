//! The sandbox's side of `[[network.credentials]]`: a placeholder per rule (random per run,
//! worthless anywhere else), the variables that hand it to tools (the rule's `placeholder_env`,
//! git's credential helper through `GIT_CONFIG_COUNT`), and the trust the proxy's per-run CA
//! needs inside (`SSL_CERT_FILE` and its kin pointing at a bundle the supervisor writes at
//! launch). The real value never enters the plan: the supervisor reads it at launch.

use crate::profile::credentials::SourceSpec;
use crate::profile::{CredentialRule, Profile};
use crate::sandbox::plan::{HostFacts, PlanError};
use serde::Serialize;
use std::path::PathBuf;

/// Where the run's trust files are inside (on the private /run), read-only.
pub const TRUST_DIR: &str = "/run/stepproof-trust";
/// The system roots followed by the run's CA: for `SSL_CERT_FILE` and its kin, which replace
/// the trust store rather than add to it.
pub const BUNDLE_FILE: &str = "ca-bundle.pem";
/// The run's CA (after the certificates of `stepproof-run`'s own `NODE_EXTRA_CA_CERTS`): for
/// `NODE_EXTRA_CA_CERTS`, which adds to node's own roots.
pub const RUN_CA_FILE: &str = "run-ca.pem";
/// Every placeholder starts with this: what a reader of a log or an environment recognises.
pub const PLACEHOLDER_PREFIX: &str = "stepproof-placeholder-";

/// A credential rule as the run uses it: the profile's rule and this run's placeholder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedCredential {
    pub rule: CredentialRule,
    /// What the sandbox holds instead of the secret: `stepproof-placeholder-<name>-<hex>`.
    pub placeholder: String,
}

/// Whether the run needs its CA and the trust files inside: the proxy terminates TLS for the
/// hosts of credential rules and for read-only hosts (`network.read_only`, the presets' upload
/// hosts), which only the proxy of `allowlist` reaches.
pub fn needs_trust(profile: &Profile) -> bool {
    !profile.network.credentials.is_empty()
        || (profile.network.mode == crate::profile::NetworkMode::Allowlist
            && !profile.network.read_only.is_empty())
}

/// The placeholders and the refusals: credential rules are honoured only from profile files
/// outside the workspace (a cloned repository's profile must not run host commands or read host
/// files into headers), and only where the sandbox has its own /run (namespaces).
pub fn plan_credentials(
    profile: &Profile,
    facts: &HostFacts,
) -> Result<Vec<PlannedCredential>, PlanError> {
    let rules = &profile.network.credentials;
    if rules.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(file) = profile
        .files
        .iter()
        .find(|f| f.path.starts_with(&facts.workspace))
    {
        return Err(PlanError::CredentialsFromWorkspace {
            file: file.path.clone(),
        });
    }
    let rng = ring::rand::SystemRandom::new();
    rules
        .iter()
        .map(|rule| {
            let mut random = [0u8; 20];
            ring::rand::SecureRandom::fill(&rng, &mut random).map_err(|_| PlanError::Random)?;
            Ok(PlannedCredential {
                rule: rule.clone(),
                placeholder: format!("{PLACEHOLDER_PREFIX}{}-{}", rule.name, hex::encode(random)),
            })
        })
        .collect()
}

/// The files the rules read their secret from (hidden inside, wherever they are).
pub fn source_files(profile: &Profile, facts: &HostFacts) -> Vec<PathBuf> {
    profile
        .network
        .credentials
        .iter()
        .filter_map(|rule| match rule.source_spec() {
            SourceSpec::File(spec) => Some(spec.resolve(&facts.home, &facts.workspace)),
            _ => None,
        })
        .collect()
}

/// The variables the rules read their secret from: never passed inside, whatever the
/// environment allow-list says.
pub fn source_variables(profile: &Profile) -> Vec<String> {
    profile
        .network
        .credentials
        .iter()
        .filter_map(|rule| match rule.source_spec() {
            SourceSpec::Env(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// The variables that wire the placeholders and the run's CA in (`trust`: the plan binds the
/// trust files), given the environment so far (a caller's own `GIT_CONFIG_COUNT` entries are
/// kept; ours follow them).
pub fn credential_env(
    planned: &[PlannedCredential],
    trust: bool,
    env: &[(String, String)],
) -> Vec<(String, String)> {
    if !trust {
        return Vec::new();
    }
    let bundle = format!("{TRUST_DIR}/{BUNDLE_FILE}");
    let mut out: Vec<(String, String)> = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "GIT_SSL_CAINFO",
        "CARGO_HTTP_CAINFO",
        "PIP_CERT",
        // npm reads its own `cafile` (Debian's global npmrc names the system bundle), which
        // replaces node's roots and NODE_EXTRA_CA_CERTS; the environment outranks an npmrc.
        "npm_config_cafile",
    ]
    .iter()
    .map(|name| (name.to_string(), bundle.clone()))
    .collect();
    out.push((
        "NODE_EXTRA_CA_CERTS".into(),
        format!("{TRUST_DIR}/{RUN_CA_FILE}"),
    ));
    for credential in planned {
        if let Some(name) = &credential.rule.placeholder_env {
            out.push((name.clone(), credential.placeholder.clone()));
        }
    }
    let git: Vec<&PlannedCredential> = planned.iter().filter(|c| c.rule.git).collect();
    if !git.is_empty() {
        let mut index: usize = env
            .iter()
            .find(|(n, _)| n == "GIT_CONFIG_COUNT")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        for credential in git {
            let (host, port) = credential.rule.host_port();
            let url = if port == 443 {
                format!("https://{host}")
            } else {
                format!("https://{host}:{port}")
            };
            let key = format!("credential.{url}.helper");
            let user = credential.rule.basic.clone().unwrap_or_default();
            // An empty helper first: it clears the helpers the user's own configuration names
            // for this URL, so ours answers (and no host helper is asked from inside).
            for value in [String::new(), git_helper(&user, &credential.placeholder)] {
                out.push((format!("GIT_CONFIG_KEY_{index}"), key.clone()));
                out.push((format!("GIT_CONFIG_VALUE_{index}"), value));
                index += 1;
            }
        }
        out.push(("GIT_CONFIG_COUNT".into(), index.to_string()));
    }
    out
}

/// A shell credential helper that answers `get` with the user and the placeholder (git appends
/// the action as an argument; `store` and `erase` get no answer).
fn git_helper(user: &str, placeholder: &str) -> String {
    format!(
        "!f() {{ test \"$1\" = get && printf 'username=%s\\npassword=%s\\n' '{user}' '{placeholder}'; }}; f"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(name: &str, git: bool, env: Option<&str>) -> PlannedCredential {
        PlannedCredential {
            rule: CredentialRule {
                name: name.into(),
                host: "git.example:8443".into(),
                paths: vec!["/".into()],
                methods: None,
                source: "env:T".into(),
                header: None,
                format: None,
                basic: Some("x-access-token".into()),
                placeholder_env: env.map(str::to_string),
                git,
                ca_file: None,
            },
            placeholder: format!("{PLACEHOLDER_PREFIX}{name}-00"),
        }
    }

    #[test]
    fn the_environment_points_at_the_bundle_and_the_placeholders() {
        assert!(credential_env(&[], false, &[]).is_empty());
        // Read-only hosts alone: the trust variables, nothing else.
        let trust_only = credential_env(&[], true, &[]);
        assert_eq!(trust_only.len(), 8, "{trust_only:?}");
        assert!(trust_only.iter().all(|(_, v)| v.starts_with(TRUST_DIR)));
        let env = credential_env(
            &[rule("a", true, Some("GH_TOKEN")), rule("b", false, None)],
            true,
            &[("GIT_CONFIG_COUNT".into(), "1".into())],
        );
        let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(
            get("SSL_CERT_FILE"),
            Some("/run/stepproof-trust/ca-bundle.pem")
        );
        assert_eq!(
            get("NODE_EXTRA_CA_CERTS"),
            Some("/run/stepproof-trust/run-ca.pem")
        );
        assert_eq!(get("GH_TOKEN"), Some("stepproof-placeholder-a-00"));
        // The caller's entry 0 stays; ours are 1 and 2.
        assert_eq!(get("GIT_CONFIG_COUNT"), Some("3"));
        assert_eq!(
            get("GIT_CONFIG_KEY_1"),
            Some("credential.https://git.example:8443.helper")
        );
        assert_eq!(get("GIT_CONFIG_VALUE_1"), Some(""));
        assert!(
            get("GIT_CONFIG_VALUE_2")
                .unwrap()
                .contains("'x-access-token' 'stepproof-placeholder-a-00'")
        );
    }

    #[test]
    fn the_git_helper_answers_get_only() {
        let helper = git_helper("u", "p");
        let script = helper.strip_prefix('!').unwrap();
        let run = |action: &str| {
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("{script} \"$@\""))
                .arg("sh")
                .arg(action)
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        assert_eq!(run("get"), "username=u\npassword=p\n");
        assert_eq!(run("store"), "");
    }
}
