//! What the bench binaries (`tests/benches/`) share: the 20-message
//! conversation their requests carry, timing a worker under callers (or
//! any one operation), and writing results as JSON.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{DecisionRequest, Message, MessageTree, RequestTree, Role, SharedMessage, TreeNode};

/// A worker's latencies and throughput over one run.
pub struct Stats {
    /// Median decision latency.
    pub p50: Duration,
    /// 99th-percentile decision latency.
    pub p99: Duration,
    /// Decisions per second over the whole run.
    pub throughput: f64,
}

impl Stats {
    /// One row of a bench's JSON: the case, its callers, latencies in
    /// microseconds and throughput per second.
    pub fn row(&self, case: &str, callers: usize) -> Value {
        json!({
            "case": case,
            "callers": callers,
            "p50_us": self.p50.as_secs_f64() * 1e6,
            "p99_us": self.p99.as_secs_f64() * 1e6,
            "per_sec": self.throughput,
        })
    }

    fn of(mut latencies: Vec<Duration>, elapsed: Duration) -> Self {
        latencies.sort();
        #[allow(clippy::cast_precision_loss)]
        let throughput = latencies.len() as f64 / elapsed.as_secs_f64();
        Stats { p50: percentile(&latencies, 0.50), p99: percentile(&latencies, 0.99), throughput }
    }
}

/// `times` runs of `op`, one after another, each timed on its own.
pub async fn time_each<F, Fut>(times: usize, mut op: F) -> Stats
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut latencies = Vec::with_capacity(times);
    let started = Instant::now();
    for _ in 0..times {
        let t = Instant::now();
        op().await;
        latencies.push(t.elapsed());
    }
    Stats::of(latencies, started.elapsed())
}

/// Writes a bench's results to `target/bench-<name>.json` and says where.
pub fn write_json(name: &str, results: &Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../target/bench-{name}.json"));
    match std::fs::write(&path, serde_json::to_vec_pretty(results).expect("JSON")) {
        Ok(()) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("could not write {}: {e}", path.display()),
    }
}

/// `decisions` decisions of `request` by `worker`, split over `callers`
/// concurrent tasks.
pub async fn measure(worker: &Arc<dyn Worker>, request: &DecisionRequest, decisions: usize, callers: usize) -> Stats {
    let per_caller = decisions.div_ceil(callers);
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (worker, request) = (worker.clone(), request.clone());
            tokio::spawn(async move { latencies(&worker, &request, per_caller).await })
        })
        .collect();
    let mut latencies = Vec::with_capacity(per_caller * callers);
    for task in tasks {
        latencies.extend(task.await.expect("the caller finishes"));
    }
    Stats::of(latencies, started.elapsed())
}

/// `times` decisions of `request` by `worker`, one after another, each
/// timed from the delivery to the decision (the request's copy is made
/// before the clock starts: a decision owns its request).
pub async fn latencies(worker: &Arc<dyn Worker>, request: &DecisionRequest, times: usize) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(times);
    for _ in 0..times {
        let delivery = Delivery::new(request.clone());
        let t = Instant::now();
        worker.decide(delivery).await.expect("a decision");
        latencies.push(t.elapsed());
    }
    latencies
}

/// The `p` quantile (0–1) of `sorted` latencies; zero when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let index = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[index]
}

/// `a / b`.
pub fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64()
}

/// A 20-message conversation (user and assistant in turn, about 250
/// characters each) and its tree, the path ending at its last message;
/// its messages shared, as the engine's requests hold them.
pub fn conversation() -> (Vec<SharedMessage>, RequestTree) {
    let messages: Vec<SharedMessage> = (0..20)
        .map(|i| {
            let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
            let text =
                format!("message {i}: {}", "lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(4));
            let message =
                subs_protocol::from_value::<Message>(json!({"id": format!("msg_{i}"), "role": role, "content": text}))
                    .expect("a message");
            SharedMessage::Shared(std::sync::Arc::new(message))
        })
        .collect();
    let nodes = messages
        .iter()
        .enumerate()
        .map(|(i, m)| TreeNode { message: Message::clone(m), parent_id: i.checked_sub(1).map(|p| format!("msg_{p}")) })
        .collect();
    let tree = RequestTree::new(MessageTree { nodes, head_id: Some("msg_19".to_owned()) }, &messages);
    (messages, tree)
}
