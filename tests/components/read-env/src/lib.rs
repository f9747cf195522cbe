//! Test component: insists on reading `HOME` from its environment, and
//! panics (a trap) when it is not there.

use subs_sdk::prelude::*;

struct ReadEnv;

impl Agent for ReadEnv {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let seen = std::env::vars().count();
        let home = std::env::var("HOME")
            .unwrap_or_else(|e| panic!("reading HOME from the environment ({seen} variables): {e}"));
        Ok(DecisionResponse::new().with_message(DraftMessage::assistant(home)))
    }
}

subs_sdk::export!(ReadEnv);
