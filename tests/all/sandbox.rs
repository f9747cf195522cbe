//! The component sandbox: hostile guests, each a real component, fail
//! their own delivery with an error that says what happened, while
//! well-behaved guests go on; no state survives a decision; a restart
//! compiles nothing. Limits are set small per agent so each case ends in
//! well under a second.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use subs_engine::store::TurnStatus;
use subs_engine::worker::component::{AgentPolicy, ComponentAgent, ComponentHost, HostConfig, LimitOverrides};
use subs_engine::worker::{Delivery, Worker, WorkerError};
use subs_protocol::trigger::ClientAction;
use subs_protocol::{DecisionRequest, DecisionResponse, Trigger};
use subs_tests::{TENANT, TestEngine, agent, guests};

/// Limits small enough for a test: a runaway guest is stopped fast.
fn small() -> LimitOverrides {
    LimitOverrides {
        memory_bytes: Some(32 << 20),
        cpu: Some(Duration::from_millis(150)),
        wall_clock: Some(Duration::from_secs(3)),
        ..LimitOverrides::default()
    }
}

/// The component at `path` as agent `name` of `tenant` with `limits`.
fn bound(path: &str, tenant: &str, name: &str, limits: LimitOverrides) -> ComponentAgent {
    agent(path).for_agent(tenant, name, &AgentPolicy { limits, http_hosts: None }).expect("a valid policy")
}

fn action(name: &str, args: Value) -> DecisionRequest {
    let mut request =
        DecisionRequest::for_trigger(Trigger::ClientAction(ClientAction { name: name.to_owned(), args: Some(args) }));
    request.session_id = format!("sess_{name}");
    request
}

async fn decide(worker: &ComponentAgent, request: DecisionRequest) -> Result<DecisionResponse, WorkerError> {
    worker.decide(Delivery::new(request)).await
}

/// The text of the decision's only message.
fn text(decision: &DecisionResponse) -> String {
    let messages = decision.messages();
    assert_eq!(messages.len(), 1, "{decision:?}");
    serde_json::to_value(&messages[0]).unwrap()["content"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_by_the_cpu_limit() {
    let spin = bound(guests::TEST_SPIN, "t", "spin", small());
    let started = Instant::now();
    match decide(&spin, action("go", Value::Null)).await {
        Err(e @ WorkerError::LimitExceeded(_)) => {
            assert!(e.to_string().contains("CPU limit of 150ms"), "{e}");
            assert!(!e.is_retryable(), "the same request would loop again");
        }
        other => panic!("expected the CPU limit, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "stopped after {:?}", started.elapsed());
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_at_the_request_deadline() {
    // A CPU limit far away: the request's own deadline stops it.
    let limits = LimitOverrides { cpu: Some(Duration::from_secs(60)), ..small() };
    let spin = bound(guests::TEST_SPIN, "t", "spin", limits);
    let mut request = action("go", Value::Null);
    request.deadline = Some(subs_engine::clock::rfc3339(subs_engine::clock::now_ms() + 200));
    let started = Instant::now();
    match decide(&spin, request).await {
        Err(e @ WorkerError::Timeout(_)) => assert!(e.to_string().contains("did not decide within"), "{e}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "stopped after {:?}", started.elapsed());
}

#[tokio::test]
async fn a_guest_waiting_on_the_clock_is_stopped_at_the_deadline() {
    let limits = LimitOverrides { wall_clock: Some(Duration::from_millis(200)), ..small() };
    let sleeper = bound(guests::TEST_SLEEPER, "t", "sleeper", limits);
    let started = Instant::now();
    match decide(&sleeper, action("go", Value::Null)).await {
        Err(e @ WorkerError::Timeout(_)) => assert!(e.to_string().contains("200ms"), "{e}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2), "stopped after {:?}", started.elapsed());
}

#[tokio::test]
async fn a_memory_bomb_is_stopped_by_the_memory_limit() {
    let bomb = bound(guests::TEST_MEMORY_BOMB, "t", "bomb", small());
    match decide(&bomb, action("go", Value::Null)).await {
        Err(e @ WorkerError::LimitExceeded(_)) => assert!(e.to_string().contains("memory limit of 32.0 MiB"), "{e}"),
        other => panic!("expected the memory limit, got {other:?}"),
    }
}

#[tokio::test]
async fn a_stack_overflow_traps() {
    let deep = bound(guests::TEST_STACK_OVERFLOW, "t", "deep", small());
    match decide(&deep, action("go", Value::Null)).await {
        Err(e @ WorkerError::Trapped(_)) => assert!(e.to_string().contains("stack overflow"), "{e}"),
        other => panic!("expected a stack overflow, got {other:?}"),
    }
}

#[tokio::test]
async fn a_panic_traps_and_quotes_the_panic_message() {
    let garbage = bound(guests::TEST_GARBAGE, "t", "garbage", small());
    match decide(&garbage, action("panic", Value::Null)).await {
        Err(e @ WorkerError::Trapped(_)) => {
            let e = e.to_string();
            assert!(e.contains("unreachable"), "{e}");
            assert!(e.contains("the garbage agent panics on purpose"), "{e}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
}

#[tokio::test]
async fn a_100_mb_response_is_refused() {
    // With room to build it, the decision is refused for its size...
    let roomy = LimitOverrides { memory_bytes: Some(256 << 20), cpu: Some(Duration::from_secs(10)), ..small() };
    let huge = bound(guests::TEST_HUGE_RESPONSE, "t", "huge", roomy);
    match decide(&huge, action("go", Value::Null)).await {
        Err(e @ WorkerError::LimitExceeded(_)) => {
            assert!(e.to_string().contains("decision size limit of 16.0 MiB"), "{e}");
        }
        other => panic!("expected the decision size limit, got {:?}", other.map(|_| "a decision")),
    }
    // ...and under the default memory limit it cannot even be built.
    let huge = bound(guests::TEST_HUGE_RESPONSE, "t", "huge", LimitOverrides::default());
    match decide(&huge, action("go", Value::Null)).await {
        Err(e @ WorkerError::LimitExceeded(_)) => assert!(e.to_string().contains("memory limit of 64.0 MiB"), "{e}"),
        other => panic!("expected the memory limit, got {:?}", other.map(|_| "a decision")),
    }
}

#[tokio::test]
async fn a_guest_that_opens_files_finds_none() {
    // The filesystem is linked (other languages' runtimes import it), with
    // no directory in it: opening fails as a WASI error the guest sees.
    let files = bound(guests::TEST_OPEN_FILE, "t", "files", small());
    match decide(&files, action("go", Value::Null)).await {
        Err(WorkerError::Declined { message, retryable: false }) => {
            assert!(message.contains("No such file or directory"), "{message}");
        }
        other => panic!("expected the guest's own error, got {other:?}"),
    }
}

#[tokio::test]
async fn the_environment_is_empty() {
    let env = bound(guests::TEST_READ_ENV, "t", "env", small());
    match decide(&env, action("go", Value::Null)).await {
        Err(e @ WorkerError::Trapped(_)) => {
            let e = e.to_string();
            assert!(e.contains("reading HOME from the environment (0 variables)"), "{e}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
}

/// A loopback HTTP server answering `hello`, counting its requests; its
/// authority.
async fn hello_server() -> (String, Arc<AtomicUsize>) {
    let (addr, hits) = subs_tests::hello_server().await;
    (addr.to_string(), hits)
}

fn fetcher(hosts: &[&str]) -> ComponentAgent {
    let policy = AgentPolicy { limits: small(), http_hosts: Some(hosts.iter().map(|h| (*h).to_owned()).collect()) };
    agent(guests::TEST_FETCH).for_agent("t", "fetch", &policy).unwrap()
}

#[tokio::test]
async fn outgoing_http_reaches_only_allow_listed_hosts() {
    let (authority, hits) = hello_server().await;

    // No allow-list (the default): refused, and said so.
    let closed = bound(guests::TEST_FETCH, "t", "fetch", small());
    match decide(&closed, action("fetch", json!({"authority": authority}))).await {
        Err(e @ WorkerError::Declined { .. }) => {
            let e = e.to_string();
            assert!(e.contains("HttpRequestDenied"), "{e}");
            assert!(e.contains(&format!("refused outgoing HTTP to {authority}")), "{e}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }

    // A `Host` header naming an allowed host does not help: the check is
    // on where the request goes.
    let other_host = fetcher(&["allowed.example"]);
    let request = action("fetch", json!({"authority": authority, "host": "allowed.example"}));
    match decide(&other_host, request).await {
        Err(e @ WorkerError::Declined { .. }) => assert!(e.to_string().contains("HttpRequestDenied"), "{e}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached the server");

    // Only an agent without an allow-list is contained: the loop may send
    // its next step before its last decision is durable.
    assert!(closed.contained() && !other_host.contained());

    // On the list: the request goes out.
    let open = fetcher(&[&authority]);
    let decision = decide(&open, action("fetch", json!({"authority": authority}))).await.unwrap();
    assert_eq!(text(&decision), "200 hello");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[test]
fn an_allow_list_entry_that_is_not_a_host_is_refused() {
    let policy = AgentPolicy { limits: LimitOverrides::default(), http_hosts: Some(vec!["http://x/y".to_owned()]) };
    let err = agent(guests::TEST_FETCH).for_agent("t", "fetch", &policy).unwrap_err();
    assert!(err.to_string().contains("`http://x/y` is not a host"), "{err}");
}

#[tokio::test]
async fn the_instance_count_limit_refuses_to_start_a_component() {
    let limits = LimitOverrides { instances: Some(1), ..small() };
    let passthrough = bound(guests::PASSTHROUGH, "t", "few", limits);
    match decide(&passthrough, action("go", Value::Null)).await {
        Err(e @ WorkerError::Instantiation(_)) => assert!(e.to_string().contains("instance"), "{e}"),
        other => panic!("expected a refused start, got {other:?}"),
    }
}

/// Every hostile guest at once, next to a well-behaved one deciding over
/// and over: each hostile delivery fails on its own, every good one
/// succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_guests_fail_alone_while_a_good_guest_decides() {
    let (authority, _) = hello_server().await;
    let hostile = [
        (bound(guests::TEST_SPIN, "t", "spin", small()), action("go", Value::Null), "CPU limit"),
        (bound(guests::TEST_MEMORY_BOMB, "t", "bomb", small()), action("go", Value::Null), "memory limit"),
        (bound(guests::TEST_STACK_OVERFLOW, "t", "deep", small()), action("go", Value::Null), "stack overflow"),
        (bound(guests::TEST_GARBAGE, "t", "garbage", small()), action("panic", Value::Null), "panics on purpose"),
        // Built without WASI it has no stderr: the SDK logs the panic.
        (
            bound(guests::TEST_GARBAGE_LEAN, "t", "garbage-lean", small()),
            action("panic", Value::Null),
            "its last error log: panicked at",
        ),
        (bound(guests::TEST_HUGE_RESPONSE, "t", "huge", small()), action("go", Value::Null), "memory limit"),
        (
            bound(
                guests::TEST_SLEEPER,
                "t",
                "sleeper",
                LimitOverrides { wall_clock: Some(Duration::from_millis(300)), ..small() },
            ),
            action("go", Value::Null),
            "did not decide within",
        ),
        (bound(guests::TEST_READ_ENV, "t", "env", small()), action("go", Value::Null), "reading HOME"),
        (
            bound(guests::TEST_FETCH, "t", "fetch", small()),
            action("fetch", json!({"authority": authority})),
            "refused outgoing HTTP",
        ),
    ];
    let good = bound(guests::PASSTHROUGH, "t", "passthrough", small());
    let good_run = tokio::spawn(async move {
        let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
        request.proposed = DecisionResponse::new().with_message(subs_protocol::DraftMessage::assistant("fine"));
        for _ in 0..200 {
            let decision = good.decide(Delivery::new(request.clone())).await.expect("the good guest decides");
            assert_eq!(decision, request.proposed);
        }
    });
    let runs: Vec<_> = hostile
        .into_iter()
        .map(|(worker, request, expected)| {
            tokio::spawn(async move {
                let result = worker.decide(Delivery::new(request)).await;
                (expected, result.map(|_| "a decision"))
            })
        })
        .collect();
    for run in runs {
        let (expected, result) = run.await.unwrap();
        match result {
            Err(e) => assert!(e.to_string().contains(expected), "expected `{expected}`: {e}"),
            Ok(_) => panic!("expected `{expected}`, got a decision"),
        }
    }
    good_run.await.expect("every good decision succeeded");
}

/// The same, through the whole engine: hostile sessions' turns fail with
/// the reason, a passthrough session of the same tenant completes.
#[tokio::test]
async fn hostile_sessions_fail_their_turns_while_a_good_session_completes() {
    let t = TestEngine::start().await;
    let hostile = [
        ("spin", guests::TEST_SPIN, "CPU limit"),
        ("bomb", guests::TEST_MEMORY_BOMB, "memory limit"),
        ("deep", guests::TEST_STACK_OVERFLOW, "stack overflow"),
        ("env", guests::TEST_READ_ENV, "reading HOME"),
    ];
    let mut turns = Vec::new();
    for (name, path, expected) in hostile {
        t.engine.register_agent(TENANT, name, Arc::new(bound(path, TENANT, name, small())));
        let session = format!("sess_{name}");
        let turn = t.send(&session, name, "hello").await;
        turns.push((session, turn, expected));
    }
    let good = t.chat("sess_good", "passthrough", "hello").await;
    assert_eq!(good.status, TurnStatus::Done, "{good:?}");
    for (session, turn, expected) in turns {
        let record = t.wait(&session, &turn).await;
        assert_eq!(record.status, TurnStatus::Failed, "{session}: {record:?}");
        let error = record.data.as_ref().and_then(|d| d["error"].as_str()).unwrap_or_default().to_owned();
        assert!(error.contains(expected), "{session}: expected `{expected}` in {error}");
    }
}

fn xored(secret: &str) -> Value {
    json!(secret.bytes().map(|b| b ^ 0x5A).collect::<Vec<u8>>())
}

#[tokio::test]
async fn a_secret_kept_in_one_decision_is_gone_in_the_next_and_from_other_tenants() {
    let secret = "s3cr3t-of-tenant-a-7f1d";
    let args = json!({"xored": xored(secret)});
    let a = bound(guests::TEST_SECRET, "tenant-a", "keeper", small());
    let b = bound(guests::TEST_SECRET, "tenant-b", "keeper", small());

    // Within one decision the global and the scan both work...
    assert_eq!(text(&decide(&a, action("store-and-read", args.clone())).await.unwrap()), secret);
    assert_eq!(text(&decide(&a, action("store-and-scan", args.clone())).await.unwrap()), "found");

    // ...but nothing of it is left for the next decision, of either tenant.
    for _ in 0..3 {
        assert_eq!(text(&decide(&a, action("store", args.clone())).await.unwrap()), "stored");
        assert_eq!(text(&decide(&a, action("read", Value::Null)).await.unwrap()), "(none)");
        assert_eq!(text(&decide(&a, action("scan", args.clone())).await.unwrap()), "not found");
        assert_eq!(text(&decide(&b, action("read", Value::Null)).await.unwrap()), "(none)");
        assert_eq!(text(&decide(&b, action("scan", args.clone())).await.unwrap()), "not found");
    }
}

/// A fresh instance's memory is clean however its predecessor dirtied its
/// slot: written on hundreds of separate pages (more runs than one scan of
/// dirty pages reports) and on more pages than the host keeps mapped
/// between instances. The scan grows the heap over the same pages first.
#[tokio::test]
async fn a_secret_sprayed_over_thousands_of_pages_is_gone_in_the_next_decision() {
    let secret = "sprayed-s3cr3t-4b9e";
    let args = json!({"xored": xored(secret)});
    let limits = LimitOverrides { memory_bytes: Some(64 << 20), cpu: Some(Duration::from_secs(2)), ..small() };
    let a = bound(guests::TEST_SECRET, "tenant-a", "sprayer", limits.clone());
    let b = bound(guests::TEST_SECRET, "tenant-b", "sprayer", limits);

    assert_eq!(text(&decide(&a, action("spray-and-scan", args.clone())).await.unwrap()), "found");
    for _ in 0..3 {
        assert_eq!(text(&decide(&a, action("spray", args.clone())).await.unwrap()), "sprayed");
        assert_eq!(text(&decide(&a, action("grow-and-scan", args.clone())).await.unwrap()), "not found");
        assert_eq!(text(&decide(&a, action("spray", args.clone())).await.unwrap()), "sprayed");
        assert_eq!(text(&decide(&b, action("grow-and-scan", args.clone())).await.unwrap()), "not found");
    }
}

#[tokio::test]
async fn a_restarted_host_compiles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        || HostConfig { max_concurrent: 4, compile_cache: Some(dir.path().to_owned()), ..HostConfig::default() };
    let bytes = std::fs::read(guests::PASSTHROUGH).unwrap();
    // A core module is made a component only when it is compiled.
    let lean = std::fs::read(guests::PASSTHROUGH_LEAN).unwrap();
    let request = DecisionRequest::for_trigger(Trigger::SessionStart);

    let first = ComponentHost::with_config(config()).unwrap();
    for _ in 0..2 {
        first.load(&bytes).unwrap();
        first.load(&lean).unwrap();
    }
    assert_eq!(first.compilations(), 2, "each compiled once, then loaded from the cache");
    drop(first);

    let second = ComponentHost::with_config(config()).unwrap();
    let agent = second.load(&bytes).unwrap();
    let lean_agent = second.load(&lean).unwrap();
    assert_eq!(second.compilations(), 0, "the restart compiled nothing");
    assert_eq!(agent.decide(Delivery::new(request.clone())).await.unwrap(), request.proposed);
    assert_eq!(lean_agent.decide(Delivery::new(request.clone())).await.unwrap(), request.proposed);
    drop(lean_agent);

    // An artifact that no longer loads is compiled again, not trusted.
    // (Replaced, not rewritten in place: artifacts are mapped into memory,
    // and the cache itself only ever renames over them.)
    drop((agent, second));
    let artifacts = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path());
    for path in artifacts.filter(|p| p.extension().is_some_and(|x| x == "cwasm")) {
        let garbage = path.with_extension("garbage");
        std::fs::write(&garbage, b"garbage").unwrap();
        std::fs::rename(&garbage, &path).unwrap();
    }
    let third = ComponentHost::with_config(config()).unwrap();
    third.load(&bytes).unwrap();
    assert_eq!(third.compilations(), 1);
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn guest_stderr_is_logged_line_by_line_with_tenant_agent_and_session() {
    let env = bound(guests::TEST_READ_ENV, "tenant-x", "env-reader", small());
    let mut request = action("go", Value::Null);
    request.session_id = "sess_logged".to_owned();
    let (_, logs) = with_logs(&env, request).await;
    let line = logs.lines().find(|l| l.contains("reading HOME")).unwrap_or_else(|| panic!("no guest line in {logs}"));
    for field in ["tenant=tenant-x", "agent=env-reader", "session=sess_logged", "stream=\"stderr\""] {
        assert!(line.contains(field), "{field} missing: {line}");
    }
}

/// Guest log lines captured from `decide` of `agent`, and its result.
async fn with_logs(
    agent: &ComponentAgent,
    request: DecisionRequest,
) -> (Result<DecisionResponse, WorkerError>, String) {
    use tracing::instrument::WithSubscriber;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let result = agent.decide(Delivery::new(request)).with_subscriber(subscriber).await;
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    (result, logs)
}

#[tokio::test]
async fn a_log_flood_is_cut_at_the_decisions_log_budget() {
    // 1 MiB lines through the host's `log`, until the CPU limit: each line
    // is cut to 4 KiB, and the decision's lines stop at its 1 MiB budget.
    let limits = LimitOverrides { cpu: Some(Duration::from_millis(300)), ..small() };
    let flood = bound(guests::TEST_HOSTILE, "t", "flood", limits);
    let (result, logs) = with_logs(&flood, action("log-flood", Value::Null)).await;
    match result {
        Err(e @ WorkerError::LimitExceeded(_)) => assert!(e.to_string().contains("CPU limit of 300ms"), "{e}"),
        other => panic!("expected the CPU limit, got {other:?}"),
    }
    let guest: Vec<&str> = logs.lines().filter(|l| l.contains("subs::guest")).collect();
    let bytes: usize = guest.iter().map(|l| l.len()).sum();
    assert!(bytes < (1 << 20) + (64 << 10), "{bytes} bytes of guest log lines");
    assert!(guest.iter().all(|l| l.len() < 4096 + 512), "every line is cut");
    let warnings = guest.iter().filter(|l| l.contains("passed their limit")).count();
    assert_eq!(warnings, 1, "one warning for the drop");
}

#[tokio::test]
async fn time_in_host_calls_counts_against_the_cpu_limit() {
    // Nearly all of this guest's time is spent in the host, filling 48 MiB
    // random buffers; the epoch callback that checks the CPU limit runs
    // only between two of them. Counting only the ticks it sees, the guest
    // ran for a tick per call, dozens of times its limit.
    let limits = LimitOverrides {
        cpu: Some(Duration::from_millis(500)),
        wall_clock: Some(Duration::from_secs(60)),
        memory_bytes: Some(128 << 20),
        ..LimitOverrides::default()
    };
    let random = bound(guests::TEST_HOSTILE, "t", "random", limits);
    let started = std::time::Instant::now();
    match decide(&random, action("random-loop", Value::Null)).await {
        Err(e @ WorkerError::LimitExceeded(_)) => assert!(e.to_string().contains("CPU limit of 500ms"), "{e}"),
        other => panic!("expected the CPU limit, got {other:?}"),
    }
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(4), "stopped by its CPU limit: {elapsed:?}");
}
