//! Test component: answers every request with its own `proposed` decision,
//! and with `state` set to the whole request as it arrived (as the guest
//! SDK converted it). The host can then check both directions of the WIT
//! mapping: every request field inside `state`, and the typed messages,
//! actions and config of `proposed` coming back.

use subs_sdk::prelude::*;

struct Echo;

impl Agent for Echo {
    fn decide(&self, request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let echoed = subs_sdk::to_value(&request);
        let mut decision = request.proposed;
        decision.state = Some(echoed);
        Ok(decision)
    }
}

subs_sdk::export!(Echo);
