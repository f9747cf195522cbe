//! Shared helpers of the integration tests: where the guest components
//! are, a component host shared by every test, and the protocol fixtures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use subs_engine::worker::component::{ComponentAgent, ComponentHost, HostConfig};
use subs_protocol::DecisionRequest;

pub mod bench;
pub mod mcp;
pub mod node;
pub mod server;
pub use subs_test_wait as wait;

/// The allocator the `subs` binary uses, so that the benchmarks (and the
/// tests) measure the engine as it ships; it can count what is allocated
/// while a bench asks it to ([`heap`]).
#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

/// Live heap bytes, counted on request: resident memory (what the kernel
/// reports) mixes what the program holds with what the allocator keeps
/// for later and the instance pool's warm slots, so it cannot tell what
/// one session holds. Counting costs one relaxed load per allocation
/// while off.
pub mod heap {
    use std::alloc::{GlobalAlloc, Layout};
    use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

    static ON: AtomicBool = AtomicBool::new(false);
    static LIVE: AtomicI64 = AtomicI64::new(0);

    /// mimalloc, with the count of bytes allocated minus bytes freed while
    /// counting is on.
    pub struct Counting;

    fn add(bytes: usize, sign: i64) {
        if ON.load(Ordering::Relaxed) {
            LIVE.fetch_add(sign * bytes as i64, Ordering::Relaxed);
        }
    }

    // SAFETY: every call is passed on unchanged to mimalloc; the count is
    // bookkeeping beside it.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size(), 1);
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            add(layout.size(), 1);
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(layout.size(), -1);
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size, 1);
            add(layout.size(), -1);
            // SAFETY: the caller's contract, passed on.
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        }
    }

    /// Starts counting from zero.
    pub fn start() {
        LIVE.store(0, Ordering::Relaxed);
        ON.store(true, Ordering::SeqCst);
    }

    /// Bytes allocated and not freed since [`start`] (negative if more was
    /// freed than allocated); counting goes on.
    pub fn live() -> i64 {
        LIVE.load(Ordering::SeqCst)
    }

    /// Stops counting.
    pub fn stop() {
        ON.store(false, Ordering::SeqCst);
    }
}

/// Paths of the guest components, built by `build.rs`.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

/// The component host every test shares (one wasmtime engine). Its
/// compile cache lives in the target directory, so test runs after the
/// first load the guests compiled instead of compiling them again.
pub fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(new_host)
}

/// A component host of its own, on the same compile cache as [`host`]: for
/// a test that changes what the host grants a tenant while it runs.
pub fn new_host() -> ComponentHost {
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/compiled-components");
    let config = HostConfig { compile_cache: Some(cache), ..HostConfig::default() };
    ComponentHost::with_config(config).expect("the component host starts")
}

/// The guest component at `path`, compiled once per test binary.
pub fn agent(path: &str) -> ComponentAgent {
    static AGENTS: OnceLock<Mutex<HashMap<String, ComponentAgent>>> = OnceLock::new();
    let agents = AGENTS.get_or_init(Mutex::default);
    if let Some(agent) = agents.lock().unwrap().get(path) {
        return agent.clone();
    }
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    let agent = host().load(&bytes).unwrap_or_else(|e| panic!("loading {path}: {e}"));
    agents.lock().unwrap().insert(path.to_owned(), agent.clone());
    agent
}

/// The protocol fixtures directory, `tests/fixtures/protocol`.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join("protocol")
}

/// Every fixture file of one type directory, sorted, with its text.
pub fn fixtures(type_dir: &str) -> Vec<(String, String)> {
    let dir = fixtures_dir().join(type_dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect()
}

/// The fixture decision requests, one per trigger type.
pub fn fixture_requests() -> Vec<(String, DecisionRequest)> {
    fixtures("decision_request")
        .into_iter()
        .map(|(name, text)| {
            let request = subs_protocol::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, request)
        })
        .collect()
}

/// JSON with object keys sorted recursively, printed compactly: two values
/// are the same document exactly when their canonical texts are equal.
pub fn canonical(value: &Value) -> String {
    fn sort(value: &Value) -> Value {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                Value::Object(entries.into_iter().map(|(k, v)| (k.clone(), sort(v))).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    serde_json::to_string(&sort(value)).expect("JSON values serialize")
}

/// A real engine on a real redb file in a temporary directory, with the
/// example and test components registered as agents of tenant `t`:
/// `tools`, `scenario` (the `test-scenario` component), `helper` and
/// `passthrough` (both the passthrough example, `passthrough` built
/// without WASI, `helper` for wasm32-wasip2), `streamer` (the
/// `test-stream` component, which runs its own LLM calls).
pub struct TestEngine {
    /// The engine.
    pub engine: subs_engine::Engine,
    /// The store under it.
    pub store: std::sync::Arc<dyn subs_engine::Store>,
    /// Keeps the directory alive.
    pub dir: tempfile::TempDir,
    /// What the store is: a redb file in `dir`, or a PostgreSQL database.
    backend: Backend,
}

/// Where a [`TestEngine`] keeps its sessions.
enum Backend {
    /// The redb store in the test's directory, kept to be closed.
    Redb(std::sync::Arc<subs_store_redb::RedbStore>),
    /// A database of the test cluster, by URL.
    Postgres(String),
}

/// The tenant of every test session.
pub const TENANT: &str = "t";

impl TestEngine {
    /// Starts an engine on a fresh store.
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        Self::start_in(dir).await
    }

    /// Starts an engine on the store in `dir` (resuming what it holds).
    pub async fn start_in(dir: tempfile::TempDir) -> Self {
        let redb = std::sync::Arc::new(
            subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).expect("the store opens"),
        );
        let engine = start_engine(redb.clone()).await;
        Self { engine, store: redb.clone(), dir, backend: Backend::Redb(redb) }
    }

    /// Starts an engine on a fresh database of the test PostgreSQL
    /// cluster; `None` (the test is skipped, saying so) where PostgreSQL
    /// is not installed.
    pub async fn start_on_postgres() -> Option<Self> {
        let cluster = subs_store_postgres::testing::TestCluster::shared()?;
        let url = cluster.fresh_database();
        let dir = tempfile::tempdir().expect("a temporary directory");
        Some(Self::open_postgres(dir, url).await)
    }

    /// Starts an engine on the PostgreSQL database at `url`, as one more
    /// node beside any other engine on it.
    pub async fn on_postgres(url: String) -> Self {
        Self::open_postgres(tempfile::tempdir().expect("a temporary directory"), url).await
    }

    async fn open_postgres(dir: tempfile::TempDir, url: String) -> Self {
        Self::open_postgres_with(dir, url, test_config()).await
    }

    /// [`TestEngine::on_postgres`] with these settings.
    pub async fn on_postgres_with(url: String, config: subs_engine::EngineConfig) -> Self {
        Self::open_postgres_with(tempfile::tempdir().expect("a temporary directory"), url, config).await
    }

    async fn open_postgres_with(dir: tempfile::TempDir, url: String, config: subs_engine::EngineConfig) -> Self {
        let store = subs_store_postgres::PgStore::open(&url, subs_store_postgres::PgOptions::default())
            .await
            .expect("the PostgreSQL store opens");
        let store: std::sync::Arc<dyn subs_engine::Store> = std::sync::Arc::new(store);
        let engine = start_engine_with(store.clone(), subs_engine::model::Models::with_offline(), config).await;
        Self { engine, store, dir, backend: Backend::Postgres(url) }
    }

    /// Stops the engine as a crash would and starts another on the same
    /// store, which resumes what it holds.
    pub async fn restart(self) -> Self {
        match &self.backend {
            Backend::Redb(_) => Self::start_in(self.crash().await).await,
            Backend::Postgres(url) => {
                let url = url.clone();
                self.engine.kill().await;
                drop(self.store);
                Self::open_postgres(self.dir, url).await
            }
        }
    }

    /// Starts an engine on a fresh store with these models (and prices).
    pub async fn start_with_models(models: subs_engine::model::Models) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let redb = std::sync::Arc::new(
            subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).expect("the store opens"),
        );
        let engine = start_engine_with(redb.clone(), models, test_config()).await;
        Self { engine, store: redb.clone(), dir, backend: Backend::Redb(redb) }
    }

    /// Sends `text` as a user message to `session` of `agent` and waits for
    /// the turn to end.
    pub async fn chat(&self, session: &str, agent: &str, text: &str) -> subs_engine::store::TurnRecord {
        let turn = self.send(session, agent, text).await;
        self.wait(session, &turn).await
    }

    /// Sends `text` as a user message; returns the turn id.
    pub async fn send(&self, session: &str, agent: &str, text: &str) -> String {
        let accepted = self
            .engine
            .sessions()
            .input(TENANT, session, user_input(agent, None, text), Default::default())
            .await
            .expect("input accepted");
        accepted.turn_id.expect("a turn")
    }

    /// Waits (at most 30 s) for a turn to end.
    pub async fn wait(&self, session: &str, turn: &str) -> subs_engine::store::TurnRecord {
        tokio::time::timeout(std::time::Duration::from_secs(30), self.engine.reads().wait_turn(TENANT, session, turn))
            .await
            .unwrap_or_else(|_| panic!("turn {turn} of {session} did not end"))
            .expect("the store answers")
    }

    /// The session as stored.
    pub async fn snapshot(&self, session: &str) -> subs_engine::Snapshot {
        self.engine.reads().snapshot(TENANT, session).await.expect("the store answers").expect("the session exists")
    }

    /// `role: text` for each message of the active path.
    pub async fn transcript(&self, session: &str) -> Vec<String> {
        self.snapshot(session).await.messages.iter().map(describe).collect()
    }

    /// Stops the engine as a crash would and closes the store, returning
    /// the directory for a restart (on redb; see [`restart`](Self::restart)
    /// for any store).
    pub async fn crash(self) -> tempfile::TempDir {
        self.engine.kill().await;
        if let Backend::Redb(redb) = &self.backend {
            redb.close().await.expect("the store closes");
        }
        drop(self.store);
        drop(self.backend);
        self.dir
    }
}

/// Serves `app` on a free loopback port for the rest of the test, with
/// `TCP_NODELAY` on every connection as a real server would; returns its
/// address.
pub async fn serve_loopback(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(subs_http_worker::serve_router(listener, app, std::future::pending()));
    addr
}

/// A loopback HTTP server whose `/` answers `hello`; counts those requests.
pub async fn hello_server() -> (std::net::SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { "hello" }
        }),
    );
    (serve_loopback(app).await, hits)
}

/// Sends `request` with `body` as JSON, if any; returns the status and the
/// answer as JSON (as a string when it is not JSON).
pub async fn send_json(mut request: reqwest::RequestBuilder, body: Option<Value>) -> (reqwest::StatusCode, Value) {
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.expect("the server answers");
    let status = response.status();
    let text = response.text().await.expect("the answer's body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// A `tool.execute` request: the tool `name` called with `arguments`
/// (valid), at its first attempt.
pub fn tool_execute(name: &str, arguments: Value) -> DecisionRequest {
    use subs_protocol::{ToolInput, Trigger, trigger::ToolExecute};
    DecisionRequest::for_trigger(Trigger::ToolExecute(ToolExecute {
        id: "call_1".to_owned(),
        name: name.to_owned(),
        arguments: arguments.to_string(),
        input: ToolInput::Valid { value: arguments },
        attempt: 1,
        deadline: None,
    }))
}

/// A `client.message` input: the user says `text` to `agent`, in the turn
/// `turn_id` (the engine mints one when it is `None`).
pub fn user_input(agent: &str, turn_id: Option<&str>, text: impl Into<String>) -> subs_protocol::ClientInput {
    subs_protocol::ClientInput::ClientMessage(subs_protocol::client::ClientMessage {
        agent_id: agent.to_owned(),
        turn_id: turn_id.map(str::to_owned),
        message: subs_protocol::DraftMessage::user(text),
        stream: None,
    })
}

/// The engine settings of the tests: quick retries, a 20 s deadline per
/// delivery.
pub fn test_config() -> subs_engine::EngineConfig {
    subs_engine::EngineConfig {
        default_retry: subs_protocol::RetryPolicy {
            timeout_secs: Some(20.0),
            max_retries: 2,
            backoff_base_secs: 0.01,
            backoff_max_secs: 0.05,
        },
        ..subs_engine::EngineConfig::default()
    }
}

/// A test engine on `store`, with the test agents registered.
pub async fn start_engine(store: std::sync::Arc<dyn subs_engine::Store>) -> subs_engine::Engine {
    start_engine_with(store, subs_engine::model::Models::with_offline(), test_config()).await
}

/// [`start_engine`] with these models and settings.
pub async fn start_engine_with(
    store: std::sync::Arc<dyn subs_engine::Store>,
    models: subs_engine::model::Models,
    config: subs_engine::EngineConfig,
) -> subs_engine::Engine {
    start_engine_and(store, models, config, |_| {}).await
}

/// [`start_engine_with`], calling `register` (to register more agents, or
/// others under the same ids) after the test agents are registered and
/// before unfinished sessions resume: as `subs serve` does, a resumed
/// session finds its agent, since an unknown agent fails a turn at once.
pub async fn start_engine_and(
    store: std::sync::Arc<dyn subs_engine::Store>,
    models: subs_engine::model::Models,
    config: subs_engine::EngineConfig,
    register: impl FnOnce(&subs_engine::Engine),
) -> subs_engine::Engine {
    let engine = subs_engine::Engine::open(store, models, config);
    for (id, path) in [
        ("tools", guests::TOOLS),
        ("scenario", guests::TEST_SCENARIO),
        ("helper", guests::PASSTHROUGH),
        ("passthrough", guests::PASSTHROUGH_LEAN),
        ("streamer", guests::TEST_STREAM),
    ] {
        engine.register_agent(TENANT, id, std::sync::Arc::new(agent(path)));
    }
    register(&engine);
    engine.resume().await.expect("the engine starts");
    engine
}

/// `role: text [tool calls] (answers call)` — a message in one line.
pub fn describe(message: &subs_protocol::Message) -> String {
    let role = serde_json::to_value(message.role).unwrap();
    let mut line = format!("{}: {}", role.as_str().unwrap_or_default(), message.text());
    for call in message.tool_calls.iter().flatten() {
        line.push_str(&format!(" [{} {}]", call.function.name, call.function.arguments));
    }
    if let Some(id) = &message.tool_call_id {
        line.push_str(&format!(" (answers {id})"));
    }
    line
}
