//! An HTTP worker driven by a script, for tests of the loop's rules over
//! the real API: it answers each decision request as the script says and
//! keeps every request it got.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use serde_json::Value;

/// How a scripted worker answers a request; `None` never answers. A
/// decision with `"_delay_ms": n` is sent after `n` ms (without that key).
type Script = dyn Fn(&Value) -> Option<Value> + Send + Sync;

/// An HTTP worker that answers each decision request as its script says
/// and keeps every request it got.
pub struct Scripted {
    /// Where the worker listens.
    pub url: String,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl Scripted {
    pub async fn start(script: impl Fn(&Value) -> Option<Value> + Send + Sync + 'static) -> Self {
        let script: Arc<Script> = Arc::new(script);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let handler = move |body: Bytes| {
            let (script, log) = (script.clone(), log.clone());
            async move {
                let request: Value = serde_json::from_slice(&body).expect("a JSON decision request");
                log.lock().unwrap().push(request.clone());
                match script(&request) {
                    Some(mut decision) => {
                        if let Some(delay) = decision.as_object_mut().and_then(|d| d.remove("_delay_ms")) {
                            // A script's slow agent: the delay is what it tests.
                            subs_tests::wait::pace(Duration::from_millis(delay.as_u64().unwrap())).await;
                        }
                        axum::Json(decision)
                    }
                    None => std::future::pending().await,
                }
            }
        };
        let app = Router::new().route("/", axum::routing::post(handler));
        let url = format!("http://{}/", subs_tests::serve_loopback(app).await);
        Self { url, seen }
    }

    /// The requests of `session`, in the order they came.
    pub fn requests(&self, session: &str) -> Vec<Value> {
        self.seen.lock().unwrap().iter().filter(|r| r["session_id"] == session).cloned().collect()
    }

    /// The trigger types `session`'s requests carried, in order.
    pub fn triggers(&self, session: &str) -> Vec<String> {
        self.requests(session).iter().map(|r| kind(r).to_owned()).collect()
    }

    /// The requests of `session` whose trigger is `kind`.
    pub fn of_kind(&self, session: &str, kind: &str) -> Vec<Value> {
        self.requests(session).into_iter().filter(|r| r["trigger"]["type"] == kind).collect()
    }

    /// The first request of `session` whose trigger is `kind`.
    pub fn first(&self, session: &str, kind: &str) -> Value {
        self.of_kind(session, kind).into_iter().next().unwrap_or_else(|| panic!("no {kind} request for {session}"))
    }

    /// The sessions that got requests, in the order they first did.
    pub fn sessions(&self) -> Vec<String> {
        let mut sessions: Vec<String> = Vec::new();
        for r in self.seen.lock().unwrap().iter() {
            let id = r["session_id"].as_str().unwrap_or_default().to_owned();
            if !sessions.contains(&id) {
                sessions.push(id);
            }
        }
        sessions
    }
}

/// A decision request's trigger type.
pub fn kind(request: &Value) -> &str {
    request["trigger"]["type"].as_str().unwrap_or_default()
}
