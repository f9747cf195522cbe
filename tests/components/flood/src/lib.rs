//! Test component: a hostile agent that makes its own streaming LLM calls
//! (as `test-stream` does) and floods the host with deltas. Answering
//! `llm.execute`, it first emits one 12 MiB delta, then `count` deltas of
//! `size` bytes of text each, as the last user message says
//! (`"<size> <count>"`), stopping at the first the host refuses. Its reply
//! says what happened, host errors quoted, so tests can check that the
//! host's refusals reach the guest:
//! `oversized: <error or "accepted">; sent: <n>; stopped: <error or "no">`.

use subs_sdk::prelude::*;

struct Flood;

/// The size of the first delta: far over any sane limit.
const OVERSIZED: usize = 12 << 20;

impl Agent for Flood {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::SessionStart = &request.trigger {
            let mut config = request.proposed.agent.clone().unwrap_or_else(|| AgentConfig::new("subs/offline"));
            config.handler = Some(subs_sdk::LlmHandler::Worker);
            config.stream = Some(true);
            return Ok(request.proposed.with_agent(config));
        }
        let Trigger::LlmExecute(execute) = &request.trigger else {
            return Ok(request.proposed);
        };
        let (size, count) = plan(&execute.request);
        let oversized = match cx.emit_text("x".repeat(OVERSIZED)) {
            Ok(()) => "accepted".to_owned(),
            Err(e) => e,
        };
        let piece = "y".repeat(size);
        let mut sent = 0;
        let mut stopped = "no".to_owned();
        while sent < count {
            if let Err(e) = cx.emit_text(piece.as_str()) {
                stopped = e;
                break;
            }
            sent += 1;
        }
        let content = format!("oversized: {oversized}; sent: {sent}; stopped: {stopped}");
        let response = json!({"model": "test/flood", "content": content, "finish_reason": "stop"});
        Ok(DecisionResponse::new().with_action(Action::llm_result(response)))
    }
}

/// `(size, count)` from the last message's text; `(0, 0)` when it says
/// something else.
fn plan(request: &Value) -> (usize, usize) {
    let text = request["messages"].as_array().and_then(|m| m.last()).and_then(|m| m["content"].as_str()).unwrap_or("");
    let mut numbers = text.split_whitespace().map(|n| n.parse::<usize>().unwrap_or(0));
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
}

subs_sdk::export!(Flood);
