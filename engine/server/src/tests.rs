//! The router, called in-process with `tower::ServiceExt::oneshot` (no
//! socket): every route's refusals of bad requests, on a `MemStore`.
//! What needs real HTTP (streams over a connection, uploads of real
//! components, several tenants at work) is tested over a real server in
//! `tests/all/api.rs` and `tests/all/security.rs`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use subs_engine::agents::AgentRegistry;
use subs_engine::store::{KeyRecord, MemStore};
use subs_engine::worker::component::ComponentHost;
use tower::ServiceExt as _;

use crate::auth::hash_key;
use crate::{ApiError, AppState, Keys, Limits, ServerConfig, app};

const KEY: &str = "subs_acme_key_0000000000000000";

/// State for one test: a fresh engine on a `MemStore`, one tenant key,
/// bodies up to 1 KiB. The directory holds uploads (none here). The store
/// is answered beside the state, which has none, for tests to look into.
fn state(dir: &tempfile::TempDir) -> (Arc<AppState>, Arc<dyn subs_engine::Store>) {
    let store: Arc<dyn subs_engine::Store> = Arc::new(MemStore::new());
    let engine = subs_engine::Engine::open(
        store.clone(),
        subs_engine::model::Models::with_offline(),
        subs_engine::EngineConfig::default(),
    );
    let host = ComponentHost::new().expect("a component host");
    let agents = AgentRegistry::new(engine.clone(), host, dir.path().to_path_buf());
    let keys = Keys::new([KeyRecord {
        tenant: "acme".to_owned(),
        hash: hash_key(KEY),
        prefix: KEY[..12].to_owned(),
        name: None,
        created_ms: 0,
    }]);
    let config = ServerConfig {
        default_limits: Limits { max_body_bytes: 1024, ..Limits::default() },
        ..ServerConfig::default()
    };
    (
        Arc::new(AppState {
            engine,
            agents,
            keys,
            config: config.into(),
            metrics: Default::default(),
            scans: Default::default(),
        }),
        store,
    )
}

/// Sends one request through the router; the status and the body as JSON.
async fn send(state: &Arc<AppState>, method: Method, path: &str, key: Option<&str>, body: &str) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path).header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let request = request.body(Body::from(body.to_owned())).expect("a request");
    let response = app(state.clone()).oneshot(request).await.expect("the router answers");
    let status = response.status();
    let bytes = response.into_body().collect().await.expect("the body").to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn code(answer: &Value) -> (&str, Option<&str>) {
    (answer["code"].as_str().unwrap_or_default(), answer["field"].as_str())
}

#[tokio::test]
async fn unknown_routes_and_sessions_are_404() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = state(&dir);
    let (status, answer) = send(&state, Method::GET, "/v1/nowhere", Some(KEY), "").await;
    assert_eq!((status, code(&answer).0), (StatusCode::NOT_FOUND, "not_found"), "{answer}");
    let (status, answer) = send(&state, Method::GET, "/v1/sessions/nobody", Some(KEY), "").await;
    assert_eq!((status, code(&answer).0), (StatusCode::NOT_FOUND, "not_found"), "{answer}");
    let (status, answer) = send(&state, Method::GET, "/v1/sessions/nobody/events", Some(KEY), "").await;
    assert_eq!((status, code(&answer).0), (StatusCode::NOT_FOUND, "not_found"), "{answer}");
}

#[tokio::test]
async fn requests_without_a_valid_key_are_401() {
    let dir = tempfile::tempdir().unwrap();
    let (state, _) = state(&dir);
    for key in [None, Some("subs_wrong_key_000000000000000")] {
        let (status, answer) = send(&state, Method::GET, "/v1/sessions", key, "").await;
        assert_eq!((status, code(&answer).0), (StatusCode::UNAUTHORIZED, "unauthorized"), "{key:?}: {answer}");
    }
    let (status, _) = send(&state, Method::GET, "/v1/sessions", Some(KEY), "").await;
    assert_eq!(status, StatusCode::OK);
}

/// Every route that takes a JSON body refuses what is not JSON, JSON of
/// the wrong shape (naming the field) and bodies over the bound, with
/// the documented codes, and stores nothing.
#[tokio::test]
async fn bad_bodies_get_the_documented_errors() {
    let dir = tempfile::tempdir().unwrap();
    let (state, store) = state(&dir);
    let routes = [
        (Method::POST, "/v1/sessions/s/input", r#"{"type": "client.message", "agent_id": "a"}"#, "message"),
        (Method::PUT, "/v1/sessions/s/budget", r#"{"budget": "lots"}"#, "budget"),
        (Method::PUT, "/v1/agents/a", r#"{"url": 7}"#, "url"),
    ];
    for (method, path, wrong_shape, field) in routes {
        let (status, answer) = send(&state, method.clone(), path, Some(KEY), "{not json").await;
        assert_eq!((status, code(&answer).0), (StatusCode::BAD_REQUEST, "invalid_json"), "{path}: {answer}");
        let (status, answer) = send(&state, method.clone(), path, Some(KEY), wrong_shape).await;
        assert_eq!(
            (status, code(&answer)),
            (StatusCode::BAD_REQUEST, ("invalid_input", Some(field))),
            "{path}: {answer}"
        );
        let big = format!(r#"{{"pad": "{}"}}"#, "x".repeat(2048));
        let (status, answer) = send(&state, method, path, Some(KEY), &big).await;
        assert_eq!((status, code(&answer).0), (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"), "{path}: {answer}");
    }
    assert!(store.sessions(None).await.unwrap().is_empty(), "nothing was stored");
    assert!(store.agents(None).await.unwrap().is_empty(), "nothing was stored");
}

/// Building the router reads the state and changes nothing: two routers
/// over one state answer alike.
#[tokio::test]
async fn building_the_router_twice_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (state, store) = state(&dir);
    let _first = app(state.clone());
    let _second = app(state.clone());
    let (status, answer) = send(&state, Method::GET, "/healthz", None, "").await;
    assert_eq!((status, answer), (StatusCode::OK, json!({"status": "ok"})));
    assert!(store.sessions(None).await.unwrap().is_empty());
}

/// The registry's refusals keep the statuses, codes, fields and words the
/// API answered when the registry was the server's own.
#[test]
fn agent_errors_answer_their_documented_status() {
    use subs_engine::agents::AgentError;
    use subs_engine::store::StoreError;
    use subs_engine::worker::component::LoadError;

    let cases = [
        (
            AgentError::Invalid { field: "url", message: "not a URL".to_owned() },
            (StatusCode::BAD_REQUEST, "invalid_input", Some("url"), "not a URL".to_owned()),
        ),
        (
            AgentError::InvalidComponent(LoadError::World("no decide".to_owned())),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_component",
                None,
                "the component does not fit the subs:agent world: no decide".to_owned(),
            ),
        ),
        (
            AgentError::UploadRate { per_hour: 3, next_in_secs: 1200 },
            (
                StatusCode::TOO_MANY_REQUESTS,
                "limit_exceeded",
                None,
                "the tenant has used its 3 agent uploads per hour (components and HTTP workers; limit \
                 `max_uploads_per_hour`); the next is allowed in 1200 s"
                    .to_owned(),
            ),
        ),
        (
            AgentError::Compiling,
            (
                StatusCode::TOO_MANY_REQUESTS,
                "limit_exceeded",
                None,
                "another upload of this tenant is being compiled; send this one when it is done".to_owned(),
            ),
        ),
        (
            AgentError::Replaying,
            (
                StatusCode::TOO_MANY_REQUESTS,
                "limit_exceeded",
                None,
                "another replay of this tenant is running; start this one when it is done".to_owned(),
            ),
        ),
        (
            AgentError::CompiledQuota { total: 3 << 20, bytes: 2 << 20, limit: 1 << 20 },
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "limit_exceeded",
                None,
                "the tenant's agents would hold 3 MiB of compiled code with this one (2 MiB), more than its 1 MiB \
                 (limit `max_compiled_bytes`); remove agents it no longer needs"
                    .to_owned(),
            ),
        ),
        (
            AgentError::StoredQuota {
                whose: "the tenant's agents".to_owned(),
                setting: "max_stored_agent_bytes",
                total: 3 << 20,
                bytes: 2000,
                limit: 2 << 20,
            },
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                "limit_exceeded",
                None,
                "the tenant's agents would store 3 MiB with this version (2000 bytes), more than 2 MiB (limit \
                 `max_stored_agent_bytes`), even with every other inactive version of the agent dropped; delete \
                 agents or versions no longer needed"
                    .to_owned(),
            ),
        ),
        (
            AgentError::CurrentVersion { agent_id: "a".to_owned(), version: "sha256:00".to_owned() },
            (
                StatusCode::CONFLICT,
                "conflict",
                Some("version"),
                "`sha256:00` is the current version of agent `a`: activate another version first, or delete the agent"
                    .to_owned(),
            ),
        ),
        (
            AgentError::NoActiveVersion { agent_id: "a".to_owned() },
            (
                StatusCode::CONFLICT,
                "no_active_version",
                None,
                "agent `a` does not exist yet: its first version must be activated (upload it without \
                 `activate=false`)"
                    .to_owned(),
            ),
        ),
        (
            AgentError::UnknownVersion { agent_id: "a".to_owned(), version: "sha256:00".to_owned() },
            (
                StatusCode::NOT_FOUND,
                "not_found",
                Some("version"),
                "agent `a` has no stored version `sha256:00`".to_owned(),
            ),
        ),
        (
            AgentError::Store(StoreError::Closed),
            (StatusCode::SERVICE_UNAVAILABLE, "unavailable", None, "the server is shutting down".to_owned()),
        ),
        (
            AgentError::Internal("reading components/x.wasm: gone".to_owned()),
            (StatusCode::INTERNAL_SERVER_ERROR, "internal", None, "the server failed; see its logs".to_owned()),
        ),
    ];
    for (error, (status, code, field, message)) in cases {
        let answer = ApiError::from(error);
        assert_eq!(
            (answer.status, answer.code, answer.field.as_deref(), answer.message),
            (status, code, field, message)
        );
    }
}
