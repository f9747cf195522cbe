//! A live event added to the protocol's `LiveEvent` reaches both clients'
//! typed stream frames through the generator alone: the TypeScript union
//! that `StreamEventFrame` narrows, and the Python client's
//! `LiveEventFrame` (and so `StreamEventFrame`).

use serde_json::{Value, json};
use xtask::generated_files;

mod support;
use support::{declaration, file};

#[test]
fn a_live_event_added_in_rust_reaches_both_clients_frames() {
    let mut document = subs_protocol::schema::document();
    // As `LiveEvent`'s schema writes a variant, and its payload's struct.
    document["$defs"]["ToolLog"] = json!({
        "description": "`tool.log` data.",
        "type": "object",
        "properties": {"id": {"type": "string"}, "line": {"type": "string"}},
        "required": ["id", "line"],
    });
    let Value::Array(variants) = &mut document["$defs"]["LiveEvent"]["oneOf"] else {
        panic!("LiveEvent is a union");
    };
    variants.push(json!({
        "type": "object",
        "title": "ToolLogEvent",
        "description": "A line a running tool logged.",
        "properties": {
            "event": {"type": "string", "const": "tool.log"},
            "data": {"$ref": "#/$defs/ToolLog"},
        },
        "required": ["event", "data"],
    }));
    let files = generated_files(&document).expect("the generators read the schema");

    let ts = file(&files, xtask::ts::CLIENT_PATH);
    let event = declaration(ts, "export interface ToolLogEvent {", "\n}\n");
    assert!(event.contains("  event: 'tool.log';\n  data: ToolLog;"), "{event}");
    let live = declaration(ts, "export type LiveEvent =", ";\n");
    assert!(live.contains("| ToolProgressEvent\n  | ToolLogEvent"), "{live}");
    assert!(ts.contains("export type StreamEvent = SessionEvent | LiveEvent;"), "{ts}");

    let py = file(&files, xtask::python_client::PATH);
    let frames = declaration(py, "LiveEventFrame = Union[", "\n]\n");
    assert!(
        frames.contains(
            "    Event[Literal[\"tool.progress\"], ToolProgress],\n    Event[Literal[\"tool.log\"], ToolLog],"
        ),
        "{frames}"
    );
    assert!(py.contains("\nStreamEventFrame = Union[SessionEventFrame, LiveEventFrame]\n"), "{py}");
    assert!(py.contains("    \"ToolLogEvent\",\n"), "exported: {py}");
}
