//! Replay throughput: recorded decisions of the `tools` agent rebuilt from
//! a redb store and decided again by the same build, a fresh instance
//! each, compared with the recorded decisions.
//!
//! ```text
//! cargo bench -p subs-tests --bench replay                  # 400 sessions, 9 rounds
//! BENCH_SESSIONS=1000 BENCH_ROUNDS=9 cargo bench -p subs-tests --bench replay
//! ```
//!
//! The sessions are recorded first by an engine with the offline model:
//! each has a turn in which the model calls `add` and a plain chat turn
//! (session start, the client's messages, the model's replies, the tool's
//! execution and result). Each round then replays every decision of every
//! session (`Selection` with no session named, so the agent's most recent
//! sessions), in process, as `POST /v1/agents/{id}/replay` does: reading
//! the steps and messages, rebuilding each request, deciding it and
//! diffing. The figure is decisions per second over the round, wall clock;
//! the table goes to stdout and, as JSON, to `target/bench-replay.json`.

use std::time::Instant;

use serde_json::json;
use subs_engine::replay::{self, Selection};
use subs_tests::bench::write_json;
use subs_tests::{TENANT, TestEngine, agent, guests};

#[allow(unsafe_code)]
fn main() {
    // See the component bench: a backtrace per torn-down store otherwise.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet; the runtime starts below.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default);
    let (sessions, rounds) = (env("BENCH_SESSIONS", 400), env("BENCH_ROUNDS", 9));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(sessions, rounds));
}

async fn run(sessions: usize, rounds: usize) {
    let t = TestEngine::start().await;
    let recording = Instant::now();
    for i in 0..sessions {
        let session = format!("s{i}");
        t.chat(&session, "tools", &format!(r#"use tool add with {{"a": {i}, "b": 2}}"#)).await;
        t.chat(&session, "tools", "thanks").await;
    }
    println!("recorded {sessions} sessions in {:.1} s", recording.elapsed().as_secs_f64());
    let candidate = agent(guests::TOOLS);
    let selection = Selection { sessions_limit: sessions, limit: replay::MAX_DECISIONS, ..Selection::default() };
    let mut per_sec = Vec::with_capacity(rounds);
    let mut decisions = 0;
    for round in 0..rounds {
        let started = Instant::now();
        let report = replay::replay(t.store.as_ref(), TENANT, "tools", &candidate, &selection, None)
            .await
            .expect("the replay runs");
        let elapsed = started.elapsed();
        assert_eq!(report.same, report.decisions, "the same build decides the same: {report:?}");
        decisions = report.decisions;
        #[allow(clippy::cast_precision_loss)]
        let rate = decisions as f64 / elapsed.as_secs_f64();
        println!(
            "round {round}: {decisions} decisions in {:.0} ms: {rate:.0} decisions/s",
            elapsed.as_secs_f64() * 1e3
        );
        per_sec.push(rate);
    }
    per_sec.sort_by(f64::total_cmp);
    let median = per_sec[per_sec.len() / 2];
    println!("replay of tools, fresh instance per decision: median {median:.0} decisions/s (target 10,000)");
    write_json(
        "replay",
        &json!({
            "sessions": sessions,
            "decisions": decisions,
            "rounds": rounds,
            "per_sec": per_sec,
            "median_per_sec": median,
            "cores": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        }),
    );
}
