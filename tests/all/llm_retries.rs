//! Engine-run LLM calls retry per their policy with exponential backoff,
//! and a call that keeps failing ends the turn with `turn.failed` carrying
//! the provider's error code.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use subs_engine::model::{ModelError, Models, OfflineProvider, Provider};
use subs_engine::store::TurnStatus;
use subs_engine::worker::{BoxFuture, DeltaSink};
use subs_protocol::{LlmRequest, LlmResponse};
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
    ) -> BoxFuture<'_, Result<LlmResponse, ModelError>> {
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

async fn run(failures: u32) -> (subs_engine::store::TurnRecord, u32) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(subs_store_redb::RedbStore::open(dir.path().join("subs.redb")).unwrap());
    let flaky = Arc::new(Flaky { failures, calls: AtomicU32::new(0) });
    let mut models = Models::with_offline();
    models.register("flaky", flaky.clone());
    let config = subs_engine::EngineConfig {
        default_model: "flaky/model".to_owned(),
        default_retry: subs_protocol::RetryPolicy {
            timeout_secs: Some(10.0),
            max_retries: 2,
            backoff_base_secs: 0.02,
            backoff_max_secs: 0.05,
        },
        ..subs_engine::EngineConfig::default()
    };
    let engine = subs_engine::Engine::start(store, models, config).await.unwrap();
    engine.register_agent(TENANT, "helper", Arc::new(agent(guests::PASSTHROUGH)));
    engine.input(TENANT, "s", user_input("helper", Some("t1"), "hi"), Default::default()).await.unwrap();
    let turn = tokio::time::timeout(std::time::Duration::from_secs(20), engine.wait_turn(TENANT, "s", "t1"))
        .await
        .unwrap()
        .unwrap();
    (turn, flaky.calls.load(Ordering::SeqCst))
}

#[tokio::test]
async fn a_failing_call_is_retried_until_it_succeeds() {
    let (turn, calls) = run(2).await;
    assert_eq!(turn.status, TurnStatus::Done, "{turn:?}");
    assert_eq!(calls, 3, "two failures, then success");
}

#[tokio::test]
async fn a_call_failing_past_its_retries_fails_the_turn_with_its_code() {
    let (turn, calls) = run(10).await;
    assert_eq!(calls, 3, "one try and max_retries = 2 retries");
    assert_eq!(turn.status, TurnStatus::Failed);
    let data = turn.data.unwrap();
    assert_eq!(data["code"], "rate_limited");
    assert_eq!(data["error"], "slow down");
}
