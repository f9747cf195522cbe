//! Test component of the `subs:agent/floor` world: `noop` does nothing.
//! Built for wasm32-unknown-unknown it imports nothing, so instantiating
//! and calling it costs what any call into a component costs on the host,
//! and nothing more: the floor under every agent's decision.

// The generated export glue is `unsafe` and undocumented by nature.
#[allow(unsafe_code, missing_docs)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "subs:agent/floor@0.1.0",
    });

    struct Floor;

    impl Guest for Floor {
        fn noop() {}
    }

    export!(Floor);
}
