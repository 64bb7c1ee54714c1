//! Network presets: named sets of hosts a profile allows in one line (`network.presets`). Each
//! preset lists download-only hosts, and says which way out each one leaves (SECURITY.md repeats
//! it): a host that also takes uploads with a token the agent could bring itself (npm's
//! registry, `github.com`, `upload.pypi.org`, the `crates.io` API) is in a preset only
//! restricted to [`READ_METHODS`] (`read_only`): the proxy terminates TLS for it with the run's
//! CA, reads each request and refuses every other method (an upload needs a credential rule).

/// The methods a read-only host is reached with.
pub const READ_METHODS: &[&str] = &["GET", "HEAD"];

/// One preset: its name, what it is for, its hosts (port 443), and which of them are reached
/// read-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preset {
    pub name: &'static str,
    pub summary: &'static str,
    pub hosts: &'static [&'static str],
    /// The hosts of this preset that also accept uploads (a publish with a token the agent
    /// could bring itself): reached with [`READ_METHODS`] only, through the proxy's TLS
    /// termination.
    pub read_only: &'static [&'static str],
}

/// Every preset, in the order `explain` and the README list them.
pub const PRESETS: &[Preset] = &[
    Preset {
        name: "rust",
        summary: "cargo's crates.io sparse index and crate downloads, rustup's toolchains",
        hosts: &[
            "index.crates.io",
            "static.crates.io",
            "static.rust-lang.org",
        ],
        read_only: &[],
    },
    Preset {
        name: "python",
        summary: "PyPI's simple index and its files (pip, uv, poetry)",
        hosts: &["pypi.org", "files.pythonhosted.org"],
        read_only: &[],
    },
    Preset {
        name: "go",
        summary: "the Go module proxy and checksum database (GOPROXY, GOSUMDB, GOTOOLCHAIN)",
        hosts: &["proxy.golang.org", "sum.golang.org"],
        read_only: &[],
    },
    Preset {
        name: "github",
        summary: "GitHub's archive, raw-file and release downloads (not github.com: git push)",
        hosts: &[
            "codeload.github.com",
            "raw.githubusercontent.com",
            "objects.githubusercontent.com",
            "release-assets.githubusercontent.com",
        ],
        read_only: &[],
    },
    Preset {
        name: "node",
        summary: "npm's registry, GET and HEAD only (it also accepts `npm publish` with a token)",
        hosts: &["registry.npmjs.org"],
        read_only: &["registry.npmjs.org"],
    },
];

/// The preset of this name.
pub fn find(name: &str) -> Option<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name)
}

/// The presets that list `host` (a normalised name).
pub fn containing(host: &str) -> impl Iterator<Item = &'static Preset> + '_ {
    PRESETS.iter().filter(move |p| p.hosts.contains(&host))
}

/// The preset names, for a message.
pub fn names() -> String {
    PRESETS
        .iter()
        .map(|p| format!("\"{}\"", p.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The read-only hosts of `presets` (names already checked by [`hosts_of`]).
pub fn read_only_of(presets: &[String]) -> Vec<String> {
    presets
        .iter()
        .filter_map(|name| find(name))
        .flat_map(|p| p.read_only.iter().map(|h| (*h).to_owned()))
        .collect()
}

/// The allow entries of `presets` (checked: each name is known, none twice).
pub fn hosts_of(presets: &[String]) -> Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    for (i, name) in presets.iter().enumerate() {
        let Some(preset) = find(name) else {
            return Err(format!(
                "network.presets: unknown preset \"{name}\"; the presets are {}",
                names()
            ));
        };
        if presets[..i].contains(name) {
            return Err(format!("network.presets: \"{name}\" is listed twice"));
        }
        hosts.extend(preset.hosts.iter().map(|h| (*h).to_owned()));
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_are_unique_and_their_hosts_are_plain_names() {
        for (i, p) in PRESETS.iter().enumerate() {
            assert!(PRESETS[..i].iter().all(|q| q.name != p.name), "{}", p.name);
            for host in p.hosts {
                // Plain lower-case names on port 443: no wildcard, no port, no address.
                assert!(
                    host.bytes().all(|b| b.is_ascii_lowercase()
                        || b.is_ascii_digit()
                        || b == b'.'
                        || b == b'-')
                        && host.contains('.'),
                    "{host}"
                );
            }
            for host in p.read_only {
                assert!(p.hosts.contains(host), "{host}");
            }
        }
        // The hosts the issue names as upload hosts are in a preset only read-only.
        for upload in [
            "registry.npmjs.org",
            "github.com",
            "upload.pypi.org",
            "crates.io",
            "api.github.com",
        ] {
            assert!(
                containing(upload).all(|p| p.read_only.contains(&upload)),
                "{upload}"
            );
        }
    }

    #[test]
    fn unknown_and_repeated_names_are_refused() {
        assert_eq!(
            hosts_of(&["rust".into()]).unwrap(),
            [
                "index.crates.io",
                "static.crates.io",
                "static.rust-lang.org"
            ]
        );
        let err = hosts_of(&["rust".into(), "ruby".into()]).unwrap_err();
        assert!(
            err.starts_with("network.presets: unknown preset \"ruby\""),
            "{err}"
        );
        let err = hosts_of(&["go".into(), "go".into()]).unwrap_err();
        assert!(err.contains("twice"), "{err}");
        assert_eq!(
            containing("proxy.golang.org").next().map(|p| p.name),
            Some("go")
        );
    }
}
