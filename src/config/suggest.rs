//! "Did you mean ...?": the known name closest to a mistyped one.
//!
//! Two kinds of mistakes are common: a typo (`heartbeat.intervall`) and a name without or with
//! the wrong section (`pool-size`, `taskmanager.pool-size`, `FLINT_SLOTS`). The second is not
//! close by edit distance, so a name whose last part matches — or that ends a known name — wins
//! over a mere typo; among those, the smallest edit distance.

/// The candidate closest to `unknown`, if any is close enough to be a plausible intent.
/// `separator` splits names into parts (`.` for keys, `_` for variables).
pub(crate) fn closest<'a>(
    unknown: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    separator: char,
) -> Option<&'a str> {
    let unknown = unknown.to_ascii_lowercase();
    let last = |name: &str| name.rsplit(separator).next().unwrap_or_default().to_owned();
    let unknown_last = last(&unknown);
    // Typos: at most a third of the name (and always two edits) away.
    let typo_limit = (unknown.len() / 3).max(2);
    candidates
        .into_iter()
        .filter_map(|candidate| {
            let lower = candidate.to_ascii_lowercase();
            let distance = strsim::levenshtein(&unknown, &lower);
            let same_ending = lower.ends_with(&format!("{separator}{unknown}"))
                || (separator == '.' && last(&lower) == unknown_last);
            let tier = if same_ending {
                0
            } else if distance <= typo_limit {
                1
            } else {
                return None;
            };
            Some(((tier, distance), candidate))
        })
        .min_by_key(|(score, _)| *score)
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::closest;

    const KEYS: [&str; 5] = [
        "heartbeat.interval",
        "heartbeat.timeout",
        "resourcemanager.pool-size",
        "resourcemanager.max-pool-size",
        "slot.request.timeout",
    ];

    #[test]
    fn typos_and_missing_sections_find_the_key() {
        assert_eq!(
            closest("heartbeat.intervall", KEYS, '.'),
            Some("heartbeat.interval")
        );
        assert_eq!(
            closest("slot.request-timeout", KEYS, '.'),
            Some("slot.request.timeout")
        );
        assert_eq!(
            closest("pool-size", KEYS, '.'),
            Some("resourcemanager.pool-size")
        );
        assert_eq!(
            closest("taskmanager.pool-size", KEYS, '.'),
            Some("resourcemanager.pool-size")
        );
        assert_eq!(
            closest(
                "POOL_SIZE",
                ["RESOURCEMANAGER_MAX_POOL_SIZE", "RESOURCEMANAGER_POOL_SIZE"],
                '_'
            ),
            Some("RESOURCEMANAGER_POOL_SIZE")
        );
    }

    #[test]
    fn nothing_close_suggests_nothing() {
        assert_eq!(closest("parallelism.default", KEYS, '.'), None);
    }
}
