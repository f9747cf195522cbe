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
    wrong.extend(check(&all, "subs-core", &["subs-protocol", "subs-store"], &["axum", "redb"]));
    for part in ["subs-host", "subs-models"] {
        wrong.extend(check(&all, part, &["subs-protocol", "subs-store", "subs-core"], &["axum", "redb"]));
    }
    // The protocols the engine speaks to the outside besides its own: MCP
    // (its wire types and client) and OCI registries. Leaves: they know the
    // protocol's types at most, and neither a store nor the engine.
    wrong.extend(check(&all, "subs-mcp", &["subs-protocol"], &["axum", "redb", "wasmtime"]));
    wrong.extend(check(&all, "subs-oci", &[], &["axum", "redb", "wasmtime"]));
    let engine_parts = ["subs-protocol", "subs-store", "subs-core", "subs-host", "subs-models", "subs-mcp"];
    wrong.extend(check(&all, "subs-engine", &engine_parts, &["axum", "redb"]));
    let server_parts = ["subs-protocol", "subs-store", "subs-engine", "subs-mcp", "subs-oci"];
    wrong.extend(check(&all, "subs-server", &server_parts, &["redb"]));
    assert!(wrong.is_empty(), "dependencies against docs/architecture.md:\n{}", wrong.join("\n"));
}

/// The session code reaches HTTP only through the worker and model
/// traits: no file of `engine/core/src/session/` names an HTTP library.
#[test]
fn the_session_loop_names_no_http_library() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/core/src/session");
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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/core/src/session/actor.rs");
    let text = std::fs::read_to_string(&path).expect("the actor's source");
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let wrong: Vec<&str> = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .filter(|line| ["crate::engine", "crate::Engine", "directory::", "Directory"].iter().any(|w| line.contains(w)))
        .collect();
    assert!(wrong.is_empty(), "{} reaches past its environment:\n{}", path.display(), wrong.join("\n"));
}

/// What the engine's core must not link, even through another crate:
/// the component runtime (every `wasmtime*` crate), an HTTP client or
/// server, a database driver.
fn core_forbids(name: &str) -> bool {
    name.starts_with("wasmtime") || ["reqwest", "axum", "sqlx", "redb"].contains(&name)
}

/// Every crate `krate` reaches through normal and build dependencies, each
/// with the chain that reaches it (`krate -> a -> b`), from the resolved
/// graph `cargo metadata` prints.
fn reachable(krate: &str) -> BTreeMap<String, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let metadata = |extra: &[&str]| {
        std::process::Command::new(&cargo)
            .args(["metadata", "--format-version", "1"])
            .args(extra)
            .current_dir(&root)
            .output()
            .expect("cargo metadata runs")
    };
    // Offline first: the build has fetched every crate it compiles. The
    // graph also names crates of other targets (Android's, Windows'), which
    // a fresh machine has not fetched: then cargo fetches their manifests.
    let mut output = metadata(&["--offline"]);
    if !output.status.success() {
        output = metadata(&[]);
    }
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| (p["id"].as_str().expect("an id"), p["name"].as_str().expect("a name")))
        .collect();
    let nodes: BTreeMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("the resolved graph")
        .iter()
        .map(|node| {
            let deps = node["deps"]
                .as_array()
                .expect("deps")
                .iter()
                .filter(|dep| {
                    dep["dep_kinds"]
                        .as_array()
                        .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].as_str() != Some("dev")))
                })
                .map(|dep| dep["pkg"].as_str().expect("a dependency's id"))
                .collect();
            (node["id"].as_str().expect("a node's id"), deps)
        })
        .collect();
    let start = names.iter().find(|(_, name)| **name == krate).map(|(id, _)| *id);
    let Some(start) = start else { panic!("`{krate}` is not in the workspace") };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([(start, krate.to_owned())]);
    while let Some((id, chain)) = queue.pop_front() {
        for dep in nodes.get(id).into_iter().flatten() {
            let name = names[dep];
            if !seen.contains_key(name) {
                let chain = format!("{chain} -> {name}");
                seen.insert(name.to_owned(), chain.clone());
                queue.push_back((dep, chain));
            }
        }
    }
    seen
}

/// The core (sessions, the loop, events, tenants, the worker and model
/// traits) links neither wasmtime, an HTTP client or server, nor a
/// database driver, directly or through another crate: the component host
/// (`subs-host`) and the providers (`subs-models`) bring those, and
/// `subs-engine` wires them to it.
#[test]
fn the_core_links_no_runtime_http_or_database() {
    let wrong: Vec<String> = reachable("subs-core")
        .into_iter()
        .filter(|(name, _)| core_forbids(name))
        .map(|(name, chain)| format!("`subs-core` links `{name}`: {chain}"))
        .collect();
    assert!(wrong.is_empty(), "the core reaches past its traits:\n{}", wrong.join("\n"));
}

/// Only the component host depends on wasmtime: every other crate of the
/// workspace reaches components through it.
#[test]
fn only_the_component_host_depends_on_wasmtime() {
    let wrong: Vec<String> = workspace_dependencies()
        .into_iter()
        .filter(|(krate, _)| krate != "subs-host")
        .flat_map(|(krate, dependencies)| {
            dependencies
                .into_iter()
                .filter(|d| d.starts_with("wasmtime"))
                .map(move |d| format!("`{krate}` depends on `{d}`; only `subs-host` may"))
        })
        .collect();
    assert!(wrong.is_empty(), "wasmtime outside the component host:\n{}", wrong.join("\n"));
}

/// The top-level modules of the crate at `src` (its `lib.rs`), and the
/// names its `lib.rs` re-exports at the root, each with the module it
/// comes from.
fn modules(src: &Path) -> (Vec<String>, BTreeMap<String, String>) {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let mut modules = Vec::new();
    let mut roots = BTreeMap::new();
    for line in lib.lines().map(str::trim) {
        let line = line.strip_prefix("pub ").or_else(|| line.strip_prefix("pub(crate) ")).unwrap_or(line);
        if let Some(name) = line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';')) {
            modules.push(name.to_owned());
        } else if let Some(used) = line.strip_prefix("use ").and_then(|l| l.strip_suffix(';'))
            && let Some((module, items)) = used.split_once("::")
        {
            for item in items.split(|c: char| !(c.is_alphanumeric() || c == '_')).filter(|i| !i.is_empty()) {
                roots.insert(item.to_owned(), module.to_owned());
            }
        }
    }
    (modules, roots)
}

/// The names a `crate::` path in `code` starts with: `crate::a::b` gives
/// `a`, `crate::{a::b, c}` gives `a` and `c`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item, mut fresh) = (0, String::new(), true);
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        if !item.is_empty() {
                            names.push(std::mem::take(&mut item));
                        }
                        fresh = true;
                    }
                    c if fresh && (c.is_alphanumeric() || c == '_') => item.push(c),
                    _ if fresh && !item.is_empty() => {
                        names.push(std::mem::take(&mut item));
                        fresh = false;
                    }
                    _ => {}
                }
            }
            if !item.is_empty() {
                names.push(item);
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            names.push(name);
        }
    }
    names
}

/// Which top-level modules of the crate at `src` each one names through
/// `crate::` paths (comments left out), with a file that does.
fn module_edges(src: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let (modules, roots) = modules(src);
    let mut edges: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for path in sources(src) {
        let relative = path.strip_prefix(src).expect("under src").to_string_lossy().into_owned();
        let top = relative.split('/').next().unwrap_or_default().trim_end_matches(".rs").to_owned();
        if !modules.contains(&top) {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        let code: String =
            text.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n");
        for name in crate_paths(&code) {
            let target = if modules.contains(&name) { Some(name) } else { roots.get(&name).cloned() };
            if let Some(target) = target.filter(|t| *t != top && modules.contains(t)) {
                edges.entry(top.clone()).or_default().entry(target).or_insert_with(|| relative.clone());
            }
        }
    }
    edges
}

/// A cycle in `edges`, as the modules along it with the file that makes
/// each step (`a (a.rs) -> b (b/x.rs) -> a`); `None` when there is none.
fn find_cycle(edges: &BTreeMap<String, BTreeMap<String, String>>) -> Option<String> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeMap<String, String>>,
        path: &mut Vec<String>,
        done: &mut std::collections::BTreeSet<String>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let steps: Vec<String> = path[at..]
                .iter()
                .enumerate()
                .map(|(i, from)| {
                    let to = path.get(at + i + 1).map_or(node, String::as_str);
                    format!("{from} ({})", edges[from][to])
                })
                .collect();
            return Some(format!("{} -> {node}", steps.join(" -> ")));
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flat_map(BTreeMap::keys) {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = std::collections::BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// The core's top-level modules depend on each other without a cycle
/// (sessions on tenants, never tenants on sessions; the engine on the
/// sessions, never the sessions on the engine), read from the `crate::`
/// paths of its sources. `SUBS_CORE_SRC` points the check at another
/// source tree (to see it fail on one with a cycle).
#[test]
fn the_core_modules_have_no_cycle() {
    let src = std::env::var_os("SUBS_CORE_SRC")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/core/src"), Into::into);
    let edges = module_edges(&src);
    assert!(edges.len() > 5, "{} has the core's modules", src.display());
    if let Some(cycle) = find_cycle(&edges) {
        panic!("the modules of {} import each other: {cycle}", src.display());
    }
}

#[test]
fn crate_paths_reads_single_and_grouped_imports() {
    let code = "use crate::a::X;\nuse crate::{b::Y, c, d::{e, f}};\nlet _ = crate::g::h();";
    assert_eq!(crate_paths(code), ["a", "b", "c", "d", "g"]);
}
