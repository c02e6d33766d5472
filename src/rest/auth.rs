//! The bearer token of the REST API (`rest.token`).
//!
//! Every endpoint but the dashboard's static files needs `Authorization: Bearer <rest.token>`:
//! submitting, cancelling, resizing and stopping always, reading unless
//! `rest.read-without-token` opens it (the guard checks it for every request, the changing
//! handlers once more through [`Authorized`]). The presented token is compared in constant
//! time, and through SHA-256 digests so that not even its length leaks through timing. This
//! module never logs a token.

use std::fmt;
use std::future::{Ready, ready};

use actix_web::dev::Payload;
use actix_web::http::header::{AUTHORIZATION, HeaderValue};
use actix_web::{FromRequest, HttpRequest, web};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::RestState;
use super::error::ApiError;

/// The configured token, kept only as its digest.
#[derive(Clone)]
pub struct Token([u8; 32]);

impl Token {
    /// The token `secret`, as bytes (non-empty: [`RestListener::bind`](super::RestListener::bind)
    /// refuses an empty one).
    pub fn new(secret: impl AsRef<[u8]>) -> Self {
        Self(Sha256::digest(secret.as_ref()).into())
    }

    /// Whether `presented` is this token, in time independent of both values.
    fn matches(&self, presented: &[u8]) -> bool {
        let digest: [u8; 32] = Sha256::digest(presented).into();
        self.0.ct_eq(&digest).into()
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(..)")
    }
}

/// Why a changing request was not authorized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization` header.
    #[error(
        "this endpoint needs `Authorization: Bearer <rest.token>` (without a configured token, \
         flint jobmanager uses the one in ~/.local/state/flint/rest-token of its user)"
    )]
    Missing,
    /// An `Authorization` header of another scheme, or not text.
    #[error("the Authorization header must be `Bearer <rest.token>`")]
    NotBearer,
    /// A bearer token that is not `rest.token`.
    #[error("wrong bearer token")]
    WrongToken,
}

/// Checks a request's `Authorization` header against the configured token; with none
/// configured every request passes.
pub fn check(expected: Option<&Token>, header: Option<&HeaderValue>) -> Result<(), AuthError> {
    let Some(expected) = expected else {
        return Ok(());
    };
    let header = header.ok_or(AuthError::Missing)?.as_bytes();
    // The scheme is case-insensitive (RFC 9110 §11.1); the token is compared as given.
    let (scheme, token) = header
        .iter()
        .position(|&b| b == b' ')
        .map(|space| (&header[..space], header[space + 1..].trim_ascii()))
        .ok_or(AuthError::NotBearer)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || token.is_empty() {
        return Err(AuthError::NotBearer);
    }
    if expected.matches(token) {
        Ok(())
    } else {
        Err(AuthError::WrongToken)
    }
}

/// An extractor that admits the request only with the right token. Put it first in a handler's
/// arguments, so an unauthorized request is refused before its body is read.
#[derive(Debug, Clone, Copy)]
pub struct Authorized;

impl FromRequest for Authorized {
    type Error = ApiError;
    type Future = Ready<Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let token = req
            .app_data::<web::Data<RestState>>()
            .and_then(|state| state.token.as_ref());
        ready(
            check(token, req.headers().get(AUTHORIZATION))
                .map(|()| Authorized)
                .map_err(ApiError::Unauthorized),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(value: &str) -> HeaderValue {
        HeaderValue::from_str(value).unwrap()
    }

    #[test]
    fn without_a_configured_token_everything_passes() {
        assert_eq!(check(None, None), Ok(()));
        assert_eq!(check(None, Some(&header("Bearer anything"))), Ok(()));
    }

    #[test]
    fn only_the_configured_bearer_token_passes() {
        let token = Token::new("s3cret");
        assert_eq!(check(Some(&token), Some(&header("Bearer s3cret"))), Ok(()));
        assert_eq!(check(Some(&token), Some(&header("bearer s3cret"))), Ok(()));
        assert_eq!(check(Some(&token), None), Err(AuthError::Missing));
        assert_eq!(
            check(Some(&token), Some(&header("Bearer s3cre"))),
            Err(AuthError::WrongToken)
        );
        assert_eq!(
            check(Some(&token), Some(&header("Bearer s3cret2"))),
            Err(AuthError::WrongToken)
        );
        assert_eq!(
            check(Some(&token), Some(&header("Basic czNjcmV0"))),
            Err(AuthError::NotBearer)
        );
        assert_eq!(
            check(Some(&token), Some(&header("Bearer "))),
            Err(AuthError::NotBearer)
        );
        assert_eq!(
            check(Some(&token), Some(&header("s3cret"))),
            Err(AuthError::NotBearer)
        );
    }

    #[test]
    fn a_token_never_shows_in_debug_output() {
        assert_eq!(format!("{:?}", Token::new("s3cret")), "Token(..)");
    }
}
