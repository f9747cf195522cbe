//! Engine-run LLM calls retry per their policy with exponential backoff,
//! and a call that keeps failing ends the turn with `turn.failed` carrying
//! the provider's error code. The engine reads tokio's clock here, on
//! paused time, so backoffs of a minute cost nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use subs_engine::clock::TokioClock;

use subs_engine::model::{Completion, ModelError, Models, OfflineProvider, Provider};
use subs_engine::store::{MemStore, TurnStatus};
use subs_engine::worker::{BoxFuture, DeltaSink};
use subs_protocol::LlmRequest;
use subs_tests::{TENANT, agent, guests, user_input};

/// Fails its first `failures` calls with a retryable rate limit, then
/// answers like the offline model.
struct Flaky {
    failures: u32,
    calls: AtomicU32,
}

impl Provider for Flaky {
    fn complete(
        &self,
        mut request: LlmRequest,
        deltas: Option<DeltaSink>,
    ) -> BoxFuture<'_, Result<Completion, ModelError>> {
        Box::pin(async move {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            if n < self.failures {
                return Err(ModelError::rate_limited("slow down", None));
            }
            request.model = "offline".to_owned();
            OfflineProvider::new().complete(request, deltas).await
        })
    }
}

/// Runs one turn whose LLM call fails `failures` times, on paused time:
/// backoffs of 30 s and 60 s pass without being waited for. Returns the
/// turn, the provider's calls, and the time that passed on the clock the
/// engine reads.
async fn run(failures: u32) -> (subs_engine::store::TurnRecord, u32, Duration) {
    let flaky = Arc::new(Flaky { failures, calls: AtomicU32::new(0) });
    let mut models = Models::with_offline();
    models.register("flaky", flaky.clone());
    let config = subs_engine::EngineConfig {
        default_model: "flaky/model".to_owned(),
        default_retry: subs_protocol::RetryPolicy {
            timeout_secs: Some(10.0),
            max_retries: 2,
            backoff_base_secs: 30.0,
            backoff_max_secs: 60.0,
        },
        clock: Arc::new(TokioClock::new()),
        ..subs_engine::EngineConfig::default()
    };
    // In memory: a store with a writer thread would leave the runtime idle
    // while it commits, and paused time would jump ahead meanwhile.
    let engine = subs_engine::Engine::start(Arc::new(MemStore::new()), models, config).await.unwrap();
    engine.register_agent(TENANT, "helper", Arc::new(agent(guests::PASSTHROUGH)));
    let start = tokio::time::Instant::now();
    engine.sessions().input(TENANT, "s", user_input("helper", Some("t1"), "hi"), Default::default()).await.unwrap();
    let turn = engine.reads().wait_turn(TENANT, "s", "t1").await.unwrap();
    (turn, flaky.calls.load(Ordering::SeqCst), start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_failing_call_is_retried_until_it_succeeds() {
    let real = std::time::Instant::now();
    let (turn, calls, waited) = run(2).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    assert_eq!(calls, 3, "two failures, then success");
    // Backoffs of 30 s, then 60 s: exponential, capped by backoff_max_secs.
    assert!(waited >= Duration::from_secs(90) && waited < Duration::from_secs(100), "{waited:?}");
    assert!(real.elapsed() < Duration::from_secs(30), "not waited in real time: {:?}", real.elapsed());
}

#[tokio::test(start_paused = true)]
async fn a_call_failing_past_its_retries_fails_the_turn_with_its_code() {
    let (turn, calls, waited) = run(10).await;
    assert_eq!(calls, 3, "one try and max_retries = 2 retries");
    assert!(waited >= Duration::from_secs(90), "both backoffs passed before the turn failed: {waited:?}");
    assert_eq!(turn.status, TurnStatus::Failed);
    let data = turn.data.unwrap();
    assert_eq!(data["code"], "rate_limited");
    assert_eq!(data["error"], "slow down");
}
