//! Several engines on one PostgreSQL database, in one process: each is a
//! node, as `subs serve` processes behind a load balancer are. What a node
//! that does not hold a session does with requests for it (forwarding them
//! to the holder and answering with its answer), and what it shows of it
//! (the holder's events, turn ends), checked request by request. The
//! processes, killed and paused, are `engine/cli/tests/all/crash.rs`'s.
//! Skipped, saying so, where PostgreSQL is not installed.

use std::sync::Arc;
use std::time::Duration;

use subs_engine::store::TurnStatus;
use subs_engine::worker::{BoxFuture, Delivery, Worker, WorkerError};
use subs_engine::{Engine, InputError};
use subs_protocol::client::ToolResult;
use subs_protocol::{ClientInput, DecisionResponse, SessionEvent};
use subs_tests::{TENANT, TestEngine, user_input};
use tokio::sync::Notify;

/// Two nodes on a fresh database.
async fn two_nodes() -> Option<(TestEngine, TestEngine)> {
    let cluster = subs_store_postgres::testing::TestCluster::shared()?;
    let url = cluster.fresh_database();
    Some((TestEngine::on_postgres(url.clone()).await, TestEngine::on_postgres(url).await))
}

/// Answers every delivery with the engine's proposal once the gate is
/// open; tells when a delivery arrives. Holding a delivery keeps the
/// session busy, so its node keeps its lease.
#[derive(Default)]
struct Gated {
    arrived: Notify,
    open: tokio::sync::watch::Sender<bool>,
}

impl Worker for Gated {
    fn decide(&self, delivery: Delivery) -> BoxFuture<'_, Result<DecisionResponse, WorkerError>> {
        self.arrived.notify_one();
        let mut open = self.open.subscribe();
        Box::pin(async move {
            let _ = open.wait_for(|open| *open).await;
            Ok(delivery.request.proposed)
        })
    }
}

fn register(engine: &Engine, worker: &Arc<Gated>) {
    engine.register_agent(TENANT, "gated", worker.clone());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_the_session_forwards_to_its_holder_and_shows_its_events() {
    let Some((a, b)) = two_nodes().await else { return };
    let gated = Arc::new(Gated::default());
    register(&a.engine, &gated);
    register(&b.engine, &gated);

    // Node A takes the session: its first delivery waits at the gate.
    let arrived = gated.arrived.notified();
    let first = a.engine.sessions().input(TENANT, "s", user_input("gated", Some("t1"), "hi"), Default::default()).await;
    assert_eq!(first.expect("accepted by A").turn_id.as_deref(), Some("t1"));
    tokio::time::timeout(Duration::from_secs(10), arrived).await.expect("A delivers");
    let mut follow = b.engine.reads().follow(TENANT, "s", None).expect("B follows the session");

    // Through B: a second turn is queued by A, the same turn again is A's
    // existing turn, and what A refuses B refuses the same way.
    let queued =
        b.engine.sessions().input(TENANT, "s", user_input("gated", Some("t2"), "more"), Default::default()).await;
    let queued = queued.expect("forwarded and accepted");
    assert_eq!((queued.turn_id.as_deref(), queued.existing), (Some("t2"), false));
    let again = b.engine.sessions().input(TENANT, "s", user_input("gated", Some("t1"), "hi"), Default::default()).await;
    assert!(again.expect("forwarded").existing, "the same turn id is the turn A runs");
    let stray = ClientInput::ToolResult(ToolResult { id: "nope".to_owned(), attempt: None, result: None });
    let refused = b.engine.sessions().input(TENANT, "s", stray.clone(), Default::default()).await.expect_err("refused");
    let local = a.engine.sessions().input(TENANT, "s", stray, Default::default()).await.expect_err("refused");
    assert_eq!(refused, local, "B answers what A answers");

    // A cancel through B ends A's turn; the queued one then runs on A.
    assert!(b.engine.sessions().cancel(TENANT, "s").await.expect("forwarded"), "a turn was open");
    gated.open.send_replace(true);
    let t2 = tokio::time::timeout(Duration::from_secs(20), b.engine.reads().wait_turn(TENANT, "s", "t2"))
        .await
        .expect("B hears the end of A's turn")
        .expect("the store answers");
    assert_eq!(t2.status, TurnStatus::Done);

    // B's follower saw A's events, each once, in order.
    let mut seen = Vec::new();
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), follow.next()).await.expect("an event").unwrap();
        let Some(seq) = frame.seq else { continue };
        let event = frame.parse().expect("a session event");
        seen.push(seq);
        if matches!(&event, SessionEvent::TurnDone(done) if done.turn_id == "t2") {
            break;
        }
    }
    assert_eq!(seen, (0..seen.len() as u64).collect::<Vec<_>>(), "every event once, in order");
    let t1 = b.engine.reads().turn(TENANT, "s", "t1").await.unwrap().expect("stored");
    assert_eq!(t1.status, TurnStatus::Failed, "cancelled through B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_released_by_one_node_is_taken_by_the_next_without_forwarding() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    let url = cluster.fresh_database();
    // A's actor lingers briefly, then leaves and releases the lease.
    let config = subs_engine::EngineConfig { session_linger: Duration::from_millis(50), ..subs_tests::test_config() };
    let a = TestEngine::on_postgres_with(url.clone(), config).await;
    let b = TestEngine::on_postgres(url).await;
    let gated = Arc::new(Gated::default());
    gated.open.send_replace(true);
    register(&a.engine, &gated);
    register(&b.engine, &gated);
    let turn = a.chat("s", "gated", "hello").await;
    assert_eq!(turn.status, TurnStatus::Done);
    subs_tests::wait::eventually(Duration::from_secs(10), "A lets the session go", || async {
        a.engine.reads().active_sessions() == 0
    })
    .await;
    let turn = b.chat("s", "gated", "again").await;
    assert_eq!(turn.status, TurnStatus::Done);
    assert_eq!(b.transcript("s").await.len(), 4, "both turns, one history");
    assert_eq!(a.transcript("s").await, b.transcript("s").await, "read alike from either node");
}

#[tokio::test]
async fn an_input_naming_a_session_that_does_not_exist_is_refused_by_any_node() {
    let Some((a, b)) = two_nodes().await else { return };
    let stray = ClientInput::ToolResult(ToolResult { id: "c".to_owned(), attempt: None, result: None });
    for node in [&a, &b] {
        let refused = node.engine.sessions().input(TENANT, "ghost", stray.clone(), Default::default()).await;
        assert!(matches!(refused, Err(InputError::NoSession(ref s)) if s == "ghost"), "{refused:?}");
    }
}
