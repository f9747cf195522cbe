//! `ClientInput` parsing, as `POST /v1/sessions/{id}/input` does it: any
//! bytes give a value or an error naming what is wrong, never a panic; a
//! value that parses writes back to JSON that parses to the same value.

#![no_main]

use libfuzzer_sys::fuzz_target;
use subs_protocol::ClientInput;

fuzz_target!(|data: &[u8]| {
    match subs_protocol::from_json_slice::<ClientInput>(data) {
        Ok(input) => {
            let text = subs_protocol::to_json(&input);
            let again: ClientInput = subs_protocol::from_json(&text).expect("what was written parses");
            assert_eq!(again, input, "{text}");
        }
        Err(e) => drop(e.to_string()),
    }
});
