//! Test component: never decides. Every decision spins in a loop that does
//! no host calls, so only the engine's CPU and wall-clock limits stop it.

use subs_sdk::prelude::*;

struct Spin;

impl Agent for Spin {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let mut n: u64 = 0;
        // `black_box` keeps the optimizer from proving anything about `n`.
        while std::hint::black_box(n) != u64::MAX {
            n = n.wrapping_add(2);
        }
        Ok(DecisionResponse::new())
    }
}

subs_sdk::export!(Spin);
