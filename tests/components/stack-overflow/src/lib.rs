//! Test component: recurses without end, so the guest's call stack
//! overflows.

use subs_sdk::prelude::*;

struct StackOverflow;

/// Not tail-recursive (the addition happens after the call) and opaque to
/// the optimizer, so every call takes a frame.
fn depth(n: u64) -> u64 {
    if std::hint::black_box(n) == u64::MAX { 0 } else { depth(n + 1) + 1 }
}

impl Agent for StackOverflow {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let n = depth(0);
        Ok(DecisionResponse::new().with_message(DraftMessage::assistant(n.to_string())))
    }
}

subs_sdk::export!(StackOverflow);
