//! Test component: an agent that makes its own LLM calls. At
//! `session.start` it asks for worker-handled, streaming LLM calls; it
//! answers `llm.execute` itself, streaming the reply `hello` as the deltas
//! `hel` and `lo` through the host, then settling the call with the whole
//! reply. A refused emit becomes a declined decision carrying the host's
//! message, so the host can check refusals too.

use subs_sdk::prelude::*;

struct Stream;

impl Agent for Stream {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        if let Trigger::SessionStart = &request.trigger {
            let mut config = request.proposed.agent.clone().unwrap_or_else(|| AgentConfig::new("subs/offline"));
            config.handler = Some(subs_sdk::LlmHandler::Worker);
            config.stream = Some(true);
            return Ok(request.proposed.with_agent(config));
        }
        let Trigger::LlmExecute(_) = &request.trigger else {
            return Ok(request.proposed);
        };
        for piece in ["hel", "lo"] {
            cx.emit_text(piece).map_err(|e| DecideError::terminal(format!("emit refused: {e}")))?;
        }
        let response = json!({"model": "test/stream", "content": "hello", "finish_reason": "stop"});
        Ok(DecisionResponse::new().with_action(Action::llm_result(response)))
    }
}

subs_sdk::export!(Stream);
