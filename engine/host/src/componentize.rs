//! Agents uploaded as core WebAssembly modules, made into components at
//! load.
//!
//! A Rust agent built for `wasm32-wasip2` is a component already, but the
//! standard library makes it import about thirty WASI functions (stdio,
//! environment, exit, terminals, a random seed), and the component wraps
//! the agent in two helper core instances that hand those imports the
//! agent's memory. A fresh instance per decision pays for all of it every
//! time: about 3 µs of a 24 µs decision (`docs/benchmarks.md`). Built for
//! `wasm32-unknown-unknown`, the same agent imports only what it uses of
//! `subs:agent` (the SDK's panic hook uses `log`, which brings back a
//! smaller pair of helpers), and wit-bindgen leaves the world it was built
//! against in a
//! custom section of the module; the engine builds the component from
//! that, as `wasm-tools component new` would, so authors need no other
//! tool. The component is then validated like any other.

use std::borrow::Cow;

use super::LoadError;

/// The first eight bytes of a core module: the magic number and version 1.
/// A component has the same magic and another version (and layer) word.
const CORE_MODULE_HEADER: [u8; 8] = *b"\0asm\x01\0\0\0";

/// `bytes` as a component: unchanged when they are not a core module
/// (compiling reports what else is wrong with them), else the component
/// built from the module and the `subs:agent` world it carries.
pub(crate) fn componentize(bytes: &[u8]) -> Result<Cow<'_, [u8]>, LoadError> {
    if !bytes.starts_with(&CORE_MODULE_HEADER) {
        return Ok(Cow::Borrowed(bytes));
    }
    // wit-component validates what it reads, but it is a large parser fed
    // a stranger's bytes: a panic in it must refuse the upload, not take
    // the engine down.
    let encoded = std::panic::catch_unwind(|| {
        let mut encoder = wit_component::ComponentEncoder::default();
        encoder.validate(true).module(bytes)?;
        encoder.encode()
    });
    match encoded {
        Ok(Ok(component)) => Ok(Cow::Owned(component)),
        Ok(Err(error)) => Err(LoadError::World(format!(
            "a core module the engine cannot make a component of: {error:#}; build agents with the \
             subs-sdk `export!` macro, for wasm32-unknown-unknown (no WASI) or wasm32-wasip2"
        ))),
        Err(_) => Err(LoadError::Invalid("a core module the engine could not read".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module in the binary format: the header and one empty type
    /// section, nothing else.
    const EMPTY_MODULE: &[u8] = b"\0asm\x01\0\0\0\x01\x01\x00";

    #[test]
    fn components_and_other_bytes_pass_through_untouched() {
        for bytes in [&b"\0asm\x0d\0\x01\0"[..], b"not wasm at all", b"", b"\0asm"] {
            assert!(matches!(componentize(bytes), Ok(Cow::Borrowed(b)) if b == bytes));
        }
    }

    #[test]
    fn a_core_module_without_the_world_becomes_an_empty_component() {
        // wit-component makes an empty world of a module that carries none;
        // validation then refuses it for its missing `decide`.
        let component = componentize(EMPTY_MODULE).unwrap();
        assert!(component.starts_with(b"\0asm"));
        assert!(!component.starts_with(&CORE_MODULE_HEADER));
    }

    #[test]
    fn a_core_module_importing_wasi_preview1_is_refused_by_name() {
        // (module (import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32))))
        let module: &[u8] = &[
            0, 0x61, 0x73, 0x6d, 1, 0, 0, 0, // header
            1, 9, 1, 0x60, 4, 0x7f, 0x7f, 0x7f, 0x7f, 1, 0x7f, // type section
            2, 0x23, 1, 22, b'w', b'a', b's', b'i', b'_', b's', b'n', b'a', b'p', b's', b'h', b'o', b't', b'_', b'p',
            b'r', b'e', b'v', b'i', b'e', b'w', b'1', 8, b'f', b'd', b'_', b'w', b'r', b'i', b't', b'e', 0,
            0, // import section
        ];
        let err = componentize(module).unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, LoadError::World(_)), "{message}");
        assert!(message.contains("wasi_snapshot_preview1"), "{message}");
    }
}
