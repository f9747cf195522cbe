//! Repository tasks, run as `cargo xtask <task>` (the alias is in
//! `.cargo/config.toml`).
//!
//! - `codegen`: writes every file generated from the protocol's Rust types
//!   (engine/protocol): the JSON Schema of the wire types, and from that
//!   schema the TypeScript and Python SDKs' protocol types and the client
//!   libraries' (clients/ts, clients/python).
//! - `codegen --check`: writes nothing; fails naming each generated file
//!   that differs from what `codegen` would write (CI runs it).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use xtask::generated_files;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["codegen"] => codegen(false),
        ["codegen", "--check"] => codegen(true),
        _ => {
            eprintln!("usage: cargo xtask codegen [--check]");
            ExitCode::FAILURE
        }
    }
}

fn codegen(check: bool) -> ExitCode {
    let root = repo_root();
    let files = match generated_files(&subs_protocol::schema::document()) {
        Ok(files) => files,
        Err(e) => {
            eprintln!("codegen: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stale = Vec::new();
    for (path, text) in files {
        let full = root.join(path);
        let current = std::fs::read_to_string(&full).ok();
        if current.as_deref() == Some(text.as_str()) {
            continue;
        }
        if check {
            stale.push(path);
            continue;
        }
        if let Err(e) = std::fs::write(&full, text) {
            eprintln!("codegen: writing {path}: {e}");
            return ExitCode::FAILURE;
        }
        println!("wrote {path}");
    }
    if stale.is_empty() {
        return ExitCode::SUCCESS;
    }
    for path in &stale {
        eprintln!("stale generated file: {path} (differs from what `cargo xtask codegen` writes)");
    }
    eprintln!("run `cargo xtask codegen` and commit the result");
    ExitCode::FAILURE
}
