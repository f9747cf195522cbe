//! Checks a component against what the engine grants before it is
//! accepted: it must export `decide` and import nothing but the
//! `subs:agent` world's imports (and the interfaces those depend on), or
//! the WASI interfaces the engine links inert for the standard libraries
//! of other languages.
//!
//! The names are checked on the component's shape, before it is compiled
//! ([`check_shape`]); `decide`'s type once it is ([`check`]). wasmtime's
//! linker would refuse such a component too, but with a message about its
//! own internals; this names the offending import or export in the
//! uploader's terms.

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::{ComponentExtern, ComponentItem};

use super::LoadError;
use super::inspect::Shape;

/// Every interface a guest may import, without its version: the world's
/// imports and the interfaces they use. Versions are left to the linker,
/// which accepts any semver-compatible one.
pub(crate) const GRANTED: &[&str] = &[
    "subs:agent/host",
    "subs:agent/types",
    // `subs:agent@0.2.0`'s `messages` resource, the decision's branch.
    "subs:agent/branch",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/stdin",
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
    // Linked inert: no preopened directories, so every open fails with a
    // WASI error; every socket operation is denied. CPython's and
    // SpiderMonkey's runtimes import them whether an agent uses them or
    // not.
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// Checks the names a component imports and exports: what it imports is
/// granted, and it exports `decide`.
pub(crate) fn check_shape(shape: &Shape) -> Result<(), LoadError> {
    check_import_names(shape.imports.iter().map(String::as_str))?;
    if shape.exports.iter().any(|e| e == "decide") {
        return Ok(());
    }
    let mut exports: Vec<&str> = shape.exports.iter().map(String::as_str).collect();
    exports.sort_unstable();
    let exports = if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") };
    Err(LoadError::World(format!(
        "it does not export `decide` (subs:agent@0.2.0 or 0.1.0); it exports {exports} — build it \
         against the subs:agent world, e.g. with the subs-sdk `export!` macro"
    )))
}

/// Checks the compiled component's `decide` export is a function (its
/// signature is checked when it is linked).
pub(crate) fn check(engine: &Engine, component: &Component) -> Result<(), LoadError> {
    match component.component_type().get_export(engine, "decide") {
        Some(ComponentExtern { ty: ComponentItem::ComponentFunc(_), .. }) => Ok(()),
        _ => Err(LoadError::World("its export `decide` is not a function".to_owned())),
    }
}

/// Checks that the component imports nothing the engine does not grant,
/// and WASI 0.2 (0.2.0 or later) where it imports WASI.
pub(crate) fn check_import_names<'a>(names: impl Iterator<Item = &'a str>) -> Result<(), LoadError> {
    let mut refused: Vec<String> = names
        .filter_map(|name| {
            let (interface, version) = name.split_once('@').unwrap_or((name, ""));
            if !GRANTED.contains(&interface) {
                return Some(format!("`{name}` (the engine does not grant it)"));
            }
            let wasi_0_2 = version.strip_prefix("0.2.").is_some_and(|patch| patch.parse::<u32>().is_ok());
            (interface.starts_with("wasi:") && !wasi_0_2)
                .then(|| format!("`{name}` (the engine links WASI 0.2.x, 0.2.0 and later)"))
        })
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    refused.sort();
    Err(LoadError::World(format!(
        "it imports {}; an agent may import only the subs:agent world's interfaces and the WASI \
         interfaces the engine links inert (docs/sandbox.md)",
        refused.join(", ")
    )))
}
