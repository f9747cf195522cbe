//! The dependency rules of `docs/architecture.md`, checked on the
//! workspace as `cargo metadata` describes it: a crate that gains a
//! dependency against them fails here, naming the crate and the
//! dependency.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Each workspace crate's dependencies (normal and build; dev-dependencies
/// are for its tests and may reach further), by crate name.
fn workspace_dependencies() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .current_dir(&root)
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    packages
        .iter()
        .map(|package| {
            let dependencies = package["dependencies"].as_array().expect("dependencies");
            let names = dependencies
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().expect("a dependency's name").to_owned())
                .collect();
            (package["name"].as_str().expect("a package's name").to_owned(), names)
        })
        .collect()
}

/// The workspace crates `krate` depends on must all be in `allowed`, and
/// none of its dependencies may be in `forbidden` (crates from anywhere).
fn check(all: &BTreeMap<String, Vec<String>>, krate: &str, allowed: &[&str], forbidden: &[&str]) -> Vec<String> {
    let Some(dependencies) = all.get(krate) else { return vec![format!("`{krate}` is not in the workspace")] };
    let mut wrong = Vec::new();
    for dependency in dependencies {
        let internal = all.contains_key(dependency);
        if internal && !allowed.contains(&dependency.as_str()) {
            wrong.push(format!("`{krate}` depends on `{dependency}`; it may reach only {allowed:?}"));
        }
        if forbidden.contains(&dependency.as_str()) {
            wrong.push(format!("`{krate}` depends on `{dependency}`, which it must not"));
        }
    }
    wrong
}

/// HTTP libraries: the store and the session loop use none.
const HTTP: &[&str] = &["axum", "hyper", "hyper-util", "reqwest", "tower", "tower-http", "http"];

#[test]
fn crates_depend_only_the_way_the_architecture_says() {
    let all = workspace_dependencies();
    let agent_side = ["subs-protocol", "subs-sdk", "subs-http-worker", "tools"];
    let mut wrong = Vec::new();
    wrong.extend(check(&all, "subs-protocol", &[], &[]));
    for krate in ["subs-sdk", "subs-http-worker", "passthrough", "tools", "tools-http"] {
        wrong.extend(check(&all, krate, &agent_side, &["wasmtime", "redb"]));
    }
    wrong.extend(check(&all, "subs-store", &["subs-protocol"], HTTP));
    for backend in ["subs-store-redb", "subs-store-postgres"] {
        wrong.extend(check(&all, backend, &["subs-protocol", "subs-store"], HTTP));
    }
    wrong.extend(check(&all, "subs-engine", &["subs-protocol", "subs-store"], &["axum", "redb"]));
    wrong.extend(check(&all, "subs-server", &["subs-protocol", "subs-store", "subs-engine"], &["redb"]));
    assert!(wrong.is_empty(), "dependencies against docs/architecture.md:\n{}", wrong.join("\n"));
}

/// The session code reaches HTTP only through the worker and model
/// traits: no file of `engine/engine/src/session/` names an HTTP library.
#[test]
fn the_session_loop_names_no_http_library() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/engine/src/session");
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("the session sources") {
        let path = entry.expect("a directory entry").path();
        let text = std::fs::read_to_string(&path).expect("a source file");
        for library in HTTP {
            let used = format!("{}::", library.replace('-', "_"));
            if text.lines().any(|line| !line.trim_start().starts_with("//") && line.contains(&used)) {
                wrong.push(format!("{} uses `{used}`", path.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "the loop reaches HTTP directly:\n{}", wrong.join("\n"));
}

/// Ways of reaching the store directly: naming the trait as a type, or
/// committing a batch.
const STORE_BY_HAND: &[&str] =
    &["dyn Store", "dyn subs_engine::Store", "dyn subs_engine::store::Store", "dyn subs_store::Store", ".commit("];

/// The store's trait and batch types, which a `use` of the engine's (or the
/// store crate's) paths must not bring in.
const STORE_ITEMS: &[&str] = &["Store", "Batch", "Op"];

/// Every `.rs` file under `dir`, in its subdirectories too.
fn sources(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// The server keeps nothing in the store by itself: sessions, agents,
/// tenants and keys are read and written through the engine (its methods
/// and its agent registry), so only the engine decides what goes into a
/// batch. No source of `engine/server/src/` names the store trait as a
/// type, commits a batch, or imports the trait or the batch types. The
/// modules `lib.rs` declares under `#[cfg(test)]`, and each file's own
/// `#[cfg(test)] mod tests`, are left out: a unit test builds the store its
/// engine runs on and may look into it, as `tests/server.rs` does.
#[test]
fn the_server_reaches_the_store_only_through_the_engine() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/server/src");
    let lib = std::fs::read_to_string(dir.join("lib.rs")).expect("the server's lib.rs");
    let lines: Vec<&str> = lib.lines().map(str::trim).collect();
    let test_only: Vec<std::path::PathBuf> = lines
        .windows(2)
        .filter(|pair| pair[0] == "#[cfg(test)]")
        .filter_map(|pair| pair[1].strip_prefix("mod ")?.strip_suffix(';'))
        .map(|module| dir.join(format!("{module}.rs")))
        .collect();
    let mut wrong = Vec::new();
    for path in sources(&dir).into_iter().filter(|path| !test_only.contains(path)) {
        let text = std::fs::read_to_string(&path).expect("a source file");
        // A file's own unit tests (`#[cfg(test)] mod tests {`, to its end)
        // are left out for the same reason.
        let lines: Vec<&str> = text.lines().collect();
        let tests_at = lines
            .windows(2)
            .position(|pair| pair[0].trim() == "#[cfg(test)]" && pair[1].trim_start().starts_with("mod tests {"))
            .unwrap_or(lines.len());
        let code: Vec<&str> =
            lines[..tests_at].iter().copied().filter(|line| !line.trim_start().starts_with("//")).collect();
        for line in &code {
            for what in STORE_BY_HAND.iter().filter(|what| line.contains(*what)) {
                wrong.push(format!("{} names `{what}`: {}", path.display(), line.trim()));
            }
        }
        // A `use` may span lines (`use a::{` … `};`): each is read whole.
        for (at, line) in code.iter().enumerate() {
            let line = line.trim_start();
            let line = line.strip_prefix("pub ").unwrap_or(line);
            if !(line.starts_with("use subs_engine") || line.starts_with("use subs_store")) {
                continue;
            }
            let end = code[at..].iter().position(|l| l.contains(';')).map_or(code.len(), |n| at + n + 1);
            let used = code[at..end].iter().map(|l| l.trim()).collect::<Vec<_>>().join(" ");
            if used.split(|c: char| !(c.is_alphanumeric() || c == '_')).any(|item| STORE_ITEMS.contains(&item)) {
                wrong.push(format!("{} imports the store's own types: {used}", path.display()));
            }
        }
    }
    assert!(wrong.is_empty(), "the server reaches the store directly:\n{}", wrong.join("\n"));
}

/// A session actor works with its environment (`session/env.rs`) and
/// reaches other sessions through the `Mailboxes` trait: outside its unit
/// tests, `session/actor.rs` names neither the engine nor the directory of
/// running actors, so the two do not import each other again.
#[test]
fn the_session_actor_knows_neither_the_engine_nor_the_directory() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/engine/src/session/actor.rs");
    let text = std::fs::read_to_string(&path).expect("the actor's source");
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let wrong: Vec<&str> = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter(|line| ["crate::engine", "crate::Engine", "directory::", "Directory"].iter().any(|w| line.contains(w)))
        .collect();
    assert!(wrong.is_empty(), "{} reaches past its environment:\n{}", path.display(), wrong.join("\n"));
}
