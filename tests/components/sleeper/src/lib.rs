//! Test component: waits an hour before deciding. The wait is a WASI
//! clock subscription, so the guest sits in the host rather than running
//! code: only the deadline stops it.

use subs_sdk::prelude::*;

struct Sleeper;

impl Agent for Sleeper {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        // An agent that never answers: what the host's deadlines and
        // slots are tested against.
        std::thread::sleep(std::time::Duration::from_secs(3600));
        Ok(DecisionResponse::new())
    }
}

subs_sdk::export!(Sleeper);
