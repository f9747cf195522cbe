//! The wit-bindgen bindings of the `subs:agent/agent` world.
//!
//! Public only so the [`export!`](crate::export) expansion in an agent crate
//! and the SDK's own integration tests can name the generated types; agent
//! authors work with the protocol types instead.

#![allow(missing_docs, unsafe_code, clippy::all)]

wit_bindgen::generate!({
    path: "../wit",
    world: "subs:agent/agent",
    // The world imports WASI interfaces that no crate here binds yet.
    generate_all,
    // `wit_conversions!` maps every protocol type, including those no
    // function signature mentions (client inputs).
    generate_unused_types: true,
    pub_export_macro: true,
    export_macro_name: "export_agent",
    default_bindings_module: "subs_sdk::bindings",
    // The export glue expands in agent crates, which do not depend on
    // wit-bindgen themselves.
    runtime_path: "subs_sdk::wit_bindgen::rt",
});

/// The generated `subs:agent/types` interface.
pub use self::subs::agent::types as wit;
