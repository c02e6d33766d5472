//! The web dashboard at `/`: one page of static HTML, CSS and plain JavaScript compiled into the
//! binary (`include_str!`), so there is no build step, nothing to install next to `flint` and
//! nothing fetched from another origin (no CDN, no web fonts).
//!
//! The page is a client of the REST API (docs/rest.md) like `curl` or `flint list`: it polls
//! `GET /overview`, `GET /taskmanagers`, `GET /jobs` and `GET /jobs/{id}` every second and
//! changes things only through `PUT /cluster/pool-size` and `DELETE /jobs/{id}`, every request
//! with the bearer token: the one in the page's URL fragment (`/#token=...`, never sent to the
//! server and removed from the address bar at once), else the one the user types when the
//! server answers 401. This module only serves the three files; it
//! must never compute cluster state itself, so the page can show nothing the API does not.
//!
//! Every file is sent with `Cache-Control: no-cache` (a browser revalidates instead of running a
//! stale page against a newer server) and `X-Content-Type-Options: nosniff`. The page itself
//! carries a strict Content-Security-Policy: scripts, styles and requests from this origin only,
//! no inline script or style, no framing (the page has buttons that change the cluster).

use actix_web::http::header;
use actix_web::{HttpResponse, web};

/// One file of the page, served at a fixed path.
struct Asset {
    /// The URL path (also what `index.html` refers to).
    path: &'static str,
    /// Its `Content-Type`.
    content_type: &'static str,
    /// The file, compiled in.
    body: &'static str,
}

/// The page and the files it loads. `index.html` names the other two by these paths.
const ASSETS: [Asset; 3] = [
    Asset {
        path: "/",
        content_type: "text/html; charset=utf-8",
        body: include_str!("dashboard/index.html"),
    },
    Asset {
        path: "/dashboard.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("dashboard/dashboard.css"),
    },
    Asset {
        path: "/dashboard.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("dashboard/dashboard.js"),
    },
];

/// The page's policy: its own script, style and API only. `img-src data:` is for the inline
/// favicon; `form-action 'none'` because the page's forms are handled by its script and never
/// navigate.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is one of the page's own files: static, the same for everyone, so served
/// without the token (the page then asks for it, or takes it from `#token=` in its URL).
pub fn is_asset(path: &str) -> bool {
    ASSETS.iter().any(|asset| asset.path == path)
}

/// Adds the dashboard's routes (`GET`/`HEAD` of `/`, `/dashboard.css`, `/dashboard.js`; other
/// methods get the API's JSON 405) to the REST server's app.
pub fn configure(cfg: &mut web::ServiceConfig) {
    for asset in &ASSETS {
        let serve = move || async move { response(asset) };
        cfg.service(
            super::resource(asset.path, "GET, HEAD")
                .route(web::get().to(serve))
                .route(web::head().to(serve)),
        );
    }
}

/// The file with its headers (actix-web drops the body of a `HEAD` answer).
fn response(asset: &'static Asset) -> HttpResponse {
    let mut answer = HttpResponse::Ok();
    answer
        .content_type(asset.content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"));
    if asset.content_type.starts_with("text/html") {
        answer.insert_header((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY));
    }
    answer.body(asset.body)
}

#[cfg(test)]
mod tests {
    use actix_web::http::{Method, StatusCode, header};
    use actix_web::{App, test};

    use super::{ASSETS, configure};

    fn file(path: &str) -> &'static str {
        ASSETS
            .iter()
            .find(|asset| asset.path == path)
            .map(|asset| asset.body)
            .expect("a served file")
    }

    #[actix::test]
    async fn every_file_is_served_with_its_type_and_no_cache() {
        let app = test::init_service(App::new().configure(configure)).await;
        for (path, content_type) in [
            ("/", "text/html; charset=utf-8"),
            ("/dashboard.css", "text/css; charset=utf-8"),
            ("/dashboard.js", "text/javascript; charset=utf-8"),
        ] {
            let request = test::TestRequest::get().uri(path).to_request();
            let answer = test::call_service(&app, request).await;
            assert_eq!(answer.status(), StatusCode::OK, "{path}");
            let headers = answer.headers().clone();
            let value = |name| headers.get(name).and_then(|v| v.to_str().ok());
            assert_eq!(value(header::CONTENT_TYPE), Some(content_type), "{path}");
            assert_eq!(value(header::CACHE_CONTROL), Some("no-cache"), "{path}");
            assert_eq!(
                value(header::X_CONTENT_TYPE_OPTIONS),
                Some("nosniff"),
                "{path}"
            );
            assert_eq!(
                headers.contains_key(header::CONTENT_SECURITY_POLICY),
                path == "/",
                "{path}: only the page carries the policy"
            );
            let body = test::read_body(answer).await;
            assert_eq!(body, file(path).as_bytes(), "{path}");
        }
    }

    #[actix::test]
    async fn head_answers_without_a_body_and_other_methods_are_refused() {
        let app = test::init_service(App::new().configure(configure)).await;
        let request = test::TestRequest::default()
            .method(Method::HEAD)
            .uri("/dashboard.js")
            .to_request();
        let answer = test::call_service(&app, request).await;
        assert_eq!(answer.status(), StatusCode::OK);
        assert_eq!(
            answer.headers().get(header::CONTENT_TYPE).unwrap(),
            "text/javascript; charset=utf-8"
        );

        let request = test::TestRequest::post().uri("/").to_request();
        let answer = test::call_service(&app, request).await;
        assert_eq!(answer.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(answer.headers().get(header::ALLOW).unwrap(), "GET, HEAD");
        let body: serde_json::Value = test::read_body_json(answer).await;
        assert_eq!(body["status"], 405, "{body}");
    }

    /// The page loads nothing from elsewhere: every `src`/`href` is one of the served files, an
    /// anchor on the page or an inline `data:` icon, and no file names another origin.
    #[test]
    fn the_page_loads_only_its_own_files() {
        let page = file("/");
        for attribute in ["src=\"", "href=\""] {
            for reference in page.split(attribute).skip(1) {
                let target = &reference[..reference.find('"').expect("a closing quote")];
                let ok = target.starts_with('#')
                    || target.starts_with("data:")
                    || ASSETS.iter().any(|asset| asset.path == target);
                assert!(
                    ok,
                    "index.html refers to {target}, which is not served here"
                );
            }
        }
        for asset in &ASSETS {
            for scheme in ["http:", "https:", "//fonts", "@import"] {
                let found = asset
                    .body
                    .match_indices(scheme)
                    // The SVG namespace of the inline favicon is a name, not a request.
                    .filter(|(i, _)| !asset.body[*i..].starts_with("http://www.w3.org/2000/svg"))
                    .count();
                assert_eq!(found, 0, "{} mentions {scheme}", asset.path);
            }
        }
    }

    /// Every element the script looks up by id (`$('id')`) exists in the page, so a renamed id
    /// cannot silently break a part of the dashboard.
    #[test]
    fn every_id_the_script_uses_is_in_the_page() {
        let page = file("/");
        let script = file("/dashboard.js");
        let mut ids = 0;
        for lookup in script.split("$('").skip(1) {
            let id = &lookup[..lookup.find('\'').expect("a closing quote")];
            assert!(
                page.contains(&format!("id=\"{id}\"")),
                "dashboard.js uses #{id}, index.html has no such element"
            );
            ids += 1;
        }
        assert!(
            ids > 20,
            "only {ids} lookups found: has the script changed its helper?"
        );
    }
}
