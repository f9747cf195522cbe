//! Shared helpers of the integration tests: where the guest components
//! are, a component host shared by every test, and the protocol fixtures.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use subs_engine::worker::component::{ComponentAgent, ComponentHost};
use subs_protocol::DecisionRequest;

/// Paths of the guest components, built by `build.rs`.
pub mod guests {
    include!(concat!(env!("OUT_DIR"), "/guests.rs"));
}

/// The component host every test shares (one wasmtime engine).
pub fn host() -> &'static ComponentHost {
    static HOST: OnceLock<ComponentHost> = OnceLock::new();
    HOST.get_or_init(|| ComponentHost::new().expect("the component host starts"))
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
