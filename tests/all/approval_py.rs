//! The approver agent written with the Python SDK
//! (`tests/python/approver_agent.py`, built with componentize-py) over the
//! real API: `refund` needs a person's approval and counts the refunds its
//! body made in the session state, so a state without a count proves a
//! denied refund never ran; `summarizer` (the passthrough component) is a
//! sub-agent the model may call and the agent delegates to.

use serde_json::json;
use subs_tests::guests;
use subs_tests::server::TestServer;

use crate::approval::{delegates_both_ways, done, interrupts, resume, say, snapshot, texts};

/// A server with the Python approver as `approver` and the passthrough
/// component as `summarizer`.
async fn server() -> TestServer {
    let s = TestServer::start(&[]).await;
    for (agent, component) in [("approver", guests::TEST_PY_APPROVER), ("summarizer", guests::PASSTHROUGH)] {
        let (status, body) = s.upload(agent, component, None).await;
        assert!(status.is_success(), "{agent}: {status}: {body}");
    }
    s
}

#[tokio::test]
async fn an_approved_python_refund_runs_and_counts_in_state() {
    let s = server().await;
    let turn = say(&s, "yes", r#"use tool refund with {"order_id": "A1", "amount": 5}"#).await;
    let open = interrupts(&s, "yes", 1).await;
    let payload = &open[0]["payload"];
    assert_eq!((&payload["tool"], &payload["arguments"]), (&json!("refund"), &json!({"order_id": "A1", "amount": 5})));
    assert_eq!(open[0]["interrupt_id"], payload["call_id"], "{payload}");
    assert_eq!(open[0]["resume_schema"]["required"], json!(["approved"]), "{}", open[0]);
    assert!(snapshot(&s, "yes").await["state"].is_null(), "nothing runs before the answer");

    resume(&s, "yes", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "yes", &turn).await;
    let view = snapshot(&s, "yes").await;
    assert_eq!(texts(&view, "tool"), [r#"{"refunded":5,"refunds":1}"#], "{view}");
    assert_eq!(view["state"], json!({"refunds": 1}), "the approval is used up");

    // State carries across turns; an ungated tool asks nobody.
    let turn = say(&s, "yes", r#"use tool lookup_order with {"order_id": "A1"}"#).await;
    done(&s, "yes", &turn).await;
    let turn = say(&s, "yes", r#"use tool refund with {"order_id": "A2", "amount": 2}"#).await;
    let open = interrupts(&s, "yes", 1).await;
    resume(&s, "yes", &open[0]["interrupt_id"], json!({"approved": true})).await;
    done(&s, "yes", &turn).await;
    let view = snapshot(&s, "yes").await;
    assert_eq!(view["state"], json!({"refunds": 2}), "{view}");
    let tool = texts(&view, "tool");
    assert_eq!(tool[1], r#"{"order_id":"A1","status":"shipped"}"#, "{view}");
}

#[tokio::test]
async fn a_denied_python_refund_never_runs_and_the_model_reads_why() {
    let s = server().await;
    let turn = say(&s, "no", r#"use tool refund with {"order_id": "A1", "amount": 500}"#).await;
    let open = interrupts(&s, "no", 1).await;
    resume(&s, "no", &open[0]["interrupt_id"], json!({"approved": false, "reason": "too large"})).await;
    done(&s, "no", &turn).await;
    let view = snapshot(&s, "no").await;
    assert_eq!(texts(&view, "tool"), ["denied by the approver: too large"], "{view}");
    let answer = texts(&view, "assistant").pop().unwrap();
    assert!(answer.contains("denied by the approver: too large"), "the model saw the reason: {answer}");
    assert!(view["state"].is_null(), "the refund's body never ran: {view}");

    // Two in one reply, answered one by one: only the approved one runs.
    let turn = say(
        &s,
        "no",
        r#"use tool refund with {"order_id": "A1", "amount": 5} and use tool refund with {"order_id": "B2", "amount": 7}"#,
    )
    .await;
    let open = interrupts(&s, "no", 2).await;
    let (a1, b2) =
        if open[0]["payload"]["arguments"]["order_id"] == "A1" { (&open[0], &open[1]) } else { (&open[1], &open[0]) };
    resume(&s, "no", &b2["interrupt_id"], json!({"approved": false, "reason": "not B2"})).await;
    assert_eq!(interrupts(&s, "no", 1).await[0]["interrupt_id"], a1["interrupt_id"], "the other stays open");
    resume(&s, "no", &a1["interrupt_id"], json!({"approved": true})).await;
    done(&s, "no", &turn).await;
    let view = snapshot(&s, "no").await;
    assert_eq!(view["state"], json!({"refunds": 1}), "only the approved refund ran: {view}");
    let mut tool = texts(&view, "tool")[1..].to_vec();
    tool.sort();
    assert_eq!(tool, ["denied by the approver: not B2", r#"{"refunded":5,"refunds":1}"#], "{view}");
}

#[tokio::test]
async fn a_python_agent_delegates_and_offers_its_sub_agent_as_a_tool() {
    delegates_both_ways(&server().await).await;
}

/// The approver of the Python guide ("The approver") is the agent these
/// tests build and run, word for word past its module docstring.
#[test]
fn the_python_guide_shows_the_approver_these_tests_run() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let guide = std::fs::read_to_string(root.join("docs/guests/python.md")).expect("the Python guide");
    let section = guide.split("## The approver\n").nth(1).expect("a section \"The approver\"");
    let shown = section.split("```python\n").nth(1).and_then(|s| s.split("```").next()).expect("its code");
    let agent = std::fs::read_to_string(root.join("tests/python/approver_agent.py")).expect("the agent");
    let code = agent.split_once("\"\"\"\n\n").map(|(_, code)| code).expect("a module docstring, then the code");
    assert_eq!(shown, code, "docs/guests/python.md and tests/python/approver_agent.py differ");
}
