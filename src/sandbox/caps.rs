//! Capabilities: every set cleared, the bounding set first (it needs CAP_SETPCAP, which goes
//! with the others), so that no later `execve` — not even of a setuid or file-capability
//! binary, nor as uid 0 in the root fallback — can gain one back.

use caps::{CapSet, Capability};

#[derive(Debug, thiserror::Error)]
#[error("dropping capabilities ({step}): {source}")]
pub struct CapsError {
    step: &'static str,
    source: caps::errors::CapsError,
}

/// Empties the bounding set. Needs CAP_SETPCAP, so it comes before the other sets are cleared.
pub fn drop_bounding_set() -> Result<(), CapsError> {
    for cap in caps::all() {
        match caps::drop(None, CapSet::Bounding, cap) {
            Ok(()) => {}
            // Capabilities the running kernel does not know are not in the set to begin with.
            Err(_) if !caps::has_cap(None, CapSet::Bounding, cap).unwrap_or(false) => {}
            Err(source) => {
                return Err(CapsError {
                    step: "bounding set",
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Clears ambient, inheritable, effective and permitted (in an order the kernel accepts).
pub fn clear_all_sets() -> Result<(), CapsError> {
    for (set, step) in [
        (CapSet::Ambient, "ambient set"),
        (CapSet::Inheritable, "inheritable set"),
        (CapSet::Effective, "effective set"),
        (CapSet::Permitted, "permitted set"),
    ] {
        caps::clear(None, set).map_err(|source| CapsError { step, source })?;
    }
    Ok(())
}

/// True when the calling thread holds no capability in any set (with `bounding`, the bounding
/// set too: an unprivileged process without a user namespace cannot empty it, and with
/// `no_new_privs` nothing it executes can use it).
pub fn holds_none(bounding: bool) -> bool {
    // One read of /proc/self/status answers for every set at once; asking the kernel set by set
    // costs a system call per capability for the bounding and ambient sets.
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(answer) = none_in_status(&status, bounding)
    {
        return answer;
    }
    let mut sets = vec![
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Inheritable,
        CapSet::Ambient,
    ];
    if bounding {
        sets.push(CapSet::Bounding);
    }
    sets.into_iter()
        .all(|set| caps::read(None, set).map(|s| s.is_empty()).unwrap_or(false))
}

/// From the text of `/proc/<pid>/status`: whether every capability mask is zero (`None` when a
/// mask line is missing or unreadable).
fn none_in_status(status: &str, bounding: bool) -> Option<bool> {
    let mut fields = vec!["CapInh:", "CapPrm:", "CapEff:", "CapAmb:"];
    if bounding {
        fields.push("CapBnd:");
    }
    let mut all_zero = true;
    for field in fields {
        let value = status
            .lines()
            .find_map(|line| line.strip_prefix(field))
            .map(str::trim)?;
        all_zero &= u64::from_str_radix(value, 16).ok()? == 0;
    }
    Some(all_zero)
}

/// For reports: the capability names in a set.
pub fn names(set: CapSet) -> Vec<String> {
    let mut names: Vec<String> = caps::read(None, set)
        .map(|s| s.into_iter().map(|c: Capability| c.to_string()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::none_in_status;

    const EMPTY: &str = "Name:\ttrue\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n";

    #[test]
    fn status_masks_are_read() {
        assert_eq!(none_in_status(EMPTY, true), Some(true));
        let bounding = EMPTY.replace("CapBnd:\t0000000000000000", "CapBnd:\t000001ffffffffff");
        assert_eq!(none_in_status(&bounding, true), Some(false));
        assert_eq!(none_in_status(&bounding, false), Some(true));
        let effective = EMPTY.replace("CapEff:\t0000000000000000", "CapEff:\t0000000000000400");
        assert_eq!(none_in_status(&effective, false), Some(false));
        assert_eq!(none_in_status("Name:\tx\n", false), None);
        let garbled = EMPTY.replace("CapAmb:\t0000000000000000", "CapAmb:\tzz");
        assert_eq!(none_in_status(&garbled, false), None);
    }
}
