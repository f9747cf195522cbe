//! Test component: reads `/etc/passwd`. Reading a file makes the
//! component import `wasi:filesystem`, which the engine links with no
//! directory in it: the read fails with the guest's own error.

use subs_sdk::prelude::*;

struct OpenFile;

impl Agent for OpenFile {
    fn decide(&self, _request: DecisionRequest, _cx: &mut Context<'_>) -> Result<DecisionResponse, DecideError> {
        let text = std::fs::read_to_string("/etc/passwd").map_err(|e| DecideError::terminal(e.to_string()))?;
        Ok(DecisionResponse::new().with_message(DraftMessage::assistant(text)))
    }
}

subs_sdk::export!(OpenFile);
