//! The web inspector: a page and its scripts, embedded in the binary and
//! served at `/ui` (docs/inspector.md).
//!
//! The page is public — it holds no data. Everything it shows it fetches
//! from the API with the key (or end-user token) the user gives it, so a
//! tenant sees through it exactly what its key reaches. The assets are
//! compiled in with `include_str!`: no file is read at run time, nothing
//! is fetched from the network, and there is no build step but `cargo
//! build`. Every answer carries a strict Content-Security-Policy (scripts
//! and styles from this origin only, nothing inline) and an `ETag`, so a
//! browser revalidates instead of downloading again.

use std::sync::OnceLock;

use axum::Router;
use axum::extract::Path;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};

use crate::error::ApiError;

/// Where the inspector is served.
pub const PATH: &str = "/ui";

/// What the page may load and do: scripts, styles, images and requests
/// to this origin only, nothing inline, no frames, no forms posted
/// elsewhere.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' \
                                           data:; connect-src 'self'; base-uri 'none'; form-action 'none'; \
                                           frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    /// Its name under `/ui/`.
    name: &'static str,
    /// Its media type.
    content_type: &'static str,
    /// Its bytes.
    body: &'static str,
}

/// Every file of the inspector: the page, its style sheet and its
/// modules (plain ES modules, no bundler).
const ASSETS: &[Asset] = &[
    Asset { name: "index.html", content_type: "text/html; charset=utf-8", body: include_str!("../ui/index.html") },
    Asset { name: "style.css", content_type: "text/css; charset=utf-8", body: include_str!("../ui/style.css") },
    js("app.js", include_str!("../ui/app.js")),
    js("api.js", include_str!("../ui/api.js")),
    js("dom.js", include_str!("../ui/dom.js")),
    js("sessions.js", include_str!("../ui/sessions.js")),
    js("session.js", include_str!("../ui/session.js")),
    js("decisions.js", include_str!("../ui/decisions.js")),
    js("agents.js", include_str!("../ui/agents.js")),
];

const fn js(name: &'static str, body: &'static str) -> Asset {
    Asset { name, content_type: "text/javascript; charset=utf-8", body }
}

/// The inspector's routes: `/` redirects to `/ui`, which serves the page;
/// `/ui/<file>` serves its assets. None takes a key.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::temporary(PATH) }))
        .route(PATH, get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route("/ui/", get(|headers: HeaderMap| async move { serve("index.html", &headers) }))
        .route("/ui/{file}", get(|Path(file): Path<String>, headers: HeaderMap| async move { serve(&file, &headers) }))
}

/// The total size of the inspector's files, in bytes: what a browser
/// downloads to show it.
pub fn page_weight() -> usize {
    ASSETS.iter().map(|a| a.body.len()).sum()
}

/// The asset `name` with its headers, `304` when the browser's copy is
/// current, or the API's `404`.
fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some((index, asset)) = ASSETS.iter().enumerate().find(|(_, a)| a.name == name) else {
        return ApiError::not_found(format!("the inspector has no file `{name}`")).into_response();
    };
    let etag = &etags()[index];
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    // Revalidate every time: the names carry no version, and a 304 costs
    // one round trip on loopback or a LAN.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    let current = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    if current {
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (headers, asset.body).into_response()
}

/// Each asset's `ETag`: a quoted prefix of its SHA-256, computed once.
fn etags() -> &'static [String] {
    static ETAGS: OnceLock<Vec<String>> = OnceLock::new();
    ETAGS.get_or_init(|| {
        ASSETS.iter().map(|a| format!("\"{}\"", &hex::encode(Sha256::digest(a.body.as_bytes()))[..20])).collect()
    })
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;

    async fn get(path: &str, headers: &[(&str, &str)]) -> (StatusCode, HeaderMap, String) {
        let mut request = Request::builder().uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = router::<()>().oneshot(request.body(Body::empty()).unwrap()).await.unwrap();
        let (parts, body) = response.into_parts();
        let body = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
        (parts.status, parts.headers, body)
    }

    #[tokio::test]
    async fn the_root_redirects_to_the_page() {
        let (status, headers, _) = get("/", &[]).await;
        assert_eq!(status, StatusCode::TEMPORARY_REDIRECT);
        assert_eq!(headers[header::LOCATION], "/ui");
    }

    #[tokio::test]
    async fn the_page_and_its_assets_are_served_with_their_types_and_policy() {
        for (path, media) in [
            ("/ui", "text/html"),
            ("/ui/", "text/html"),
            ("/ui/app.js", "text/javascript"),
            ("/ui/style.css", "text/css"),
        ] {
            let (status, headers, body) = get(path, &[]).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with(media), "{path}");
            assert_eq!(headers[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY);
            assert_eq!(headers[header::CACHE_CONTROL], "no-cache");
            assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert!(!body.is_empty());
            let etag = headers[header::ETAG].to_str().unwrap().to_owned();
            let (again, _, body) = get(path, &[("if-none-match", &etag)]).await;
            assert_eq!((again, body.as_str()), (StatusCode::NOT_MODIFIED, ""), "{path} revalidates");
        }
        let (status, headers, body) = get("/ui/nothing.js", &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(headers[header::CONTENT_TYPE].to_str().unwrap().starts_with("application/json"));
        assert!(body.contains("not_found"), "{body}");
    }

    #[test]
    fn the_page_is_light_and_runs_no_inline_script() {
        assert!(page_weight() < 300 * 1024, "{} bytes", page_weight());
        let index = ASSETS[0].body;
        for script in index.split("<script").skip(1) {
            assert!(script.split('>').next().unwrap().contains("src="), "an inline script: {script}");
        }
        let inline_handler = index.split(" on").skip(1).any(|rest| {
            let name: String = rest.chars().take_while(char::is_ascii_alphabetic).collect();
            !name.is_empty() && rest[name.len()..].starts_with('=')
        });
        assert!(!inline_handler, "an inline event handler");
        // The page renders what the API says with DOM calls and text,
        // never as markup.
        for asset in ASSETS {
            for forbidden in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
                assert!(!asset.body.contains(forbidden), "{} uses {forbidden}", asset.name);
            }
        }
    }
}
