//! `DecisionRequest` parsing (an HTTP worker's SDK reads it) and the WIT
//! mapping the engine uses to hand it to a component: any bytes give a
//! request or an error, never a panic; a request crosses into WIT and back
//! unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use subs_protocol::DecisionRequest;
use subs_protocol::wit::FromWit;
use subs_sdk::bindings::wit;

fuzz_target!(|data: &[u8]| {
    match subs_protocol::from_json_slice::<DecisionRequest>(data) {
        Ok(request) => {
            let text = subs_protocol::to_json(&request);
            let crossed = wit::DecisionRequest::from(request.clone());
            let back = DecisionRequest::from_wit(crossed).expect("what the mapping wrote, it reads");
            assert_eq!(back, request, "WIT round trip of {text}");
        }
        Err(e) => drop(e.to_string()),
    }
});
