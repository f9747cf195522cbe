//! Test component of the `subs:agent/agent-json@0.1.0` world, whose `decide`
//! takes and gives JSON text. It answers as its request's `state` says:
//!
//! - a string: that text, verbatim, as the decision (valid or not);
//! - `{"decline": why}`: `decide` fails with `why`, retryable;
//! - anything else: a decision whose `state` is the whole request it was
//!   sent, so that a test sees the JSON the engine wrote.

// The generated export glue is `unsafe` and undocumented by nature.
#[allow(unsafe_code, missing_docs)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "subs:agent/agent-json@0.1.0",
        // The world imports WASI interfaces that no crate here binds.
        generate_all,
    });

    struct JsonText;

    impl Guest for JsonText {
        fn decide(request: String) -> Result<String, DecideError> {
            let decline = |message: String| DecideError { message, retryable: true };
            let value: serde_json::Value =
                serde_json::from_str(&request).map_err(|e| decline(format!("the request is not JSON: {e}")))?;
            match &value["state"] {
                serde_json::Value::String(text) => Ok(text.clone()),
                serde_json::Value::Object(o) if o.contains_key("decline") => {
                    Err(decline(o["decline"].as_str().unwrap_or_default().to_owned()))
                }
                _ => Ok(serde_json::json!({ "state": value }).to_string()),
            }
        }
    }

    export!(JsonText);
}
