//! The wit-bindgen bindings of the `subs:agent/agent` world: `0.2.0`, whose
//! branch is read on demand, unless the `wit-0-1-0` feature asks for
//! `0.1.0`, whose request carries it whole.
//!
//! Public only so the [`export!`](crate::export) expansion in an agent crate
//! and the SDK's own integration tests can name the generated types; agent
//! authors work with the protocol types instead.

#![allow(missing_docs, unsafe_code, clippy::all)]

/// `generate!` for one version of the `agent` world.
macro_rules! bind_agent {
    ($world:literal) => {
        wit_bindgen::generate!({
            path: "../wit",
            world: $world,
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
    };
}

#[cfg(not(feature = "wit-0-1-0"))]
bind_agent!("subs:agent/agent@0.2.0");
#[cfg(feature = "wit-0-1-0")]
bind_agent!("subs:agent/agent@0.1.0");

/// The generated `subs:agent/host` interface.
pub use self::subs::agent0_1_0::host;
/// The generated `subs:agent/types` interface.
pub use self::subs::agent0_1_0::types as wit;
/// The generated `subs:agent/branch` interface: the `messages` resource.
#[cfg(not(feature = "wit-0-1-0"))]
pub use self::subs::agent0_2_0::branch;
