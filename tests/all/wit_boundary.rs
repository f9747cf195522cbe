//! The WIT mapping is lossless in both directions, through a real
//! component: the `echo` guest returns the request it received (as JSON, in
//! `state`) and its `proposed` decision (typed, as its own decision).

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use subs_engine::worker::{Delivery, Worker};
use subs_protocol::{DecisionRequest, DecisionResponse, arbitrary, to_value};
use subs_tests::{agent, canonical, fixture_requests, fixtures, guests};

/// What the echo guest must answer for `request`.
fn expected_echo(request: &DecisionRequest) -> DecisionResponse {
    let mut expected = request.proposed.clone();
    expected.state = Some(to_value(request));
    expected
}

#[tokio::test]
async fn every_fixture_request_crosses_the_boundary_unchanged() {
    let echo = agent(guests::TEST_ECHO);
    let requests = fixture_requests();
    assert_eq!(requests.len(), 9, "one fixture request per trigger type");
    let texts = fixtures("decision_request");
    for ((name, request), (_, text)) in requests.into_iter().zip(texts) {
        let decision = echo.decide(Delivery::new(request.clone())).await.unwrap_or_else(|e| panic!("{name}: {e}"));

        // Host → guest: the request the guest saw is the fixture, field for
        // field, compared as JSON documents with sorted keys.
        let seen = decision.state.clone().expect("echo sets state");
        let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(canonical(&seen), canonical(&fixture), "{name}: request changed on the way in");

        // Guest → host: the typed decision came back as it was sent.
        assert_eq!(decision, expected_echo(&request), "{name}: decision changed on the way out");
    }
}

#[test]
fn random_requests_cross_the_boundary_unchanged() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let echo = agent(guests::TEST_ECHO);
    let mut runner = TestRunner::new(Config { cases: 96, ..Config::default() });
    runner
        .run(&arbitrary::decision_request(), |request| {
            let decision = runtime
                .block_on(echo.decide(Delivery::new(request.clone())))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(decision, expected_echo(&request));
            Ok(())
        })
        .unwrap();
}

/// The benchmarks' probes measure the parts of a real decision: the
/// conversions without a guest are the identity, an agent instantiates
/// without deciding, and the floor component (no imports, one empty
/// export) runs on the same host, which refuses it as an agent and
/// refuses an agent as a floor, naming the missing export.
#[tokio::test]
async fn the_probes_take_a_decision_apart() {
    use subs_engine::worker::component::probe::{decision_round_trip, request_round_trip};

    for (name, request) in fixture_requests() {
        let back = request_round_trip(request.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(to_value(&back), to_value(&request), "{name}: request changed in its WIT form");
        let decision = request.proposed.clone();
        assert_eq!(decision_round_trip(decision.clone()).unwrap(), decision, "{name}: decision changed");
    }

    agent(guests::PASSTHROUGH_LEAN).instantiate_only().await.expect("the agent instantiates");

    let floor = std::fs::read(guests::TEST_FLOOR_LEAN).unwrap();
    let host = subs_tests::host();
    let probe = host.load_floor(&floor).expect("the floor component loads");
    for _ in 0..3 {
        probe.call().await.expect("noop returns");
    }
    let as_agent = host.load(&floor).expect_err("the floor is no agent").to_string();
    assert!(as_agent.contains("does not export `decide`"), "{as_agent}");
    let passthrough = std::fs::read(guests::PASSTHROUGH_LEAN).unwrap();
    let as_floor = host.load_floor(&passthrough).expect_err("an agent is no floor").to_string();
    assert!(as_floor.contains("`noop: func()`"), "{as_floor}");
}
