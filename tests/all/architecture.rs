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
    wrong.extend(check(&all, "subs-store-redb", &["subs-protocol", "subs-store"], HTTP));
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
