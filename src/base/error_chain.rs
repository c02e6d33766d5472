//! [`ErrorChain`]: an error and its sources on one line, `outer: inner: innermost`, for log
//! lines, messages and what the binaries print on stderr.

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its sources, separated by `: `. A source whose text
/// already ends what was shown is left out: many errors (ours, and those of crates such as
/// `parquet`) put their source in their own message too, and the chain would say it twice
/// (`cannot open: No such file or directory: No such file or directory`).
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            let text = error.to_string();
            if !shown.ends_with(&text) {
                write!(f, ": {text}")?;
                shown.push_str(": ");
                shown.push_str(&text);
            }
            source = error.source();
        }
        Ok(())
    }
}

/// `reason` cut to at most `max` bytes at a character boundary, marked ` [...]` if cut (`max`
/// must leave room for the mark): a reason that travels in messages must stay far below the
/// transport's largest, however long the error a user's code raised.
pub fn clipped(mut reason: String, max: usize) -> String {
    const MARK: &str = " [...]";
    if reason.len() <= max {
        return reason;
    }
    let mut end = max.saturating_sub(MARK.len());
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.truncate(end);
    reason.push_str(MARK);
    reason
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn shows_every_source_in_order() {
        let error = Outer(std::io::Error::other("inner"));
        assert_eq!(ErrorChain(&error).to_string(), "outer: inner");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot open: {0}")]
    struct Quoting(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read Parquet: {0}")]
    struct QuotingTwice(#[source] Quoting);

    #[derive(Debug, thiserror::Error)]
    #[error("task failed")]
    struct Plain(#[source] QuotingTwice);

    /// A source its error's message quotes already is said once (it was said twice, in the
    /// failures of jobs reading a missing Parquet file).
    #[test]
    fn a_source_the_message_quotes_is_said_once() {
        let missing = || std::io::Error::other("No such file or directory (os error 2)");
        assert_eq!(
            ErrorChain(&Quoting(missing())).to_string(),
            "cannot open: No such file or directory (os error 2)"
        );
        assert_eq!(
            ErrorChain(&Plain(QuotingTwice(Quoting(missing())))).to_string(),
            "task failed: cannot read Parquet: cannot open: No such file or directory (os error 2)"
        );
    }

    #[test]
    fn reasons_are_clipped_at_a_character_boundary_and_marked() {
        assert_eq!(clipped("short".into(), 10), "short");
        let cut = clipped("é".repeat(1000), 1024);
        assert!(cut.len() <= 1024 && cut.ends_with(" [...]"), "{cut}");
        assert!(cut.trim_end_matches(" [...]").chars().all(|c| c == 'é'));
    }
}
