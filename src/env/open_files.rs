//! The process's open-files limit (`RLIMIT_NOFILE`). Spill files, data connections and sockets
//! all count against it, and the common soft limit of 1,024 is far below what the kernel
//! allows: a Flint process raises its soft limit to the hard one at start (as the JVM does for
//! Flink), and an error caused by the limit names it.

use std::io;

/// Raises the soft open-files limit to the hard limit; returns both, as they stand after.
/// Failing to raise it is no error (the process runs with what it has), so this only logs.
pub fn raise_to_hard_limit() -> Option<(u64, u64)> {
    let before = rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(soft) if soft > before.0 => log::info!(
            "open files: soft limit raised from {} to {soft} (the hard limit)",
            before.0
        ),
        Ok(_) => {}
        Err(error) => log::warn!(
            "open files: cannot raise the soft limit of {} towards the hard limit of {}: {error}",
            before.0,
            before.1
        ),
    }
    rlimit::getrlimit(rlimit::Resource::NOFILE).ok()
}

/// For an error that hit the open-files limit, the sentence naming it (empty otherwise), to
/// append to the error's message.
pub fn hint(error: &io::Error) -> String {
    if error.raw_os_error() != Some(libc::EMFILE) {
        return String::new();
    }
    let limit = rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map_or_else(|_| "its".to_owned(), |(soft, _)| soft.to_string());
    format!(
        " (this process reached its open-files limit, RLIMIT_NOFILE = {limit}: raise the hard \
         limit, e.g. `ulimit -Hn` or `LimitNOFILE=` in a systemd unit; Flint raises the soft \
         limit to it at start)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one_and_errors_of_the_limit_name_it() {
        let (soft, hard) = raise_to_hard_limit().expect("linux has RLIMIT_NOFILE");
        // (An unlimited hard limit cannot be a soft one: the kernel caps files per process.)
        assert!(
            soft == hard || hard == rlimit::INFINITY,
            "the soft limit {soft} reaches the hard one {hard}"
        );
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(
            hint(&emfile).contains(&format!("RLIMIT_NOFILE = {soft}")),
            "{}",
            hint(&emfile)
        );
        assert_eq!(hint(&io::Error::from_raw_os_error(libc::ENOSPC)), "");
    }
}
