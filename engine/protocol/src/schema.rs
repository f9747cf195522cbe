//! The JSON Schema of the wire types, derived from their serde attributes
//! (feature `schema`).
//!
//! One document holds every type under `$defs`, named as the SDKs name
//! them; `cargo xtask codegen` writes it to `schema/protocol.schema.json`
//! and generates the Python and TypeScript SDKs' protocol types from it.

use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

use crate::{ClientInput, DecisionRequest, DecisionResponse, LlmRequest, LlmResponse, StreamDelta, StreamEvent};

/// The schema document: `$defs` holds every wire type reachable from the
/// roots (a decision request and response, a client input, an LLM request,
/// response and stream delta, any frame of a session's event stream), sorted
/// by name so the document is stable.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12().for_serialize().into_generator();
    let roots = [
        generator.subschema_for::<DecisionRequest>(),
        generator.subschema_for::<DecisionResponse>(),
        generator.subschema_for::<ClientInput>(),
        generator.subschema_for::<LlmRequest>(),
        generator.subschema_for::<LlmResponse>(),
        generator.subschema_for::<StreamDelta>(),
        generator.subschema_for::<StreamEvent>(),
    ];
    // A request's `message_tree` is added to its schema by hand (it is
    // written from `messages`), so its type is registered here.
    generator.subschema_for::<crate::MessageTree>();
    let mut defs: Vec<(String, Value)> = generator.take_definitions(true).into_iter().collect();
    defs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut document = Map::new();
    document.insert("$schema".into(), "https://json-schema.org/draft/2020-12/schema".into());
    document.insert("$id".into(), "https://subs.dev/schema/protocol.schema.json".into());
    document.insert("title".into(), "The subs decision protocol".into());
    document.insert(
        "description".into(),
        "Every wire type of the subs decision protocol, under $defs. Generated from the Rust types of \
         engine/protocol by `cargo xtask codegen`; do not edit."
            .into(),
    );
    document.insert("anyOf".into(), Value::Array(roots.into_iter().map(Value::from).collect()));
    document.insert("$defs".into(), Value::Object(defs.into_iter().collect()));
    Value::Object(document)
}

/// `tool.execute`, `turn.started` → `ToolExecute`, `TurnStarted`: how a
/// dotted or snake-case tag is named as a type.
pub fn pascal(tag: &str) -> String {
    tag.split(['.', '_'])
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}
