//! The admin API over real HTTP, on a real redb file: tenants, their keys
//! and their limits change while the server runs and take effect at once;
//! what is stored survives a restart; the operator key and tenants' keys
//! never stand in for each other.

use std::path::Path;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_server::auth::hash_key;
use subs_server::{Limits, ServerConfig};
use subs_tests::guests;
use subs_tests::server::TestServer;

/// The operator key of these tests.
const OPERATOR: &str = "subs_admin_0123456789abcdef0123456789abcdef";

const GET: Method = Method::GET;
const POST: Method = Method::POST;
const PUT: Method = Method::PUT;
const DELETE: Method = Method::DELETE;

/// How a test server is set up.
#[derive(Clone, Default)]
struct Setup {
    /// Whether it has the operator key.
    admin: bool,
    /// The config file's keys, `(tenant, key)`.
    file_keys: Vec<(&'static str, &'static str)>,
    /// The config file's limits.
    file: ServerConfig,
}

impl Setup {
    fn admin() -> Self {
        Self { admin: true, ..Self::default() }
    }
}

/// A server on a store file that outlives it, so a test can restart it.
struct Server(TestServer);

impl std::ops::Deref for Server {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl Server {
    /// Starts a server on the store in `dir`, as `subs serve` does: the
    /// stored keys and tenants, with the config file's over them.
    async fn start(dir: &Path, setup: &Setup) -> Self {
        // A host of its own: the admin API changes what it grants tenants.
        let mut builder = TestServer::builder()
            .dir(dir)
            .host(subs_tests::new_host())
            .server_config(setup.file.clone())
            .keys(&setup.file_keys);
        if setup.admin {
            builder = builder.admin_key(OPERATOR);
        }
        Self(builder.start().await)
    }

    /// Stops the server and closes its store, so it can start again.
    async fn stop(self) {
        self.0.stop().await;
    }

    /// An admin call with the operator key.
    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call(method, path, Some(OPERATOR), body).await
    }

    /// Creates `tenant` and a key for it; returns the key.
    async fn tenant_with_key(&self, tenant: &str) -> String {
        let (status, view) = self.admin(PUT, &format!("/v1/admin/tenants/{tenant}"), None).await;
        assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{status} {view}");
        let (status, key) = self.admin(POST, "/v1/admin/keys", Some(json!({"tenant": tenant}))).await;
        assert_eq!(status, StatusCode::CREATED, "{key}");
        key["key"].as_str().unwrap().to_owned()
    }

    async fn upload(&self, agent: &str, wasm: &str, key: &str) -> (StatusCode, Value) {
        self.0.upload(agent, wasm, Some(key)).await
    }

    /// Sends a user message to `session` of `agent`.
    async fn say(&self, session: &str, agent: &str, key: &str) -> (StatusCode, Value) {
        let body = json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": "hi"}});
        self.call(POST, &format!("/v1/sessions/{session}/input"), Some(key), Some(body)).await
    }

    /// Sends a user message with `"stream": true` and reads the turn's
    /// events to its end; returns them as text.
    async fn turn(&self, session: &str, agent: &str, key: &str) -> String {
        let body = json!({
            "type": "client.message", "agent_id": agent, "stream": true,
            "message": {"role": "user", "content": "hi"},
        });
        let response = self
            .request(POST, &format!("/v1/sessions/{session}/input"), Some(key))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        tokio::time::timeout(Duration::from_secs(30), response.text()).await.expect("the turn ends").unwrap()
    }
}

/// The Must-show items of keys: a key created while the server runs works
/// at once; a revoked one is refused at once.
#[tokio::test]
async fn keys_created_and_revoked_while_running_take_effect_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &Setup::admin()).await;
    // No tenant key yet: the server still authenticates (an operator key
    // turns authentication on), so nobody is the local tenant.
    let (status, _) = s.call(GET, "/v1/agents", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let (status, tenant) = s.admin(PUT, "/v1/admin/tenants/acme", None).await;
    assert_eq!(status, StatusCode::CREATED, "{tenant}");
    assert_eq!(
        (tenant["tenant"].as_str(), tenant["stored"].as_bool(), tenant["keys"].as_u64()),
        (Some("acme"), Some(true), Some(0))
    );
    assert_eq!(s.admin(PUT, "/v1/admin/tenants/acme", None).await.0, StatusCode::OK, "creating again changes nothing");

    let (status, created) = s.admin(POST, "/v1/admin/keys", Some(json!({"tenant": "acme", "name": "ci"}))).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let key = created["key"].as_str().unwrap().to_owned();
    assert_eq!(created["hash"], hash_key(&key));
    assert_eq!(created["prefix"], key[..12]);
    // Works at once.
    assert_eq!(s.call(GET, "/v1/agents", Some(&key), None).await, (StatusCode::OK, json!([])));
    assert_eq!(s.call(GET, "/v1/usage", Some(&key), None).await.0, StatusCode::OK);

    // Listed by hash and prefix, never the key.
    let (status, keys) = s.admin(GET, "/v1/admin/keys", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(keys.as_array().unwrap().len(), 1);
    assert_eq!(
        (&keys[0]["tenant"], &keys[0]["name"], &keys[0]["source"], &keys[0]["prefix"]),
        (&json!("acme"), &json!("ci"), &json!("store"), &json!(&key[..12]))
    );
    assert!(!keys.to_string().contains(&key), "a listing never shows a key");
    assert_eq!(s.admin(GET, "/v1/admin/keys?tenant=beta", None).await.1, json!([]));
    assert_eq!(s.admin(GET, "/v1/admin/tenants/acme", None).await.1["keys"], 1);

    // A second key, then the first revoked by its listed prefix: refused
    // at once, the other still works.
    let other =
        s.admin(POST, "/v1/admin/keys", Some(json!({"tenant": "acme"}))).await.1["key"].as_str().unwrap().to_owned();
    let (status, revoked) = s.admin(DELETE, &format!("/v1/admin/keys/{}", &key[..12]), None).await;
    assert_eq!(status, StatusCode::OK, "{revoked}");
    assert_eq!(revoked, json!({"tenant": "acme", "hash": hash_key(&key), "prefix": &key[..12], "revoked": true}));
    let (status, refused) = s.call(GET, "/v1/agents", Some(&key), None).await;
    assert_eq!((status, refused["code"].as_str()), (StatusCode::UNAUTHORIZED, Some("unauthorized")));
    assert_eq!(s.call(GET, "/v1/agents", Some(&other), None).await.0, StatusCode::OK);
    // …and by 8 characters of its hash.
    let hash = hash_key(&other);
    assert_eq!(s.admin(DELETE, &format!("/v1/admin/keys/{}", &hash[..8]), None).await.0, StatusCode::OK);
    assert_eq!(s.call(GET, "/v1/agents", Some(&other), None).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(s.admin(DELETE, &format!("/v1/admin/keys/{}", &hash[..8]), None).await.0, StatusCode::NOT_FOUND);
    s.stop().await;
}

/// A tenant's key never reaches the admin API, and the operator key is
/// not a tenant's.
#[tokio::test]
async fn tenant_keys_and_the_operator_key_stay_apart() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup { file_keys: vec![("filed", "subs_filed_key_0123456789")], ..Setup::admin() };
    let s = Server::start(dir.path(), &setup).await;
    let key = s.tenant_with_key("acme").await;

    let (_, doc) = s.call(GET, "/v1/openapi.json", None, None).await;
    let mut admin_routes = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/admin/") {
            continue;
        }
        let concrete = path.replace("{tenant}", "acme").replace("{key}", &hash_key(&key));
        for method in item.as_object().unwrap().keys() {
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            for tenant_key in [key.as_str(), "subs_filed_key_0123456789"] {
                let (status, answer) = s.call(method.clone(), &concrete, Some(tenant_key), Some(json!({}))).await;
                assert_eq!(
                    (status, answer["code"].as_str()),
                    (StatusCode::FORBIDDEN, Some("forbidden")),
                    "{method} {path}"
                );
            }
            let (status, answer) = s.call(method.clone(), &concrete, None, None).await;
            assert_eq!(
                (status, answer["code"].as_str()),
                (StatusCode::UNAUTHORIZED, Some("unauthorized")),
                "{method} {path}"
            );
            let (status, _) = s.call(method.clone(), &concrete, Some("subs_admin_guess"), None).await;
            assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
            admin_routes += 1;
        }
    }
    assert_eq!(admin_routes, 9, "every admin route was tried");
    // Nothing those requests sent changed anything.
    assert_eq!(s.call(GET, "/v1/agents", Some(&key), None).await.0, StatusCode::OK);

    // The operator key acts for no tenant.
    for (method, path) in [(GET, "/v1/agents"), (GET, "/v1/sessions"), (GET, "/v1/usage"), (POST, "/v1/tokens")] {
        let (status, answer) = s.admin(method.clone(), path, None).await;
        assert_eq!((status, answer["code"].as_str()), (StatusCode::FORBIDDEN, Some("forbidden")), "{method} {path}");
    }
    s.stop().await;

    // Without an operator key the admin API is off, and says how to turn
    // it on.
    let s = Server::start(dir.path(), &Setup::default()).await;
    let (status, answer) = s.admin(GET, "/v1/admin/tenants", None).await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::FORBIDDEN, Some("admin_disabled")));
    assert!(answer["error"].as_str().unwrap().contains("SUBS_ADMIN_KEY"), "{answer}");
    assert_eq!(s.call(GET, "/v1/agents", Some(&key), None).await.0, StatusCode::OK, "the stored key still works");
    s.stop().await;
}

/// The Must-show item of limits: a tenant's limits change without a
/// restart: its session limit, its body and upload sizes, its budget.
#[tokio::test]
async fn tenant_limits_change_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &Setup::admin()).await;
    let key = s.tenant_with_key("acme").await;
    let other = s.tenant_with_key("beta").await;
    assert_eq!(s.upload("p", guests::PASSTHROUGH, &key).await.0, StatusCode::CREATED);
    assert_eq!(s.upload("p", guests::PASSTHROUGH, &other).await.0, StatusCode::CREATED);
    let limits = |body: Value| s.admin(PUT, "/v1/admin/tenants/acme/limits", Some(body));

    // Sessions: lowered to 1 while one exists, the next new one is refused
    // with the documented error; raised, it is accepted; beta is not held.
    assert_eq!(s.say("a", "p", &key).await.0, StatusCode::ACCEPTED);
    let (status, view) = limits(json!({"max_sessions": 1})).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!((&view["limits"]["max_sessions"], &view["overrides"]), (&json!(1), &json!({"max_sessions": 1})));
    let (status, refused) = s.say("b", "p", &key).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("limit_exceeded")),
        "{refused}"
    );
    assert_eq!(s.say("a", "p", &key).await.0, StatusCode::ACCEPTED, "an existing session takes input");
    assert_eq!(s.say("b", "p", &other).await.0, StatusCode::ACCEPTED, "another tenant's limit is its own");
    assert_eq!(limits(json!({"max_sessions": 2})).await.0, StatusCode::OK);
    assert_eq!(s.say("b", "p", &key).await.0, StatusCode::ACCEPTED);
    assert_eq!(limits(json!({"max_sessions": null})).await.1["limits"]["max_sessions"], Value::Null);
    assert_eq!(s.say("c", "p", &key).await.0, StatusCode::ACCEPTED, "null: no limit");

    // Request bodies: a body over the new limit is refused with 413; an
    // empty object inherits the default again.
    assert_eq!(limits(json!({"max_body_bytes": 50})).await.0, StatusCode::OK);
    let (status, refused) = s.say("a", "p", &key).await;
    assert_eq!((status, refused["code"].as_str()), (StatusCode::PAYLOAD_TOO_LARGE, Some("payload_too_large")));
    assert!(refused["error"].as_str().unwrap().contains("50 bytes"), "{refused}");
    assert_eq!(s.say("a", "p", &other).await.0, StatusCode::ACCEPTED);
    let (_, view) = limits(json!({})).await;
    assert_eq!(
        (&view["limits"]["max_body_bytes"], &view["overrides"]),
        (&json!(Limits::default().max_body_bytes), &json!({}))
    );
    assert_eq!(s.say("a", "p", &key).await.0, StatusCode::ACCEPTED);

    // Uploads.
    assert_eq!(limits(json!({"max_component_bytes": 1000})).await.0, StatusCode::OK);
    assert_eq!(s.upload("q", guests::PASSTHROUGH, &key).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(limits(json!({})).await.0, StatusCode::OK);
    assert_eq!(s.upload("q", guests::PASSTHROUGH, &key).await.0, StatusCode::CREATED);

    // The budget: zero is spent (the offline model costs nothing), so the
    // next turn's call is refused before it is sent; lifted, turns run.
    let (_, view) = limits(json!({"budget": "0"})).await;
    assert_eq!((&view["limits"]["budget"], &view["spent"]), (&json!("0"), &json!("0")));
    assert_eq!(s.call(GET, "/v1/usage", Some(&key), None).await.1["budget"], "0", "the tenant sees it");
    let events = s.turn("d", "p", &key).await;
    assert!(events.contains("turn.failed") && events.contains("budget_exceeded"), "{events}");
    assert_eq!(limits(json!({"budget": "0.5"})).await.0, StatusCode::OK);
    let events = s.turn("d", "p", &key).await;
    assert!(events.contains("turn.done"), "{events}");
    assert!(s.turn("e", "p", &other).await.contains("turn.done"), "beta had no budget");

    // The sandbox: decisions smaller than any the agent makes; its next
    // turn fails naming the limit, at once, and beta's does not. Handed
    // back to the file, turns run again.
    let sandbox = json!({"budget": "0.5", "sandbox": {"decision_bytes": 16}});
    assert_eq!(limits(sandbox).await.0, StatusCode::OK);
    let events = s.turn("f", "p", &key).await;
    assert!(events.contains("turn.failed") && events.contains("decision size limit"), "{events}");
    assert!(s.turn("g", "p", &other).await.contains("turn.done"), "beta's sandbox is its own");
    assert_eq!(limits(json!({"budget": "0.5"})).await.0, StatusCode::OK);
    assert!(s.turn("h", "p", &key).await.contains("turn.done"));

    // The GET answers what the PUT set.
    let (status, got) = s.admin(GET, "/v1/admin/tenants/acme/limits", None).await;
    assert_eq!((status, &got["overrides"]), (StatusCode::OK, &json!({"budget": "0.5"})));
    s.stop().await;
}

/// Tenants, keys and limits set through the API are kept in the store:
/// a restarted server has them, with the config file's under them.
#[tokio::test]
async fn stored_changes_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let acme_file = Limits { max_sessions: Some(7), ..Limits::default() };
    let file = ServerConfig {
        default_limits: Limits { budget: Some("9".parse().unwrap()), ..Limits::default() },
        tenant_limits: [("acme".to_owned(), Limits { budget: Some("9".parse().unwrap()), ..acme_file })].into(),
        ..ServerConfig::default()
    };
    let setup = Setup { file, ..Setup::admin() };
    let s = Server::start(dir.path(), &setup).await;
    let key = s.tenant_with_key("acme").await;
    let gone =
        s.admin(POST, "/v1/admin/keys", Some(json!({"tenant": "acme"}))).await.1["key"].as_str().unwrap().to_owned();
    assert_eq!(s.admin(DELETE, &format!("/v1/admin/keys/{}", hash_key(&gone)), None).await.0, StatusCode::OK);
    let (status, view) =
        s.admin(PUT, "/v1/admin/tenants/acme/limits", Some(json!({"budget": "2", "sandbox": {"cpu_ms": 250}}))).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let (status, created) = s.admin(PUT, "/v1/admin/tenants/beta", Some(json!({"limits": {"max_sessions": 0}}))).await;
    assert_eq!((status, &created["limits"]["max_sessions"]), (StatusCode::CREATED, &json!(0)), "{created}");
    let before = s.admin(GET, "/v1/admin/tenants", None).await.1;
    s.stop().await;

    let s = Server::start(dir.path(), &setup).await;
    assert_eq!(s.admin(GET, "/v1/admin/tenants", None).await.1, before);
    assert_eq!(s.call(GET, "/v1/agents", Some(&key), None).await.0, StatusCode::OK, "the key is kept");
    assert_eq!(s.call(GET, "/v1/agents", Some(&gone), None).await.0, StatusCode::UNAUTHORIZED, "so is its revocation");
    let (_, acme) = s.admin(GET, "/v1/admin/tenants/acme", None).await;
    assert_eq!(acme["limits"]["max_sessions"], 7, "the file's [tenants.acme]");
    assert_eq!(acme["limits"]["budget"], "2", "stored, over the file's");
    assert_eq!(acme["overrides"], json!({"budget": "2", "sandbox": {"cpu_ms": 250}}));
    assert_eq!((acme["stored"].as_bool(), acme["configured"].as_bool()), (Some(true), Some(true)));
    assert_eq!(s.call(GET, "/v1/usage", Some(&key), None).await.1["budget"], "2", "the engine has it");
    // beta's stored limit of no sessions holds after the restart.
    let beta =
        s.admin(POST, "/v1/admin/keys", Some(json!({"tenant": "beta"}))).await.1["key"].as_str().unwrap().to_owned();
    assert_eq!(s.upload("p", guests::PASSTHROUGH, &beta).await.0, StatusCode::CREATED);
    assert_eq!(s.say("x", "p", &beta).await.0, StatusCode::TOO_MANY_REQUESTS);
    // Back to the file's limits.
    let (_, view) = s.admin(PUT, "/v1/admin/tenants/acme/limits", Some(json!({}))).await;
    assert_eq!(view["limits"]["budget"], "9");
    s.stop().await;
}

/// Bad requests are 400s that name the field, and change nothing.
#[tokio::test]
async fn bad_bodies_name_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &Setup::admin()).await;
    s.tenant_with_key("acme").await;
    let bad = |method: Method, path: &'static str, body: &'static str| {
        let request = s.request(method, path, Some(OPERATOR)).header("content-type", "application/json").body(body);
        async move { subs_tests::send_json(request, None).await }
    };
    for (body, field) in [
        (r#"{"max_sessions": "many"}"#, Some("max_sessions")),
        (r#"{"max_sesions": 3}"#, Some("max_sesions")),
        (r#"{"max_body_bytes": -1}"#, Some("max_body_bytes")),
        (r#"{"budget": "-1"}"#, Some("budget")),
        (r#"{"budget": "a lot"}"#, Some("budget")),
        (r#"{"sandbox": {"memory": 1}}"#, Some("sandbox.memory")),
        (r#"{"sandbox": []}"#, Some("sandbox")),
        ("[1]", None),
    ] {
        let (status, answer) = bad(PUT, "/v1/admin/tenants/acme/limits", body).await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_input")),
            "{body}: {answer}"
        );
        assert_eq!(answer["field"].as_str(), field, "{body}: {answer}");
    }
    let (status, answer) = bad(PUT, "/v1/admin/tenants/acme/limits", "{").await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_json")));
    let (status, answer) = bad(PUT, "/v1/admin/tenants/beta", r#"{"limits": {"budget": "x"}}"#).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some("limits.budget")), "{answer}");
    let (status, answer) = bad(PUT, "/v1/admin/tenants/beta", r#"{"limit": {}}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let (status, answer) = bad(PUT, "/v1/admin/tenants/bad%20name", "").await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some("tenant")), "{answer}");
    for (body, field) in [
        (r#"{}"#, "tenant"),
        (r#"{"tenant": "a/b"}"#, "tenant"),
        (r#"{"tenant": 3}"#, "tenant"),
        (r#"{"tenant": "acme", "name": 3}"#, "name"),
        (r#"{"tenant": "acme", "color": "red"}"#, "color"),
    ] {
        let (status, answer) = bad(POST, "/v1/admin/keys", body).await;
        assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some(field)), "{body}: {answer}");
    }
    let long = json!({"tenant": "acme", "name": "n".repeat(200)});
    let (status, answer) = s.admin(POST, "/v1/admin/keys", Some(long)).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some("name")));
    let (status, answer) = s.admin(POST, "/v1/admin/keys", Some(json!({"tenant": "nobody"}))).await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::NOT_FOUND, Some("not_found")), "{answer}");
    let (status, answer) = s.admin(DELETE, "/v1/admin/keys/abc", None).await;
    assert_eq!((status, answer["field"].as_str()), (StatusCode::BAD_REQUEST, Some("key")));
    // A body larger than an admin route reads.
    let huge = format!(r#"{{"max_sessions": 1, "sandbox": {{"http_hosts": ["{}"]}}}}"#, "a".repeat(100_000));
    let request = s.request(PUT, "/v1/admin/tenants/acme/limits", Some(OPERATOR)).body(huge);
    assert_eq!(subs_tests::send_json(request, None).await.0, StatusCode::PAYLOAD_TOO_LARGE);

    // None of it changed acme, or made beta.
    assert_eq!(s.admin(GET, "/v1/admin/tenants/acme/limits", None).await.1["overrides"], json!({}));
    assert_eq!(s.admin(GET, "/v1/admin/tenants/beta", None).await.0, StatusCode::NOT_FOUND);
    s.stop().await;
}

/// Deleting a tenant revokes its keys at once and cancels its open turns;
/// its sessions stay stored, reachable again by a tenant of that name.
/// The config file's tenants and keys are the file's to remove.
#[tokio::test]
async fn deleting_a_tenant_revokes_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let setup = Setup { file_keys: vec![("filed", "subs_filed_key_0123456789")], ..Setup::admin() };
    let s = Server::start(dir.path(), &setup).await;
    let key = s.tenant_with_key("acme").await;
    let second =
        s.admin(POST, "/v1/admin/keys", Some(json!({"tenant": "acme"}))).await.1["key"].as_str().unwrap().to_owned();
    assert_eq!(s.upload("p", guests::PASSTHROUGH, &key).await.0, StatusCode::CREATED);
    assert!(s.turn("kept", "p", &key).await.contains("turn.done"));

    let (status, deleted) = s.admin(DELETE, "/v1/admin/tenants/acme", None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!((&deleted["deleted"], &deleted["revoked_keys"]), (&json!(true), &json!(2)));
    for key in [&key, &second] {
        assert_eq!(s.call(GET, "/v1/sessions/kept", Some(key), None).await.0, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(s.admin(GET, "/v1/admin/tenants/acme", None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.admin(GET, "/v1/admin/keys?tenant=acme", None).await.1, json!([]));
    assert_eq!(s.admin(DELETE, "/v1/admin/tenants/acme", None).await.0, StatusCode::NOT_FOUND);

    // A tenant of the same name finds what was kept.
    let again = s.tenant_with_key("acme").await;
    let (status, session) = s.call(GET, "/v1/sessions/kept", Some(&again), None).await;
    assert_eq!((status, session["status"].as_str()), (StatusCode::OK, Some("idle")));

    // The config file's tenant and key: 409, and they keep working.
    let (status, answer) = s.admin(DELETE, "/v1/admin/tenants/filed", None).await;
    assert_eq!((status, answer["code"].as_str()), (StatusCode::CONFLICT, Some("conflict")), "{answer}");
    let (status, answer) =
        s.admin(DELETE, &format!("/v1/admin/keys/{}", hash_key("subs_filed_key_0123456789")), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("config file"), "{answer}");
    assert_eq!(s.call(GET, "/v1/agents", Some("subs_filed_key_0123456789"), None).await.0, StatusCode::OK);
    let (_, tenants) = s.admin(GET, "/v1/admin/tenants", None).await;
    let names: Vec<&str> = tenants.as_array().unwrap().iter().map(|t| t["tenant"].as_str().unwrap()).collect();
    assert_eq!(names, ["acme", "filed"]);
    s.stop().await;
}
