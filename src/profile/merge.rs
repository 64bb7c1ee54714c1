//! Merging the layers of an `extends` chain: a child overrides scalars, lists are unions.

use super::{
    AuditFile, FilesystemFile, GatewayFile, NetworkFile, ProcessFile, ProfileFile, approvals,
    budgets,
};
use stepproof_hook::config::HookConfig;

pub(super) fn append_unique<T: Eq + std::hash::Hash>(mut base: Vec<T>, more: Vec<T>) -> Vec<T> {
    // A set, not `contains` per item: the secret catalogue has hundreds of entries, and path
    // comparisons are not cheap (this runs before every launch). The set borrows; nothing is
    // cloned.
    base.extend(more);
    let keep: Vec<bool> = {
        let mut seen = std::collections::HashSet::with_capacity(base.len());
        base.iter().map(|item| seen.insert(item)).collect()
    };
    let mut index = 0;
    base.retain(|_| {
        index += 1;
        keep[index - 1]
    });
    base
}

/// A child layer overrides scalars it sets; lists are unions, so that extending a profile can
/// never silently un-hide a secret or un-protect a path. `network.presets` is the exception: a
/// child that sets it replaces it, so that `ci` and `strict` do not inherit default's downloads
/// (narrowing the network is safe).
pub(super) fn merge(base: ProfileFile, child: ProfileFile) -> ProfileFile {
    let mut set_env = base.process.set_env;
    set_env.extend(child.process.set_env);
    ProfileFile {
        name: child.name.or(base.name),
        description: child.description.or(base.description),
        extends: None,
        assurance: child.assurance.or(base.assurance),
        filesystem: FilesystemFile {
            system: append_unique(base.filesystem.system, child.filesystem.system),
            read_only: append_unique(base.filesystem.read_only, child.filesystem.read_only),
            writable: append_unique(base.filesystem.writable, child.filesystem.writable),
            hidden: append_unique(base.filesystem.hidden, child.filesystem.hidden),
            protected: append_unique(base.filesystem.protected, child.filesystem.protected),
            hidden_names: append_unique(
                base.filesystem.hidden_names,
                child.filesystem.hidden_names,
            ),
            home: child.filesystem.home.or(base.filesystem.home),
            home_allow: append_unique(base.filesystem.home_allow, child.filesystem.home_allow),
            hide_env_files: child
                .filesystem
                .hide_env_files
                .or(base.filesystem.hide_env_files),
            env_files_visible: append_unique(
                base.filesystem.env_files_visible,
                child.filesystem.env_files_visible,
            ),
            hide_other_projects: child
                .filesystem
                .hide_other_projects
                .or(base.filesystem.hide_other_projects),
            mask_home_sockets: child
                .filesystem
                .mask_home_sockets
                .or(base.filesystem.mask_home_sockets),
            tmp_size_mib: child
                .filesystem
                .tmp_size_mib
                .or(base.filesystem.tmp_size_mib),
            workspace: child.filesystem.workspace.or(base.filesystem.workspace),
        },
        process: ProcessFile {
            env: append_unique(base.process.env, child.process.env),
            set_env,
            sandbox_uid: child.process.sandbox_uid.or(base.process.sandbox_uid),
            allow_root_fallback: child
                .process
                .allow_root_fallback
                .or(base.process.allow_root_fallback),
            limits: child.process.limits.or(base.process.limits),
        },
        network: NetworkFile {
            mode: child.network.mode.or(base.network.mode),
            allow: append_unique(base.network.allow, child.network.allow),
            presets: child.network.presets.or(base.network.presets),
            read_only: append_unique(base.network.read_only, child.network.read_only),
            allow_addresses: append_unique(
                base.network.allow_addresses,
                child.network.allow_addresses,
            ),
            proxy_port: child.network.proxy_port.or(base.network.proxy_port),
            gateway: GatewayFile::merge(base.network.gateway, child.network.gateway),
            // A union, like the other lists: a rule's name is its identity (two with one name
            // are refused when the profile resolves).
            credentials: {
                let mut rules = base.network.credentials;
                rules.extend(child.network.credentials);
                rules
            },
        },
        degraded: child.degraded.or(base.degraded),
        claude: match (base.claude, child.claude) {
            (Some(mut b), Some(c)) => {
                b.managed_settings.extend(c.managed_settings);
                b.keep_sessions = c.keep_sessions.or(b.keep_sessions);
                Some(b)
            }
            (b, c) => c.or(b),
        },
        hook: match (base.hook, child.hook) {
            (Some(b), Some(c)) => Some(HookConfig::merge(b, c)),
            (b, c) => c.or(b),
        },
        approvals: approvals::merge(base.approvals, child.approvals),
        runbook: budgets::merge(base.runbook, child.runbook),
        audit: match (base.audit, child.audit) {
            (Some(b), Some(c)) => Some(AuditFile {
                inside_max_mib: c.inside_max_mib.or(b.inside_max_mib),
                inside_max_per_second: c.inside_max_per_second.or(b.inside_max_per_second),
                export: c.export.or(b.export),
            }),
            (b, c) => c.or(b),
        },
    }
}
