//! Builds every guest component the tests run, once, and tells the tests
//! where they are.
//!
//! Guests are the example agents under `examples/` and the test components
//! under `tests/components/` (each a workspace member whose package name is
//! `test-<dir>`). They are compiled for `wasm32-wasip2` by a nested cargo
//! into their own target directory, so the nested build neither waits for
//! nor invalidates the outer one. A few are also built for
//! `wasm32-unknown-unknown` (`LEAN`): core modules without WASI, which the
//! engine makes components at load. The paths end up as constants in
//! `guests.rs` (see `lib.rs`), so no test builds anything by hand: a
//! package's component as its upper-case name, its core module with
//! `_LEAN` appended.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The example agents, by package name.
const EXAMPLES: &[&str] = &["passthrough", "tools"];

/// The packages also built as core modules for `wasm32-unknown-unknown`.
const LEAN: &[&str] = &["passthrough", "test-garbage", "test-floor"];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("tests/ sits in the workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    let mut packages: Vec<String> = EXAMPLES.iter().map(|s| (*s).to_owned()).collect();
    let mut components: Vec<String> = fs::read_dir(root.join("tests/components"))
        .expect("tests/components exists")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    components.sort();
    packages.extend(components.iter().map(|c| format!("test-{c}")));

    for dir in ["guest-sdk", "engine/protocol", "wit", "examples", "tests/components", "Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }

    let target_dir = root.join("target").join("guests");
    build(&root, &target_dir, "wasm32-wasip2", &packages);
    let lean: Vec<String> = LEAN.iter().map(|s| (*s).to_owned()).collect();
    build(&root, &target_dir, "wasm32-unknown-unknown", &lean);

    let mut consts = String::new();
    for (target, packages, suffix, what) in [
        ("wasm32-wasip2", &packages, "", "component"),
        ("wasm32-unknown-unknown", &lean, "_LEAN", "core module (built without WASI)"),
    ] {
        let wasm_dir = target_dir.join(target).join("release");
        for package in packages {
            let file = wasm_dir.join(format!("{}.wasm", package.replace('-', "_")));
            assert!(file.exists(), "guest `{package}` built, but {} is missing", file.display());
            let name = package.to_uppercase().replace('-', "_");
            writeln!(consts, "/// The `{package}` {what}.").unwrap();
            writeln!(consts, "pub const {name}{suffix}: &str = {:?};", file.display().to_string()).unwrap();
        }
    }
    writeln!(consts, "/// Every guest component, by package name.").unwrap();
    writeln!(consts, "pub const ALL: &[(&str, &str)] = &[").unwrap();
    for package in &packages {
        writeln!(consts, "    ({package:?}, {}),", package.to_uppercase().replace('-', "_")).unwrap();
    }
    writeln!(consts, "];").unwrap();
    fs::write(out_dir.join("guests.rs"), consts).expect("OUT_DIR is writable");
}

fn build(root: &Path, target_dir: &Path, target: &str, packages: &[String]) {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).args(["build", "--release", "--target", target, "--target-dir"]).arg(target_dir);
    for package in packages {
        cmd.args(["-p", package]);
    }
    // The outer build's settings are for the host target; the guests get
    // their own. The jobserver (CARGO_MAKEFLAGS) is kept so both builds
    // share the machine's cores instead of oversubscribing them.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd.status().expect("cargo can be run from a build script");
    assert!(
        status.success(),
        "building the guest components for {target} failed (is the target installed? `rustup target add {target}`)"
    );
}
