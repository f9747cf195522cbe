//! One decision over branches of growing length: the `tools` example agent
//! deciding a `tool.execute` of `add` (a fresh instance per decision, the
//! engine's default), the request's branch 20, 200, 2,000 and 4,000
//! messages long. The agent reads only the trigger, so what the branch
//! costs is what the host and the guest pay to carry it: built against
//! `subs:agent@0.2.0` (the SDK's default), the agent gets the branch as a
//! `messages` resource it reads on demand; built against `0.1.0` (its
//! feature `wit-0-1-0`), the whole branch comes in the request. Both run,
//! interleaved, in the same process.
//!
//! ```text
//! cargo bench -p subs-tests --bench branch            # 2,000 decisions per length
//! BENCH_DECISIONS=500 BENCH_LENGTHS=20,4000 cargo bench -p subs-tests --bench branch
//! ```
//!
//! A branch is what a session of the API bench's tool turns holds: a plain
//! exchange (a user's question, the assistant's answer), then turns of
//! four messages (the user asks for `add`, the assistant calls it, the
//! tool's result, the assistant's answer), ending in a question and the
//! assistant's call that the decision executes; the session's tree is that
//! one path, and the call is the one in flight. The lengths run
//! interleaved, in `BENCH_ROUNDS` (default 10) rounds of an equal share of
//! the decisions each, so a slow spell of a shared host falls on every
//! length alike. Reported per length: p50 and p90 decision latency, the
//! request's size as JSON, and each length's p50 over the shortest's. The
//! table goes to stdout and, as JSON, to `target/bench-branch.json`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{Call, DecisionRequest, DecisionResponse, Message, MessageTree, Messages, RequestTree};
use subs_protocol::{SharedMessage, TreeNode, from_value};
use subs_tests::bench::{self, percentile, write_json};

/// The branch lengths measured unless `BENCH_LENGTHS` names others.
const LENGTHS: &[usize] = &[20, 200, 2_000, 4_000];

#[allow(unsafe_code)]
fn main() {
    // See tests/benches/component.rs: a backtrace per decision otherwise.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // SAFETY: no other thread exists yet; the runtime starts below.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    let decisions: usize = std::env::var("BENCH_DECISIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let rounds: usize = std::env::var("BENCH_ROUNDS").ok().and_then(|n| n.parse().ok()).unwrap_or(10).max(1);
    let lengths: Vec<usize> = std::env::var("BENCH_LENGTHS")
        .ok()
        .map(|l| l.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| LENGTHS.to_vec());
    assert!(!lengths.is_empty(), "BENCH_LENGTHS names no length");
    for &length in &lengths {
        assert!(length >= 2 && length.is_multiple_of(2), "BENCH_LENGTHS: {length} is not an even length of 2 or more");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run(decisions, rounds, &lengths));
}

/// The agents measured: the same `tools` agent built against each world,
/// labelled with it.
fn agents() -> Vec<(&'static str, Arc<dyn Worker>)> {
    [("subs:agent@0.2.0", subs_tests::guests::TOOLS), ("subs:agent@0.1.0", subs_tests::guests::TOOLS_WIT_0_1_0)]
        .into_iter()
        .map(|(world, path)| {
            // The label must be the component's world, or the comparison
            // says nothing: a 0.2.0 build imports the `branch` interface.
            let bytes = std::fs::read(path).expect("the tools component is built");
            let lazy = bytes.windows(23).any(|w| w == b"subs:agent/branch@0.2.0");
            assert_eq!(lazy, world.ends_with("0.2.0"), "{path} is not built against {world}");
            (world, Arc::new(subs_tests::agent(path)) as Arc<dyn Worker>)
        })
        .collect()
}

async fn run(decisions: usize, rounds: usize, lengths: &[usize]) {
    let agents = agents();
    let requests: Vec<DecisionRequest> = lengths.iter().map(|&n| request(n)).collect();
    // The same decision at every length, or the comparison means nothing.
    for (name, agent) in &agents {
        for request in &requests {
            let decision = agent.decide(Delivery::new(request.clone())).await.expect("the agent decides");
            assert_eq!(decision, expected(), "{name}, {} messages: unexpected decision", request.messages.len());
        }
    }
    let load_before = load_average();
    println!("tools agent, tool.execute of add, fresh instance per decision; {decisions} decisions per length");
    println!("in {rounds} interleaved rounds");
    println!();
    let per_round = decisions.div_ceil(rounds);
    let mut latencies = vec![vec![Vec::with_capacity(per_round * rounds); requests.len()]; agents.len()];
    for (_, agent) in &agents {
        for request in &requests {
            bench::latencies(agent, request, per_round.min(200)).await; // warm-up
        }
    }
    for _ in 0..rounds {
        for ((_, agent), mine) in agents.iter().zip(&mut latencies) {
            for (request, mine) in requests.iter().zip(mine.iter_mut()) {
                mine.extend(bench::latencies(agent, request, per_round).await);
            }
        }
    }
    println!("| world | messages | request as JSON | p50 | p90 | p50 over {} messages' |", lengths[0]);
    println!("| --- | --- | --- | --- | --- | --- |");
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for ((name, _), latencies) in agents.iter().zip(latencies) {
        let mut first_p50 = None;
        let mut last_p50 = Duration::ZERO;
        for (request, mut latencies) in requests.iter().zip(latencies) {
            latencies.sort();
            let (p50, p90) = (percentile(&latencies, 0.50), percentile(&latencies, 0.90));
            let first = *first_p50.get_or_insert(p50);
            let over_first = p50.as_secs_f64() / first.as_secs_f64();
            let bytes = serde_json::to_vec(request).expect("JSON").len();
            println!(
                "| {name} | {} | {:.1} KB | {} | {} | {over_first:.2}× |",
                request.messages.len(),
                bytes as f64 / 1e3,
                micros(p50),
                micros(p90)
            );
            rows.push(json!({
                "world": name,
                "messages": request.messages.len(),
                "request_bytes": bytes,
                "decisions": latencies.len(),
                "p50_us": p50.as_secs_f64() * 1e6,
                "p90_us": p90.as_secs_f64() * 1e6,
                "p50_over_shortest": over_first,
            }));
            last_p50 = p50;
        }
        let longest_over_shortest = first_p50.map_or(f64::NAN, |f| last_p50.as_secs_f64() / f.as_secs_f64());
        ratios.push(json!({ "world": name, "longest_over_shortest_p50": longest_over_shortest }));
    }
    println!();
    for r in &ratios {
        println!(
            "{}: p50 at {} messages over p50 at {}: {:.2}× (target ≤ 1.5× for 4,000 over 20)",
            r["world"].as_str().unwrap_or_default(),
            lengths.last().copied().unwrap_or_default(),
            lengths[0],
            r["longest_over_shortest_p50"].as_f64().unwrap_or(f64::NAN),
        );
    }
    println!("load average (1, 5, 15 min): {load_before} at the start, {} at the end", load_average());
    write_json(
        "branch",
        &json!({
            "bench": "branch",
            "decisions_per_length": per_round * rounds,
            "rounds": rounds,
            "rows": rows,
            "ratios": ratios,
            "load_average": {"start": load_before, "end": load_average()},
        }),
    );
}

fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// The arguments of every `add` call, as the API bench's user asks.
fn arguments() -> Value {
    json!({"a": 1, "b": 2})
}

/// A `tool.execute` of `add` whose branch is `length` messages (even, 2
/// or more) of a session of tool turns; see the module's doc.
fn request(length: usize) -> DecisionRequest {
    let turns = (length - 2) / 4;
    let mut messages: Vec<Value> = Vec::with_capacity(length);
    let mut push = |mut message: Value| {
        message["id"] = json!(format!("msg_{}", messages.len()));
        messages.push(message);
    };
    if !(length - 2).is_multiple_of(4) {
        let lorem = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(4);
        push(json!({"role": "user", "content": format!("hello, tell me what you can do. {lorem}")}));
        push(json!({"role": "assistant", "content": format!("I can add numbers and tell the time. {lorem}")}));
    }
    let call = |turn: usize| {
        json!({"id": format!("call_{turn}"), "type": "function",
            "function": {"name": "add", "arguments": arguments().to_string()}})
    };
    for turn in 0..=turns {
        push(json!({"role": "user", "content": format!("use tool add with {}", arguments())}));
        push(json!({"role": "assistant", "tool_calls": [call(turn)]}));
        if turn == turns {
            break;
        }
        let sum = json!({"sum": 3}).to_string();
        push(json!({"role": "tool", "content": sum, "tool_call_id": format!("call_{turn}"), "name": "add"}));
        push(json!({"role": "assistant", "content": format!("add returned {sum}.")}));
    }
    assert_eq!(messages.len(), length);
    let messages: Vec<SharedMessage> = messages
        .into_iter()
        .map(|m| SharedMessage::Shared(Arc::new(from_value::<Message>(m).expect("a message"))))
        .collect();
    let nodes = messages
        .iter()
        .enumerate()
        .map(|(i, m)| TreeNode { message: Message::clone(m), parent_id: i.checked_sub(1).map(|p| format!("msg_{p}")) })
        .collect();
    let head_id = Some(format!("msg_{}", length - 1));
    let message_tree = RequestTree::new(MessageTree { nodes, head_id }, &messages);

    let id = format!("call_{turns}");
    let mut request = subs_tests::tool_execute("add", arguments());
    if let subs_protocol::Trigger::ToolExecute(execute) = &mut request.trigger {
        execute.id.clone_from(&id);
    }
    request.session_id = "sess_branch".to_owned();
    request.agent_id = "tools".to_owned();
    request.agent = Some(tools::Tools::new().config("subs/offline").into());
    request.calls = vec![
        from_value::<Call>(json!({
            "id": id, "kind": "tool_call", "status": "pending", "attempt": 1,
            "anchor": format!("msg_{}", length - 1), "name": "add",
            "arguments": arguments().to_string(), "handler": "worker",
        }))
        .expect("a call"),
    ];
    request.pending_calls = 1;
    request.messages = Messages::new(messages, message_tree);
    request
}

/// What the agent decides at every length: the call's sum.
fn expected() -> DecisionResponse {
    DecisionResponse::new().with_action(subs_protocol::Action::tool_result(json!({"sum": 3})))
}

/// The host's load averages over 1, 5 and 15 minutes, as
/// `/proc/loadavg` has them: on a shared machine, how busy it was.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
