//! Host bindings of the `subs:agent/agent` world, and the protocol ↔ WIT
//! mapping instantiated against them.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "subs:agent/agent",
    exports: { default: async },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        "wasi:random": wasmtime_wasi::p2::bindings::random,
        "wasi:cli": wasmtime_wasi::p2::bindings::cli,
        "wasi:http": wasmtime_wasi_http::p2::bindings::http,
    },
    require_store_data_send: true,
});

pub use subs::agent::host;
pub use subs::agent::types as wit;

subs_protocol::wit_conversions!(wit);
