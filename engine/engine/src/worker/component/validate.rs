//! Checks a component against what the engine grants before it is
//! accepted: it must export `decide` and import nothing but the
//! `subs:agent` world's imports (and the interfaces those depend on).
//!
//! wasmtime's linker would refuse such a component too, but with a message
//! about its own internals; this names the offending import or export in
//! the uploader's terms.

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::{ComponentExtern, ComponentItem};

use super::LoadError;

/// Every interface a guest may import, without its version: the world's
/// imports and the interfaces they use. Versions are left to the linker,
/// which accepts any semver-compatible one.
pub(crate) const GRANTED: &[&str] = &[
    "subs:agent/host",
    "subs:agent/types",
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
];

/// Why an import is refused, in a few words, for the families a guest is
/// most likely to pull in by accident.
fn why_not(name: &str) -> &'static str {
    if name.starts_with("wasi:filesystem/") {
        "agents have no filesystem"
    } else if name.starts_with("wasi:sockets/") {
        "agents have no sockets (outgoing HTTP to allow-listed hosts is the only network access)"
    } else {
        "the engine does not grant it"
    }
}

/// Checks the component's imports and its `decide` export.
pub(crate) fn check(engine: &Engine, component: &Component) -> Result<(), LoadError> {
    check_imports(engine, component)?;
    let ty = component.component_type();
    match ty.get_export(engine, "decide") {
        Some(ComponentExtern { ty: ComponentItem::ComponentFunc(_), .. }) => Ok(()),
        Some(_) => Err(LoadError::World("its export `decide` is not a function".to_owned())),
        None => {
            let mut exports: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
            exports.sort_unstable();
            let exports = if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") };
            Err(LoadError::World(format!(
                "it does not export `decide` (subs:agent@0.1.0); it exports {exports} — build it against \
                 the subs:agent world, e.g. with the subs-sdk `export!` macro"
            )))
        }
    }
}

/// Checks that the component imports nothing the engine does not grant.
pub(crate) fn check_imports(engine: &Engine, component: &Component) -> Result<(), LoadError> {
    let mut refused: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name)
        .filter(|name| !GRANTED.contains(&name.split('@').next().unwrap_or(name)))
        .map(|name| format!("`{name}` ({})", why_not(name)))
        .collect();
    if refused.is_empty() {
        return Ok(());
    }
    refused.sort();
    Err(LoadError::World(format!(
        "it imports {}; an agent may import only the subs:agent world's interfaces",
        refused.join(", ")
    )))
}
