//! Test component: a tenant's agent that tries to cost the host more than
//! its decision's limits allow, as a `client.action` trigger's name asks:
//!
//! - `log-flood`: sends 1 MiB lines through the host's `log`, forever;
//! - `random-loop`: asks `wasi:random` for 48 MiB at a time, forever,
//!   spending almost all its time in the host;
//! - `big-error`: fails the decision with a 20 MB message;
//!
//! any other trigger gets the proposal.

use subs_sdk::prelude::*;

struct Hostile;

impl Agent for Hostile {
    fn decide(&self, request: DecisionRequest, cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let Trigger::ClientAction(action) = &request.trigger else { return Ok(request.proposed) };
        match action.name.as_str() {
            "log-flood" => {
                let line = "x".repeat(1 << 20);
                loop {
                    cx.info(&line);
                }
            }
            "random-loop" => {
                let mut total = 0u64;
                loop {
                    let bytes = wasip2::random::random::get_random_bytes(48 << 20);
                    total = total.wrapping_add(u64::from(bytes[0]));
                    if total == u64::MAX {
                        return Ok(request.proposed);
                    }
                }
            }
            "big-error" => Err(DecideError::terminal("e".repeat(20 << 20))),
            _ => Ok(request.proposed),
        }
    }
}

subs_sdk::export!(Hostile);
