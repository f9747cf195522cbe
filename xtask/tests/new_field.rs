//! A field added to a wire type in Rust reaches both SDKs through the
//! generator alone: derived into the schema by schemars with the settings
//! the protocol's schema is made with, then generated into the TypeScript
//! interface and the Python dataclass of its type.

use serde_json::Value;
use xtask::generated_files;

mod support;
use support::{declaration, file};

/// The field as it would be written on `trigger::ToolExecute`.
#[derive(serde::Serialize, schemars::JsonSchema)]
#[allow(dead_code)]
struct WithPriority {
    /// How urgent the call is (0 the most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    priority: Option<u32>,
}

#[test]
fn a_field_added_in_rust_reaches_both_sdks_and_both_clients() {
    let mut document = subs_protocol::schema::document();
    let before = generated_files(&document).expect("the generators read the schema");

    let added = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<WithPriority>();
    let priority = added.as_value()["properties"]["priority"].clone();
    let Value::Object(fields) = &mut document["$defs"]["ToolExecute"]["properties"] else {
        panic!("ToolExecute has properties");
    };
    fields.insert("priority".into(), priority);
    let after = generated_files(&document).expect("the generators read the schema");

    let ts = declaration(file(&after, xtask::ts::PATH), "export interface ToolExecute {", "\n}\n");
    assert!(ts.contains("  /** How urgent the call is (0 the most). */\n  priority?: number;"), "{ts}");
    let py = declaration(file(&after, xtask::python::PATH), "class ToolExecute(Trigger):", "\n\n\n");
    assert!(py.contains("    #: How urgent the call is (0 the most).\n    priority: Optional[int] = None"), "{py}");
    // The clients' copies: the TypeScript declarations as the SDK's, the
    // Python TypedDict optional.
    assert_eq!(file(&after, xtask::ts::CLIENT_PATH), file(&after, xtask::ts::PATH));
    let client = declaration(file(&after, xtask::python_client::PATH), "class ToolExecute(TypedDict):", "\n\n\n");
    assert!(
        client.contains("    #: How urgent the call is (0 the most).\n    priority: NotRequired[Optional[int]]"),
        "{client}"
    );
    // And only there: nothing else in the SDKs and clients changed.
    for path in [xtask::ts::PATH, xtask::python::PATH, xtask::ts::CLIENT_PATH, xtask::python_client::PATH] {
        let changed: Vec<&str> = file(&after, path).lines().filter(|l| !file(&before, path).contains(*l)).collect();
        assert_eq!(changed.len(), 2, "{path}: {changed:?}");
    }
}

/// The committed files are what the generator writes (the check CI runs).
#[test]
fn the_committed_files_are_current() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (path, text) in generated_files(&subs_protocol::schema::document()).expect("the generators read the schema") {
        let committed = std::fs::read_to_string(root.join(path)).unwrap_or_default();
        assert!(committed == text, "{path} is stale: run `cargo xtask codegen`");
    }
}
