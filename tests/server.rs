//! One test server for every API test: the engine, the agent registry and
//! the HTTP API on a real redb file, served on `127.0.0.1:0` as `subs
//! serve` serves them (stored keys and tenants, the config file's over
//! them), and a client for it.
//!
//! ```no_run
//! # async fn demo() {
//! use subs_tests::server::TestServer;
//! let server = TestServer::builder().keys(&[("acme", "subs_acme_key_0000000000")]).start().await;
//! let (status, agent) = server.upload("tools", subs_tests::guests::TOOLS, Some("subs_acme_key_0000000000")).await;
//! # }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use subs_engine::Store as _;
use subs_engine::worker::component::{AgentPolicy, ComponentHost, HostConfig};
use subs_store_redb::RedbStore;

/// What a [`TestServer`] starts with; every setting has the default the
/// API tests share.
#[derive(Default)]
pub struct TestServerBuilder {
    keys: Vec<(String, String)>,
    admin_key: Option<String>,
    policies: HashMap<(String, String), AgentPolicy>,
    tenant_limits: HashMap<String, subs_server::Limits>,
    server_config: Option<subs_server::ServerConfig>,
    engine_config: Option<subs_engine::EngineConfig>,
    models: Option<subs_engine::model::Models>,
    host: Option<ComponentHost>,
    host_config: Option<HostConfig>,
    dir: Option<PathBuf>,
}

impl TestServerBuilder {
    /// API keys, `(tenant, key)`; none (and no admin key): the local tenant
    /// without authentication.
    pub fn keys(mut self, keys: &[(&str, &str)]) -> Self {
        self.keys = keys.iter().map(|(tenant, key)| ((*tenant).to_owned(), (*key).to_owned())).collect();
        self
    }

    /// The operator's key, which opens the admin API.
    pub fn admin_key(mut self, key: &str) -> Self {
        self.admin_key = Some(key.to_owned());
        self
    }

    /// The operator's sandbox policy for agents, by `(tenant, agent)`.
    pub fn policies(mut self, policies: HashMap<(String, String), AgentPolicy>) -> Self {
        self.policies = policies;
        self
    }

    /// Limits of the tenants named, over the defaults.
    pub fn tenant_limits(mut self, limits: HashMap<String, subs_server::Limits>) -> Self {
        self.tenant_limits = limits;
        self
    }

    /// The config file's server settings, instead of the tests' defaults
    /// (bodies up to 64 KiB, components up to 32 MiB).
    pub fn server_config(mut self, config: subs_server::ServerConfig) -> Self {
        self.server_config = Some(config);
        self
    }

    /// The engine's settings.
    pub fn engine_config(mut self, config: subs_engine::EngineConfig) -> Self {
        self.engine_config = Some(config);
        self
    }

    /// The models the engine calls (default: the offline model alone).
    pub fn models(mut self, models: subs_engine::model::Models) -> Self {
        self.models = Some(models);
        self
    }

    /// Components run on `host` (default: the test binary's shared host).
    pub fn host(mut self, host: ComponentHost) -> Self {
        self.host = Some(host);
        self
    }

    /// Components run on a host of its own with these settings (at most 32
    /// decisions at once); components the test binary compiled already
    /// are loaded from its cache rather than compiled again.
    pub fn host_config(mut self, config: HostConfig) -> Self {
        self.host_config = Some(config);
        self
    }

    /// The store (and uploaded components) live in `dir`, which outlives
    /// the server, so a test can stop it and start another on the same
    /// data; default: a temporary directory dropped with the server.
    pub fn dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Starts the server.
    pub async fn start(self) -> TestServer {
        let (temp, dir) = match self.dir {
            Some(dir) => (None, dir),
            None => {
                let temp = tempfile::tempdir().expect("a temporary directory");
                let dir = temp.path().to_path_buf();
                (Some(temp), dir)
            }
        };
        let host = match (self.host, self.host_config) {
            (Some(host), _) => host,
            (None, Some(config)) => {
                let compiled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/compiled-components");
                std::fs::create_dir_all(dir.join("compiled")).expect("the compile cache");
                for entry in std::fs::read_dir(compiled).into_iter().flatten().flatten() {
                    let _ = std::fs::copy(entry.path(), dir.join("compiled").join(entry.file_name()));
                }
                ComponentHost::with_config(HostConfig { max_concurrent: 32, ..config })
                    .expect("the component host starts")
            }
            (None, None) => crate::host().clone(),
        };
        let store = Arc::new(RedbStore::open(dir.join("subs.redb")).expect("the store opens"));
        // Tenants' MCP servers, as `subs serve` keeps them: their routes
        // answer, and their tools are the agents' tool sources.
        let mcp = Arc::new(
            subs_engine::mcp::McpServers::new(subs_engine::mcp::McpLimits::default())
                .expect("the MCP client builds")
                .with_store(store.clone()),
        );
        mcp.sync().await.expect("the MCP servers load");
        let mut engine_config = self.engine_config.unwrap_or_default();
        if engine_config.tool_sources.is_none() {
            engine_config.tool_sources = Some(mcp.clone());
        }
        let engine = subs_engine::Engine::start(
            store.clone(),
            self.models.unwrap_or_else(subs_engine::model::Models::with_offline),
            engine_config,
        )
        .await
        .expect("the engine starts");
        let agents =
            subs_engine::agents::AgentRegistry::new(engine.clone(), host, dir.clone()).with_policies(self.policies);
        let file = self.server_config.unwrap_or_else(|| subs_server::ServerConfig {
            default_limits: subs_server::Limits {
                max_body_bytes: 64 << 10,
                // The Python and JavaScript agents are 15-19 MB.
                max_component_bytes: 32 << 20,
                ..subs_server::Limits::default()
            },
            ..subs_server::ServerConfig::default()
        });
        let file = subs_server::ServerConfig {
            tenant_limits: self.tenant_limits.into_iter().chain(file.tenant_limits.clone()).collect(),
            ..file
        };
        let config = subs_server::LiveConfig::load(file, &engine).await.expect("the tenants load");
        config.apply_sandboxes(&agents).expect("the tenants' sandboxes apply");
        let failed = agents.load_all().await.expect("the agents load");
        assert!(failed.is_empty(), "stored agents failed to load: {failed:?}");
        let file_keys = self.keys.iter().map(|(tenant, key)| subs_engine::store::KeyRecord {
            tenant: tenant.clone(),
            hash: subs_server::auth::hash_key(key),
            prefix: key.chars().take(8).collect(),
            name: None,
            created_ms: 0,
        });
        let admin = self.admin_key.as_deref().map(subs_server::auth::hash_key);
        let stored_keys = store.keys().await.expect("the stored keys");
        let keys = subs_server::Keys::new(stored_keys).with_config_keys(file_keys).with_admin_keys(admin);
        let state = Arc::new(subs_server::AppState {
            engine: engine.clone(),
            agents,
            keys,
            config,
            metrics: subs_server::metrics::Metrics::default(),
            scans: Default::default(),
        });
        let listener = subs_server::edge::bind("127.0.0.1:0".parse().expect("an address")).expect("a loopback port");
        let base = format!("http://{}", listener.local_addr().expect("a bound address"));
        let (shutdown, stop) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(subs_server::serve_with_mcp(listener, state, mcp, async {
            let _ = stop.await;
        }));
        TestServer { base, http: reqwest::Client::new(), shutdown: Some(shutdown), task, engine, store, _dir: temp }
    }
}

/// A running server and a client for it. Dropping it stops the server;
/// [`TestServer::stop`] also waits for it and closes the store.
pub struct TestServer {
    base: String,
    /// The client.
    pub http: reqwest::Client,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    /// The engine behind the API.
    pub engine: subs_engine::Engine,
    /// Its store.
    pub store: Arc<RedbStore>,
    _dir: Option<tempfile::TempDir>,
}

impl TestServer {
    /// A server to configure and start.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// The URL of `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request to `path`, with `key` as its bearer token when given.
    pub fn request(&self, method: Method, path: &str, key: Option<&str>) -> reqwest::RequestBuilder {
        let request = self.http.request(method, self.url(path));
        match key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// Sends `body` as JSON (if any) to `path`; the status and the answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        crate::send_json(self.request(method, path, key), body).await
    }

    /// Uploads the component at `wasm` as `agent`; the status and the
    /// answer (JSON `null` when it is not JSON).
    pub async fn upload(&self, agent: &str, wasm: &str, key: Option<&str>) -> (StatusCode, Value) {
        self.upload_to(&format!("/v1/agents/{agent}"), wasm, key).await
    }

    /// [`upload`](Self::upload) to `path` (`/v1/agents/{agent}` with a
    /// query, say).
    pub async fn upload_to(&self, path: &str, wasm: &str, key: Option<&str>) -> (StatusCode, Value) {
        let response = self
            .request(Method::PUT, path, key)
            .header("content-type", "application/wasm")
            .body(std::fs::read(wasm).expect("the component is built"))
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        (status, serde_json::from_str(&response.text().await.expect("the answer's body")).unwrap_or(Value::Null))
    }

    /// Sends `text` as a user message to `session` of `agent`.
    pub async fn say(&self, session: &str, agent: &str, text: &str, key: Option<&str>) -> (StatusCode, Value) {
        let body = json!({"type": "client.message", "agent_id": agent, "message": {"role": "user", "content": text}});
        self.call(Method::POST, &format!("/v1/sessions/{session}/input"), key, Some(body)).await
    }

    /// Stops the server, waits for it, stops the engine and closes the
    /// store, so another server can start on the same directory.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), &mut self.task).await;
        self.task.abort();
        self.engine.clone().kill().await;
        self.store.close().await.expect("the store closes");
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl TestServer {
    /// A server with these API keys and every other setting the default.
    pub async fn start(keys: &[(&str, &str)]) -> Self {
        Self::builder().keys(keys).start().await
    }

    /// Reads a session's event stream (from after `last_event_id`, when
    /// given) until `until` says stop.
    pub async fn events(
        &self,
        session: &str,
        key: Option<&str>,
        last_event_id: Option<u64>,
        mut until: impl FnMut(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        let mut request = self.request(Method::GET, &format!("/v1/sessions/{session}/events"), key);
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.expect("the server answers");
        assert_eq!(response.status(), StatusCode::OK);
        read_sse(response, &mut until).await
    }

    /// The session's events until `turn` ends (at most 30 s).
    pub async fn wait_turn(&self, session: &str, turn: &str, key: Option<&str>) -> Vec<SseEvent> {
        let done = |e: &SseEvent| matches!(e.event.as_str(), "turn.done" | "turn.failed") && e.data["turn_id"] == turn;
        tokio::time::timeout(Duration::from_secs(30), self.events(session, key, None, done))
            .await
            .expect("the turn ends")
    }
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    /// Its `id:`, if any.
    pub id: Option<u64>,
    /// Its `event:` name.
    pub event: String,
    /// Its `data:`, as JSON when it is JSON.
    pub data: Value,
}

/// Reads events from a streaming response until `until` returns true for
/// one (included) or the stream ends.
pub async fn read_sse(mut response: reqwest::Response, until: &mut impl FnMut(&SseEvent) -> bool) -> Vec<SseEvent> {
    let mut parser = subs_protocol::sse::SseParser::new();
    let mut events = Vec::new();
    while let Some(chunk) = response.chunk().await.expect("the stream goes on") {
        for read in parser.push(&chunk).expect("events within the bound") {
            let data = serde_json::from_str(&read.data).unwrap_or(Value::String(read.data));
            let event = SseEvent { id: read.id.and_then(|id| id.parse().ok()), event: read.event, data };
            let stop = until(&event);
            events.push(event);
            if stop {
                return events;
            }
        }
    }
    events
}
