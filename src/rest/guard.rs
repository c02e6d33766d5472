//! What the REST API refuses before any handler runs: requests that were not meant for this
//! server, changing requests a web page of another site made, and bodies that trickle in.
//!
//! The API has no cookies, so a browser holds no credential for it; what a malicious page can
//! still do is make the operator's browser *send* requests to it (it listens on loopback, which
//! the browser can reach):
//!
//! - **Cross-site requests.** A page may `POST` a "simple" request (`text/plain`, no preflight)
//!   to any address. Every changing request (`POST`, `PUT`, `PATCH`, `DELETE`) that carries an
//!   `Origin` must come from this server's own origin (the dashboard does), and a body must be
//!   `Content-Type: application/json` (415 otherwise), or `application/octet-stream` (an
//!   artifact upload): a page cannot send either cross-site without a CORS preflight, which
//!   this server never answers.
//! - **DNS rebinding.** A page's own name, re-pointed at 127.0.0.1, makes every request
//!   same-origin for the browser. The `Host` header still names the page's domain: only the
//!   bound address, any IP literal (an IP is its own origin, nothing to rebind), `rest.address`,
//!   `localhost` on a loopback address and the names of `rest.allowed-hosts` are served (403
//!   otherwise).
//! - **Slow bodies.** Headers must arrive within actix-web's request timeout; the body must
//!   arrive within [`DEFAULT_BODY_TIMEOUT`] of the request's start (408 otherwise), so a client
//!   cannot hold a worker by trickling bytes. An artifact upload (`POST /artifacts`, up to
//!   `blob.max-size`) may take longer in all: its deadline restarts with every chunk, so only a
//!   stalled upload is cut off. The body is still read lazily, by the handler,
//!   after the token was checked.
//!
//! Requests without `Origin` (the CLI, `curl`, scripts) are not affected beyond the
//! `Content-Type`. Then the token (`rest.token`): every request but the dashboard's static
//! files must carry it, reads too unless `rest.read-without-token` (401 otherwise), before a
//! standby redirects anything.

use std::future::Future as _;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::HttpMessage as _;
use actix_web::body::MessageBody;
use actix_web::dev::{Payload, ServiceRequest, ServiceResponse};
use actix_web::error::PayloadError;
use actix_web::http::Method;
use actix_web::http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderMap, ORIGIN};
use actix_web::middleware::Next;
use actix_web::web;
use bytes::Bytes;
use futures_util::Stream;

use super::RestState;
use super::error::ApiError;

/// How long a request's body may take to arrive, from the moment the request reached the
/// handlers: ample for a 16 MiB job graph on any real link.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Which names a client may address this server by.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts {
    /// The address the server is bound to.
    bound: Option<SocketAddr>,
    /// Names (lower case, without port): `rest.address`, `rest.allowed-hosts`, and `localhost`
    /// on a loopback address.
    names: Vec<String>,
}

impl AllowedHosts {
    /// The names of a server bound to `bound` as `rest.address` = `address`, plus `extra`
    /// (`rest.allowed-hosts`).
    pub fn new(bound: SocketAddr, address: &str, extra: &[String]) -> Self {
        let mut names: Vec<String> = extra
            .iter()
            .chain(std::iter::once(&address.to_owned()))
            .map(|name| host_part(name).to_ascii_lowercase())
            .collect();
        if bound.ip().is_loopback() {
            names.push("localhost".to_owned());
        }
        names.sort();
        names.dedup();
        Self {
            bound: Some(bound),
            names,
        }
    }

    /// Whether a request whose `Host` is `host` is meant for this server.
    fn allows(&self, host: &str) -> bool {
        let name = host_part(host);
        if let Ok(ip) = name.parse::<IpAddr>() {
            // An IP literal cannot be rebound; a request to it is for whoever listens there.
            return self.bound.is_none_or(|bound| {
                bound.ip().is_unspecified() || bound.ip() == ip || ip.is_loopback()
            });
        }
        let name = name.to_ascii_lowercase();
        self.names.contains(&name)
    }
}

/// The host of `host[:port]` or `[v6][:port]`, without the port or brackets.
fn host_part(host: &str) -> &str {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        // One colon: host:port. More: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// Whether a request needs the token: all but the dashboard's static files, and reads when
/// `read_open` (`rest.read-without-token`).
fn needs_token(method: &Method, path: &str, read_open: bool) -> bool {
    let read = matches!(*method, Method::GET | Method::HEAD);
    !(read && (read_open || super::dashboard::is_asset(path)))
}

/// Whether `method` changes something (and so must not come from another site).
fn is_changing(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether a request with `method` and `headers` has a body.
fn has_body(method: &Method, headers: &HeaderMap) -> bool {
    matches!(*method, Method::POST | Method::PUT | Method::PATCH)
        || headers
            .get(CONTENT_LENGTH)
            .and_then(|length| length.to_str().ok())
            .and_then(|length| length.trim().parse::<u64>().ok())
            .is_some_and(|length| length > 0)
}

/// Whether `content_type` is raw bytes (`application/octet-stream`, any parameters).
fn is_bytes(content_type: &str) -> bool {
    (content_type.split(';').next().unwrap_or("").trim())
        .eq_ignore_ascii_case("application/octet-stream")
}

/// Whether `content_type` is JSON (`application/json`, or `application/*+json`, any
/// parameters).
fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Checks a request's `Host`, `Origin` and `Content-Type` (see the module docs).
pub fn check(
    allowed: &AllowedHosts,
    method: &Method,
    host: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if let Some(host) = host
        && !allowed.allows(host)
    {
        return Err(ApiError::ForeignHost {
            host: host.to_owned(),
        });
    }
    if is_changing(method)
        && let Some(origin) = headers.get(ORIGIN)
    {
        let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        // Same origin: the page was served by the host this request is addressed to.
        let same = origin
            .split_once("://")
            .map(|(_, authority)| authority.trim_end_matches('/'))
            .zip(host)
            .is_some_and(|(authority, host)| authority.eq_ignore_ascii_case(host.trim()));
        if !same {
            return Err(ApiError::ForeignOrigin { origin });
        }
    }
    if has_body(method, headers) {
        let content_type = headers
            .get(CONTENT_TYPE)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        if !content_type
            .as_deref()
            .is_some_and(|t| is_json(t) || is_bytes(t))
        {
            return Err(ApiError::UnsupportedMediaType { content_type });
        }
    }
    Ok(())
}

/// The middleware: [`check`], then the body deadline. Installed around every route by
/// [`RestListener::serve`](super::RestListener::serve).
pub async fn guard(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let (allowed, body_timeout) = req
        .app_data::<web::Data<RestState>>()
        .map(|state| (state.allowed_hosts.clone(), state.body_timeout))
        .unwrap_or_else(|| (AllowedHosts::default(), DEFAULT_BODY_TIMEOUT));
    let host = req
        .headers()
        .get(HOST)
        .and_then(|host| host.to_str().ok())
        .map(str::to_owned)
        .or_else(|| req.uri().authority().map(|a| a.as_str().to_owned()));
    if let Err(error) = check(&allowed, req.method(), host.as_deref(), req.headers()) {
        log::debug!("REST: refused {} {}: {error}", req.method(), req.path());
        return Ok(req.error_response(error).map_into_right_body());
    }
    if let Some(state) = req.app_data::<web::Data<RestState>>()
        && needs_token(req.method(), req.path(), state.read_open)
        && let Err(error) = super::auth::check(
            state.token.as_ref(),
            req.headers().get(actix_web::http::header::AUTHORIZATION),
        )
    {
        log::debug!("REST: refused {} {}: {error}", req.method(), req.path());
        return Ok(req
            .error_response(ApiError::Unauthorized(error))
            .map_into_right_body());
    }
    // High availability: a standby points every request at the leader.
    let route = req
        .app_data::<web::Data<RestState>>()
        .and_then(|state| state.leader.as_ref())
        .map(|switch| {
            let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
            switch.route(target)
        });
    match route {
        None | Some(super::leader::Route::Serve) => {}
        Some(super::leader::Route::Redirect(location)) => {
            log::debug!("REST: standby redirects {} to {location}", req.method());
            let response = actix_web::HttpResponse::TemporaryRedirect()
                .insert_header((actix_web::http::header::LOCATION, location))
                .finish();
            return Ok(req.into_response(response).map_into_right_body());
        }
        Some(super::leader::Route::NoLeader) => {
            return Ok(req
                .error_response(super::ApiError::NoLeader)
                .map_into_right_body());
        }
    }
    let payload = req.take_payload();
    let per_chunk = req.method() == Method::POST && req.path() == "/artifacts";
    req.set_payload(Payload::Stream {
        payload: Box::pin(Deadline {
            inner: payload,
            sleep: Box::pin(tokio::time::sleep(body_timeout)),
            after: body_timeout,
            per_chunk,
            expired: false,
        }),
    });
    next.call(req)
        .await
        .map(ServiceResponse::map_into_left_body)
}

/// A request body that fails with a timed-out I/O error once its deadline has passed
/// ([`ApiError::from_json`] answers it with 408).
struct Deadline {
    inner: Payload,
    sleep: Pin<Box<tokio::time::Sleep>>,
    after: Duration,
    /// The deadline restarts with every chunk (an upload: only a stall is cut off).
    per_chunk: bool,
    expired: bool,
}

impl Stream for Deadline {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.expired {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = Pin::new(&mut self.inner).poll_next(cx) {
            if self.per_chunk && matches!(item, Some(Ok(_))) {
                let next = tokio::time::Instant::now() + self.after;
                self.sleep.as_mut().reset(next);
            }
            return Poll::Ready(item);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.expired = true;
                Poll::Ready(Some(Err(PayloadError::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    BodyTimedOut(self.after),
                )))))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The error inside the timed-out payload error, so the 408 can say how long was allowed.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderName, HeaderValue};

    use super::*;

    /// Header name and value pairs.
    type Pairs<'a> = &'a [(&'static str, &'a str)];

    fn headers(pairs: Pairs<'_>) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn loopback() -> AllowedHosts {
        AllowedHosts::new(
            "127.0.0.1:8081".parse().unwrap(),
            "127.0.0.1",
            &["flint.example".to_owned()],
        )
    }

    #[test]
    fn only_this_servers_names_are_served() {
        let allowed = loopback();
        for host in [
            "127.0.0.1:8081",
            "127.0.0.1",
            "localhost:8081",
            "LOCALHOST",
            "flint.example",
            "flint.example:443",
            "[::1]:8081",
        ] {
            assert!(allowed.allows(host), "{host}");
        }
        for host in [
            "rebind.evil.example",
            "rebind.evil.example:8081",
            "flint.example.evil",
            "10.0.0.5:8081",
            "",
        ] {
            assert!(!allowed.allows(host), "{host}");
        }
        // A wildcard bind serves any IP literal, and names only if listed.
        let wildcard = AllowedHosts::new("0.0.0.0:8081".parse().unwrap(), "0.0.0.0", &[]);
        assert!(wildcard.allows("10.0.0.5:8081"));
        assert!(!wildcard.allows("localhost:8081"));
        assert!(!wildcard.allows("rebind.evil.example"));
    }

    #[test]
    fn a_changing_request_from_another_site_is_refused() {
        let allowed = loopback();
        let host = Some("127.0.0.1:8081");
        let json = ("content-type", "application/json");
        let cases: [(Pairs<'_>, Method, bool); 10] = [
            (&[json], Method::POST, true),
            (
                &[("content-type", "application/octet-stream")],
                Method::POST,
                true,
            ),
            (
                &[
                    ("content-type", "application/octet-stream"),
                    ("origin", "http://evil.example"),
                ],
                Method::POST,
                false,
            ),
            (
                &[json, ("origin", "http://127.0.0.1:8081")],
                Method::POST,
                true,
            ),
            (
                &[json, ("origin", "http://evil.example")],
                Method::POST,
                false,
            ),
            (&[("origin", "null")], Method::DELETE, false),
            (&[("origin", "http://evil.example")], Method::GET, true),
            (&[("content-type", "text/plain")], Method::POST, false),
            (
                &[("content-type", "application/x-www-form-urlencoded")],
                Method::PUT,
                false,
            ),
            (&[], Method::POST, false),
        ];
        for (pairs, method, passes) in cases {
            let result = check(&allowed, &method, host, &headers(pairs));
            assert_eq!(result.is_ok(), passes, "{method} {pairs:?}: {result:?}");
        }
        assert!(matches!(
            check(
                &allowed,
                &Method::POST,
                host,
                &headers(&[("content-type", "text/plain")])
            ),
            Err(ApiError::UnsupportedMediaType { .. })
        ));
        assert!(matches!(
            check(
                &allowed,
                &Method::GET,
                Some("rebind.evil.example"),
                &HeaderMap::new()
            ),
            Err(ApiError::ForeignHost { .. })
        ));
        assert!(is_json("application/json; charset=utf-8"));
        assert!(is_json("application/vnd.flint+json"));
        assert!(!is_json("text/json"));
        assert!(check(&allowed, &Method::DELETE, host, &HeaderMap::new()).is_ok());
    }

    #[test]
    fn every_request_but_the_pages_own_files_needs_the_token_unless_reads_are_opened() {
        for (method, path, read_open, needs) in [
            (Method::GET, "/jobs", false, true),
            (Method::GET, "/metrics", false, true),
            (Method::HEAD, "/overview", false, true),
            (Method::GET, "/", false, false),
            (Method::GET, "/dashboard.js", false, false),
            (Method::POST, "/", false, true),
            (Method::GET, "/jobs", true, false),
            (Method::DELETE, "/jobs/x", true, true),
            (Method::PUT, "/cluster/pool-size", true, true),
            (Method::OPTIONS, "/jobs", true, true),
        ] {
            assert_eq!(
                needs_token(&method, path, read_open),
                needs,
                "{method} {path} (reads open: {read_open})"
            );
        }
    }
}
