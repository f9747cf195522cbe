//! `DecisionResponse` parsing, as the engine reads an HTTP worker's reply:
//! any bytes give a decision or an error, never a panic. A decision that
//! parses writes back to JSON that parses to the same decision, and
//! crosses the WIT boundary (as a guest returns it) and back unchanged.
//!
//! The engine's validation of decisions (tool names, ids, shapes against
//! the session) lives in the engine crate, which pulls in wasmtime; it is
//! not fuzzed here.

#![no_main]

use libfuzzer_sys::fuzz_target;
use subs_protocol::DecisionResponse;
use subs_protocol::wit::FromWit;
use subs_sdk::bindings::wit;

fuzz_target!(|data: &[u8]| {
    match subs_protocol::from_json_slice::<DecisionResponse>(data) {
        Ok(decision) => {
            let text = subs_protocol::to_json(&decision);
            let again: DecisionResponse = subs_protocol::from_json(&text).expect("what was written parses");
            assert_eq!(again, decision, "JSON round trip of {text}");
            let crossed = wit::DecisionResponse::from(decision.clone());
            let back = DecisionResponse::from_wit(crossed).expect("what the mapping wrote, it reads");
            assert_eq!(back, decision, "WIT round trip of {text}");
        }
        Err(e) => drop(e.to_string()),
    }
});
