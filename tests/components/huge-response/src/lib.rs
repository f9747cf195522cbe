//! Test component: answers every decision with one assistant message of
//! 100 MB.

use subs_sdk::prelude::*;

struct HugeResponse;

impl Agent for HugeResponse {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let text = "x".repeat(100_000_000);
        Ok(DecisionResponse::new().with_message(DraftMessage::assistant(text)).with_action(Action::done()))
    }
}

subs_sdk::export!(HugeResponse);
