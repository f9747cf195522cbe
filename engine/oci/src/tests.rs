//! The client against a small registry served from the test on
//! 127.0.0.1:0: what a real registry answers, and what a broken or
//! hostile one might.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::artifact::{INDEX, MANIFEST, WASM_CONFIG, WASM_LAYER};
use crate::{Credentials, OciError, Options, PullPolicy, Reference, Registry, sha256};

/// How the fake registry asks for credentials.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Auth {
    None,
    /// Basic auth with `ci:s3cret`.
    Basic,
    /// `distribution`'s token flow: a bearer challenge naming `/token` on
    /// the same host, which takes `ci:s3cret` and answers a token.
    Bearer,
}

#[derive(Default)]
struct Content {
    /// By path: `/v2/<repo>/manifests/<ref>` and `/v2/<repo>/blobs/<digest>`.
    objects: HashMap<String, (String, Vec<u8>)>,
    /// Every request's method and path, in order.
    log: Vec<String>,
}

#[derive(Clone)]
struct Fake {
    auth: Auth,
    delay: Duration,
    content: Arc<Mutex<Content>>,
    addr: SocketAddr,
}

const BASIC: &str = "Basic Y2k6czNjcmV0";
const TOKEN: &str = "Bearer tok-123";

impl Fake {
    async fn start(auth: Auth) -> Self {
        Self::start_slow(auth, Duration::ZERO).await
    }

    async fn start_slow(auth: Auth, delay: Duration) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let fake = Self { auth, delay, content: Arc::default(), addr };
        let state = fake.clone();
        let app = axum::Router::new().fallback(move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
            let state = state.clone();
            async move { state.handle(method, uri, headers, body).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        fake
    }

    fn registry(&self) -> String {
        self.addr.to_string()
    }

    fn put(&self, path: &str, media: &str, bytes: Vec<u8>) {
        self.content.lock().unwrap().objects.insert(path.to_owned(), (media.to_owned(), bytes));
    }

    fn requests(&self) -> Vec<String> {
        self.content.lock().unwrap().log.clone()
    }

    /// Stores a Wasm artifact of `wasm` as `repo:tag` with `layers`
    /// layer descriptors (the real one first) and answers the manifest's
    /// digest.
    fn artifact(&self, repo: &str, tag: &str, wasm: &[u8], layer_media: &str, extra_layers: usize) -> String {
        let layer = json!({ "mediaType": layer_media, "digest": sha256(wasm), "size": wasm.len() });
        let mut layers = vec![layer.clone()];
        layers.extend(std::iter::repeat_n(layer, extra_layers));
        let config = b"{}".to_vec();
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": { "mediaType": WASM_CONFIG, "digest": sha256(&config), "size": config.len() },
            "layers": layers,
        }))
        .unwrap();
        let digest = sha256(&manifest);
        self.put(&format!("/v2/{repo}/blobs/{}", sha256(wasm)), "application/octet-stream", wasm.to_vec());
        self.put(&format!("/v2/{repo}/manifests/{tag}"), MANIFEST, manifest.clone());
        self.put(&format!("/v2/{repo}/manifests/{digest}"), MANIFEST, manifest);
        digest
    }

    async fn handle(&self, method: Method, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
        self.content.lock().unwrap().log.push(format!("{method} {}", uri.path()));
        // A slow registry, as a test asks for.
        tokio::time::sleep(self.delay).await;
        let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
        if uri.path() == "/token" {
            return if auth == BASIC {
                axum::Json(json!({ "token": "tok-123" })).into_response()
            } else {
                (StatusCode::UNAUTHORIZED, "bad credentials").into_response()
            };
        }
        let challenge = match self.auth {
            Auth::None => None,
            Auth::Basic => (auth != BASIC).then(|| r#"Basic realm="fake""#.to_owned()),
            Auth::Bearer => (auth != TOKEN).then(|| {
                format!(
                    r#"Bearer realm="http://{}/token",service="fake",scope="repository:team/agent:pull""#,
                    self.addr
                )
            }),
        };
        if let Some(challenge) = challenge {
            let body = json!({ "errors": [{ "code": "UNAUTHORIZED", "message": "authentication required" }] });
            return (StatusCode::UNAUTHORIZED, [("www-authenticate", challenge)], axum::Json(body)).into_response();
        }
        let path = uri.path().to_owned();
        match method {
            Method::GET | Method::HEAD => match self.content.lock().unwrap().objects.get(&path) {
                Some((media, bytes)) => ([("content-type", media.clone())], bytes.clone()).into_response(),
                None => (
                    StatusCode::NOT_FOUND,
                    axum::Json(json!({ "errors": [{ "code": "MANIFEST_UNKNOWN", "message": "unknown" }] })),
                )
                    .into_response(),
            },
            Method::POST if path.ends_with("/blobs/uploads/") => {
                let location = format!("{path}upload-1");
                (StatusCode::ACCEPTED, [("location", location)]).into_response()
            }
            Method::PUT if path.contains("/blobs/uploads/") => {
                let digest =
                    uri.query().and_then(|q| q.strip_prefix("digest=")).unwrap_or_default().replace("%3A", ":");
                if sha256(&body) != digest {
                    return (StatusCode::BAD_REQUEST, "digest mismatch").into_response();
                }
                let repo = path.trim_start_matches("/v2/").split("/blobs/").next().unwrap_or_default().to_owned();
                self.put(&format!("/v2/{repo}/blobs/{digest}"), "application/octet-stream", body.to_vec());
                StatusCode::CREATED.into_response()
            }
            Method::PUT if path.contains("/manifests/") => {
                let media = headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
                let digest = sha256(&body);
                let repo = path.trim_start_matches("/v2/").split("/manifests/").next().unwrap_or_default().to_owned();
                self.put(&path, &media, body.to_vec());
                self.put(&format!("/v2/{repo}/manifests/{digest}"), &media, body.to_vec());
                (StatusCode::CREATED, [("docker-content-digest", digest)]).into_response()
            }
            _ => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        }
    }
}

fn options(credentials: Option<Credentials>) -> Options {
    Options { plain_http: true, credentials, max_bytes: 1 << 20, deadline: Duration::from_secs(5) }
}

fn ci() -> Option<Credentials> {
    Some(Credentials::Basic { username: "ci".into(), password: "s3cret".into() })
}

/// A small component (an empty one) and a distinct payload of `n` bytes
/// after its header: what the registry keeps is only bytes.
fn wasm(n: usize) -> Vec<u8> {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    bytes.resize(8 + n, 7);
    bytes
}

async fn pull(fake: &Fake, reference: &str, credentials: Option<Credentials>) -> Result<crate::Pulled, OciError> {
    let reference = Reference::parse(&format!("{}/{reference}", fake.registry())).unwrap();
    Registry::new(&fake.registry(), options(credentials)).unwrap().pull(&reference).await
}

#[tokio::test]
async fn a_push_pulls_back_by_tag_and_by_digest_with_either_auth_flow() {
    for auth in [Auth::None, Auth::Basic, Auth::Bearer] {
        let fake = Fake::start(auth).await;
        let bytes = wasm(100);
        let reference = Reference::parse(&format!("{}/team/agent:v1", fake.registry())).unwrap();
        let registry = Registry::new(&fake.registry(), options(ci())).unwrap();
        let pushed = registry.push(&reference, &bytes).await.unwrap();
        let by_tag = pull(&fake, "team/agent:v1", ci()).await.unwrap();
        assert_eq!(
            (by_tag.wasm.as_slice(), by_tag.manifest_digest.as_str()),
            (bytes.as_slice(), pushed.manifest_digest.as_str())
        );
        let by_digest = pull(&fake, &format!("team/agent@{}", pushed.manifest_digest), ci()).await.unwrap();
        assert_eq!(by_digest.wasm, bytes);
        // What was pushed is the CNCF layout.
        let manifest =
            &fake.content.lock().unwrap().objects[&format!("/v2/team/agent/manifests/{}", pushed.manifest_digest)];
        let manifest: serde_json::Value = serde_json::from_slice(&manifest.1).unwrap();
        assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG);
        assert_eq!(manifest["layers"][0]["mediaType"], WASM_LAYER);
        assert_eq!(manifest["layers"].as_array().unwrap().len(), 1);
    }
}

#[tokio::test]
async fn wrong_or_missing_credentials_are_a_clear_refusal_naming_the_registry() {
    for auth in [Auth::Basic, Auth::Bearer] {
        let fake = Fake::start(auth).await;
        fake.artifact("team/agent", "v1", &wasm(10), WASM_LAYER, 0);
        let wrong = Some(Credentials::Basic { username: "ci".into(), password: "nope".into() });
        for credentials in [wrong, None] {
            let error = pull(&fake, "team/agent:v1", credentials).await.unwrap_err();
            assert!(matches!(error, OciError::Unauthorized { .. }), "{error}");
            let text = error.to_string();
            assert!(
                text.contains(&format!("registry `{}`", fake.registry())) && text.contains("team/agent:v1"),
                "{text}"
            );
        }
    }
}

#[tokio::test]
async fn an_index_is_followed_to_its_wasm_entry_or_refused_naming_its_platforms() {
    let fake = Fake::start(Auth::None).await;
    let bytes = wasm(20);
    let digest = fake.artifact("team/agent", "inner", &bytes, WASM_LAYER, 0);
    let size = fake.content.lock().unwrap().objects[&format!("/v2/team/agent/manifests/{digest}")].1.len();
    let entry = |arch: &str, os: &str| json!({ "mediaType": MANIFEST, "digest": digest, "size": size, "platform": { "architecture": arch, "os": os } });
    let with = serde_json::to_vec(&json!({ "schemaVersion": 2, "mediaType": INDEX, "manifests": [entry("amd64", "linux"), entry("wasm", "wasip2")] })).unwrap();
    fake.put("/v2/team/agent/manifests/multi", INDEX, with);
    let pulled = pull(&fake, "team/agent:multi", None).await.unwrap();
    assert_eq!(
        (pulled.wasm, pulled.manifest_digest),
        (bytes, digest.clone()),
        "the wasm entry's manifest is the version's"
    );

    let without = serde_json::to_vec(&json!({ "schemaVersion": 2, "mediaType": INDEX, "manifests": [entry("amd64", "linux"), entry("arm64", "linux")] })).unwrap();
    fake.put("/v2/team/agent/manifests/images", INDEX, without);
    let error = pull(&fake, "team/agent:images", None).await.unwrap_err().to_string();
    assert!(
        error.contains("no wasm platform entry")
            && error.contains("linux/amd64, linux/arm64")
            && error.contains("team/agent:images"),
        "{error}"
    );
}

#[tokio::test]
async fn several_layers_or_another_media_type_are_not_a_wasm_artifact() {
    let fake = Fake::start(Auth::None).await;
    fake.artifact("team/agent", "two", &wasm(5), WASM_LAYER, 1);
    let error = pull(&fake, "team/agent:two", None).await.unwrap_err().to_string();
    assert!(error.contains("has 2 layers") && error.contains("team/agent:two"), "{error}");
    fake.artifact("team/agent", "image", &wasm(5), "application/vnd.oci.image.layer.v1.tar+gzip", 0);
    let error = pull(&fake, "team/agent:image", None).await.unwrap_err().to_string();
    assert!(
        error.contains("application/vnd.oci.image.layer.v1.tar+gzip") && error.contains("not a wasm artifact"),
        "{error}"
    );
}

#[tokio::test]
async fn a_tampered_layer_or_manifest_is_refused() {
    let fake = Fake::start(Auth::None).await;
    let bytes = wasm(50);
    let digest = fake.artifact("team/agent", "v1", &bytes, WASM_LAYER, 0);
    // The registry serves other bytes of the same length under the layer's digest.
    let mut tampered = bytes.clone();
    tampered[20] ^= 1;
    fake.put(&format!("/v2/team/agent/blobs/{}", sha256(&bytes)), "application/octet-stream", tampered);
    let error = pull(&fake, "team/agent:v1", None).await.unwrap_err();
    assert!(matches!(&error, OciError::Digest { what, .. } if what == "the wasm layer"), "{error}");
    // And another manifest under a pinned digest.
    let manifest = format!("/v2/team/agent/manifests/{digest}");
    let mut other = fake.content.lock().unwrap().objects[&manifest].1.clone();
    other.push(b' ');
    fake.put(&manifest, MANIFEST, other);
    let error = pull(&fake, &format!("team/agent@{digest}"), None).await.unwrap_err();
    assert!(matches!(&error, OciError::Digest { what, .. } if what == "the manifest"), "{error}");
}

#[tokio::test]
async fn layers_and_manifests_past_the_limit_are_refused_before_they_are_read() {
    let fake = Fake::start(Auth::None).await;
    fake.artifact("team/agent", "big", &wasm(2 << 20), WASM_LAYER, 0);
    let error = pull(&fake, "team/agent:big", None).await.unwrap_err();
    assert!(matches!(&error, OciError::TooLarge { what, limit: 1_048_576, .. } if what == "the wasm layer"), "{error}");
    assert!(!fake.requests().iter().any(|r| r.contains("/blobs/")), "the layer was never asked for");
    fake.put("/v2/team/agent/manifests/huge", MANIFEST, vec![b' '; 2 << 20]);
    let error = pull(&fake, "team/agent:huge", None).await.unwrap_err();
    assert!(matches!(&error, OciError::TooLarge { what, .. } if what == "the manifest"), "{error}");
}

#[tokio::test]
async fn a_slow_registry_meets_the_deadline() {
    let fake = Fake::start_slow(Auth::None, Duration::from_secs(30)).await;
    let reference = Reference::parse(&format!("{}/team/agent:v1", fake.registry())).unwrap();
    let options = Options { deadline: Duration::from_millis(300), ..options(None) };
    let started = std::time::Instant::now();
    let error = Registry::new(&fake.registry(), options).unwrap().pull(&reference).await.unwrap_err();
    assert!(matches!(error, OciError::Deadline { .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(error.to_string().contains("team/agent:v1"));
}

#[tokio::test]
async fn a_registry_off_the_allow_list_is_refused_before_any_connection() {
    let fake = Fake::start(Auth::None).await;
    fake.artifact("team/agent", "v1", &wasm(5), WASM_LAYER, 0);
    let policy = PullPolicy {
        allow_registries: vec!["ghcr.io".into()],
        insecure: vec![fake.registry()],
        ..PullPolicy::default()
    };
    let error = policy.pull(&format!("{}/team/agent:v1", fake.registry()), 1 << 20).await.unwrap_err();
    assert!(matches!(error, OciError::NotAllowed { .. }), "{error}");
    assert!(fake.requests().is_empty(), "nothing was sent: {:?}", fake.requests());
    let allowed = PullPolicy { allow_registries: vec![fake.registry()], ..policy };
    allowed.pull(&format!("{}/team/agent:v1", fake.registry()), 1 << 20).await.unwrap();
    // As the CLI writes references, too.
    allowed.pull(&format!("oci://{}/team/agent:v1", fake.registry()), 1 << 20).await.unwrap();
}

#[tokio::test]
async fn credentials_are_not_sent_to_a_token_service_on_another_host() {
    // The challenge names a realm on another port of loopback: another
    // host as far as credentials go. It is asked without them.
    let fake = Fake::start(Auth::None).await;
    let other = Fake::start(Auth::None).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let realm = format!("http://{}/token", other.addr);
    let app = axum::Router::new().fallback(move || {
        let realm = realm.clone();
        async move {
            (StatusCode::UNAUTHORIZED, [("www-authenticate", format!(r#"Bearer realm="{realm}""#))]).into_response()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let reference = Reference::parse(&format!("{addr}/team/agent:v1")).unwrap();
    let error = Registry::new(&addr.to_string(), options(ci())).unwrap().pull(&reference).await.unwrap_err();
    // The realm is plain HTTP on another host: refused outright.
    assert!(error.to_string().contains("is not HTTPS"), "{error}");
    assert!(other.requests().is_empty());
    drop(fake);
}
