//! The generators behind `cargo xtask codegen`: the protocol's schema as
//! committed, and the SDKs' and client libraries' protocol types made
//! from it.
//!
//! Every generator reads the schema document (not the Rust types), so what
//! reaches the SDKs is exactly what the committed schema says.

use serde_json::Value;

pub mod model;
pub mod python;
pub mod python_client;
pub mod ts;

/// Where the schema of every wire type is committed.
pub const SCHEMA_PATH: &str = "engine/protocol/schema/protocol.schema.json";

/// Every generated file, as (path from the repository root, contents), made
/// from `schema` (the document `subs_protocol::schema::document` returns,
/// or one changed by a test).
///
/// # Errors
/// A schema shape the generators do not know, named.
pub fn generated_files(schema: &Value) -> Result<Vec<(&'static str, String)>, String> {
    let mut text = serde_json::to_string_pretty(schema).map_err(|e| e.to_string())?;
    text.push('\n');
    let model = model::Model::read(schema)?;
    let ts = ts::render(&model);
    Ok(vec![
        (SCHEMA_PATH, text),
        (ts::PATH, ts.clone()),
        (python::PATH, python::render(&model)),
        // The client libraries' wire types: the TypeScript declarations as
        // the SDK's, the Python ones as the JSON-shaped `TypedDict`s a
        // client passes through.
        (ts::CLIENT_PATH, ts),
        (python_client::PATH, python_client::render(&model)),
    ])
}
