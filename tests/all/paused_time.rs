//! Time is injectable: an engine reading the time from tokio's clock
//! (`TokioClock`), on paused time, runs backoffs and decision deadlines
//! of minutes without waiting for them, and records the times the paused
//! clock gave.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use subs_engine::clock::TokioClock;
use subs_engine::store::{MemStore, TurnStatus};
use subs_engine::worker::{BoxFuture, Delivery, Worker, WorkerError};
use subs_engine::{Engine, EngineConfig};
use subs_protocol::{DecisionResponse, RetryPolicy};
use subs_tests::{TENANT, user_input};

/// Declines (retryably) its first `failures` deliveries, then answers the
/// engine's proposal; records each delivery's `attempts`.
struct Flaky {
    failures: AtomicU32,
    seen: Arc<Mutex<Vec<u32>>>,
}

impl Worker for Flaky {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(delivery.request.attempts);
            if self.failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
                return Err(WorkerError::Declined { message: "not yet".to_owned(), retryable: true });
            }
            Ok(delivery.request.proposed)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn retry_backoffs_run_on_paused_time() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let config = EngineConfig {
        default_retry: RetryPolicy {
            timeout_secs: None,
            max_retries: 3,
            backoff_base_secs: 60.0,
            backoff_max_secs: 120.0,
        },
        clock: Arc::new(TokioClock::new()),
        ..EngineConfig::default()
    };
    let engine = Engine::open(Arc::new(MemStore::new()), subs_engine::model::Models::with_offline(), config);
    engine.register_agent(TENANT, "flaky", Arc::new(Flaky { failures: AtomicU32::new(2), seen: seen.clone() }));

    let virtual_start = tokio::time::Instant::now();
    let real_start = std::time::Instant::now();
    let input = user_input("flaky", Some("the-turn"), "hi");
    engine.sessions().input(TENANT, "s", input, Default::default()).await.expect("input accepted");
    let ended = engine.reads().wait_turn(TENANT, "s", "the-turn").await.expect("the store answers");
    assert_eq!(ended.status, TurnStatus::Done, "{ended:?}");

    // The first step took three deliveries, 60 s and then 120 s apart.
    assert_eq!(seen.lock().unwrap()[..3], [1, 2, 3]);
    let waited = virtual_start.elapsed();
    assert!(waited >= Duration::from_secs(180), "the backoffs were waited on the paused clock: {waited:?}");
    assert!(real_start.elapsed() < waited / 10, "and not in real time: {:?}", real_start.elapsed());
    // The turn's times are the paused clock's.
    let took = ended.ended_ms.expect("an end") - ended.started_ms;
    assert!(took >= 180_000, "the turn took {took} ms of the clock the engine reads");
}

/// Takes every delivery and never answers.
struct Silent;

impl Worker for Silent {
    fn decide(&self, _: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_decision_deadline_of_ten_minutes_passes_on_paused_time() {
    let config = EngineConfig {
        default_retry: RetryPolicy {
            timeout_secs: Some(600.0),
            max_retries: 1,
            backoff_base_secs: 30.0,
            backoff_max_secs: 30.0,
        },
        clock: Arc::new(TokioClock::new()),
        ..EngineConfig::default()
    };
    let engine = Engine::open(Arc::new(MemStore::new()), subs_engine::model::Models::with_offline(), config);
    engine.register_agent(TENANT, "silent", Arc::new(Silent));

    let virtual_start = tokio::time::Instant::now();
    let real_start = std::time::Instant::now();
    engine
        .sessions()
        .input(TENANT, "s", user_input("silent", Some("t"), "hi"), Default::default())
        .await
        .expect("accepted");
    let ended = engine.reads().wait_turn(TENANT, "s", "t").await.expect("the store answers");

    // Two deliveries of 600 s each, 30 s apart, then the turn fails.
    assert_eq!(ended.status, TurnStatus::Failed, "{ended:?}");
    let data = ended.data.expect("the failure");
    assert_eq!(data["code"], "decision_failed");
    assert!(data["error"].as_str().is_some_and(|e| e.contains("600")), "the deadline is named: {data}");
    let waited = virtual_start.elapsed();
    assert!(waited >= Duration::from_secs(1230) && waited < Duration::from_secs(1300), "{waited:?}");
    assert!(real_start.elapsed() < Duration::from_secs(10), "not waited in real time: {:?}", real_start.elapsed());
}
