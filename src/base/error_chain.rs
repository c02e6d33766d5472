//! [`ErrorChain`]: an error and its sources on one line, `outer: inner: innermost`, for log
//! lines and messages (the binary uses anyhow's `{:#}` for the same; anyhow stays out of the
//! library).

use std::error::Error;
use std::fmt;

/// Displays an error followed by each of its sources, separated by `: `.
pub struct ErrorChain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
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
}
