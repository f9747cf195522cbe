//! The committed schema (`schema/protocol.schema.json`, generated from these
//! types by `cargo xtask codegen`) accepts every cross-language fixture as
//! its type and refuses values the types refuse, so the schema the SDKs'
//! types are generated from says what the Rust types read and write.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn document() -> Value {
    let path = root().join("schema/protocol.schema.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the schema is JSON")
}

/// A validator for the type `name` of the document's `$defs`.
fn validator(document: &Value, name: &str) -> jsonschema::Validator {
    assert!(document["$defs"].get(name).is_some(), "the schema has no type `{name}`");
    let schema = json!({
        "$schema": document["$schema"],
        "$defs": document["$defs"],
        "$ref": format!("#/$defs/{name}"),
    });
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{name}: not a valid schema: {e}"))
}

/// `decision_request` → `DecisionRequest`: the fixture directories are the
/// types' names in snake case.
fn type_name(dir: &str) -> String {
    dir.split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

#[test]
fn the_schema_accepts_every_fixture_as_its_type() {
    let document = document();
    let fixtures = root().join("../../tests/fixtures/protocol");
    let mut failures = Vec::new();
    let mut checked = 0;
    for dir in fs::read_dir(&fixtures).expect("the fixtures directory") {
        let dir = dir.expect("an entry").path();
        let type_dir = dir.file_name().and_then(|n| n.to_str()).expect("a UTF-8 name").to_owned();
        let validator = validator(&document, &type_name(&type_dir));
        for file in fs::read_dir(&dir).expect("a type directory") {
            let file = file.expect("an entry").path();
            let value: Value = serde_json::from_str(&fs::read_to_string(&file).expect("a fixture")).expect("JSON");
            let errors: Vec<String> =
                validator.iter_errors(&value).map(|e| format!("{e} at {}", e.instance_path())).collect();
            if errors.is_empty() {
                checked += 1;
            } else {
                failures.push(format!("{type_dir}/{}: {}", file.display(), errors.join("; ")));
            }
        }
    }
    assert!(failures.is_empty(), "{} fixture(s) refused:\n{}", failures.len(), failures.join("\n"));
    assert!(checked >= 100, "only {checked} fixtures checked");
}

#[test]
fn the_schema_refuses_what_the_types_refuse() {
    let document = document();
    let wrong = [
        ("Action", json!({"type": "tool.call", "name": 5, "arguments": {}}), "a name that is not a string"),
        ("Action", json!({"type": "tool.cal", "name": "add", "arguments": {}}), "an unknown tag"),
        ("Action", json!({"name": "add", "arguments": {}}), "no tag"),
        ("Trigger", json!({"type": "tool.execute", "id": "c1", "name": "add", "arguments": "{}"}), "missing fields"),
        ("Message", json!({"id": "m1", "content": "hi"}), "no role"),
        ("Message", json!({"id": "m1", "role": "robot"}), "an unknown role"),
        ("ContentPart", json!({"type": "text"}), "a text part without text"),
        ("ToolInput", json!({"status": "invalid", "value": 1}), "an invalid input without its error"),
        (
            "RetryPolicy",
            json!({"timeout_secs": null, "max_retries": "1", "backoff_base_secs": 1, "backoff_max_secs": 2}),
            "a count as a string",
        ),
        ("ClientInput", json!({"type": "interrupt.resume", "interrupt_id": "i", "paylod": {}}), "an unknown field"),
        ("Call", json!({"id": "c", "kind": "tool_call", "status": "pending", "attempt": -1}), "a negative u32"),
        ("DecisionResponse", json!({"actions": {}}), "actions that are not a list"),
    ];
    for (name, value, why) in wrong {
        let validator = validator(&document, name);
        assert!(!validator.is_valid(&value), "{name} accepted {why}: {value}");
        // The Rust type refuses it too: the schema is no stricter than
        // the types, and no looser.
        let refused = match name {
            "Action" => subs_protocol::from_value::<subs_protocol::Action>(value.clone()).is_err(),
            "Trigger" => subs_protocol::from_value::<subs_protocol::Trigger>(value.clone()).is_err(),
            "Message" => subs_protocol::from_value::<subs_protocol::Message>(value.clone()).is_err(),
            "ContentPart" => subs_protocol::from_value::<subs_protocol::ContentPart>(value.clone()).is_err(),
            "ToolInput" => subs_protocol::from_value::<subs_protocol::ToolInput>(value.clone()).is_err(),
            "RetryPolicy" => subs_protocol::from_value::<subs_protocol::RetryPolicy>(value.clone()).is_err(),
            "ClientInput" => subs_protocol::from_value::<subs_protocol::ClientInput>(value.clone()).is_err(),
            "Call" => subs_protocol::from_value::<subs_protocol::Call>(value.clone()).is_err(),
            "DecisionResponse" => subs_protocol::from_value::<subs_protocol::DecisionResponse>(value.clone()).is_err(),
            other => panic!("no Rust type mapped for {other}"),
        };
        assert!(refused, "{name}: the Rust type accepts {why}: {value}");
    }
}

#[cfg(feature = "proptest")]
proptest::proptest! {
    /// Every session event, as the `{event, data}` pair a server-sent event
    /// carries, is a `SessionEvent` of the schema.
    #[test]
    fn the_schema_accepts_every_session_event(event in subs_protocol::arbitrary::session_event()) {
        thread_local! {
            static VALIDATOR: jsonschema::Validator = validator(&document(), "SessionEvent");
        }
        let pair = json!({ "event": event.name(), "data": event.data() });
        let errors: Vec<String> = VALIDATOR.with(|v| v.iter_errors(&pair).map(|e| format!("{e} at {}", e.instance_path())).collect());
        proptest::prop_assert!(errors.is_empty(), "{pair}: {}", errors.join("; "));
    }
}

#[test]
fn the_schema_refuses_an_event_whose_data_is_not_its_payload() {
    let validator = validator(&document(), "SessionEvent");
    for (pair, why) in [
        (json!({"event": "turn.started", "data": {}}), "no turn_id"),
        (json!({"event": "turn.begun", "data": {"turn_id": "t"}}), "an unknown name"),
        (json!({"event": "turn.failed", "data": {"turn_id": "t", "error": "x"}}), "no code"),
    ] {
        assert!(!validator.is_valid(&pair), "accepted {why}: {pair}");
    }
}

/// A stream's live frames (`tool.progress`) are `StreamEvent`s of the
/// schema, as written by their Rust type; session events are too; a
/// progress frame is no `SessionEvent`.
#[test]
fn the_schema_types_every_frame_of_an_event_stream() {
    use subs_protocol::event::ToolProgress;
    use subs_protocol::{LiveEvent, StreamEvent};
    let stream = validator(&document(), "StreamEvent");
    let session = validator(&document(), "SessionEvent");
    for progress in [
        ToolProgress { id: "call_1".into(), progress: 2.0, total: Some(5.0), message: Some("step 2".into()) },
        ToolProgress { id: "call_1".into(), progress: 0.5, total: None, message: None },
    ] {
        let event = StreamEvent::from(LiveEvent::from(progress));
        let pair = json!({ "event": event.name(), "data": event.data() });
        assert!(stream.is_valid(&pair), "{pair}");
        assert!(!session.is_valid(&pair), "{pair}");
    }
    assert!(stream.is_valid(&json!({"event": "turn.started", "data": {"turn_id": "t"}})));
    for (pair, why) in [
        (json!({"event": "tool.progress", "data": {"id": "c", "progress": 1}}), "no total and message"),
        (
            json!({"event": "tool.progress", "data": {"id": "c", "progress": "1", "total": null, "message": null}}),
            "a text progress",
        ),
        (json!({"event": "tool.paused", "data": {}}), "an unknown name"),
    ] {
        assert!(!stream.is_valid(&pair), "accepted {why}: {pair}");
    }
}
