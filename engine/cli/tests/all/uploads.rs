//! Compile bombs sent to a real `subs serve`: components that take minutes
//! and gigabytes to compile are refused within the compile budget, leave
//! nothing on disk, and the server (whose own memory stays small, since
//! compiling happens in a child process) keeps serving another tenant's
//! tool turns throughout.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasm_encoder::{
    Alias, BlockType, CanonicalFunctionSection, CanonicalOption, CodeSection, Component, ComponentAliasSection,
    ComponentExportKind, ComponentExportSection, ComponentTypeSection, ComponentValType, ExportKind, ExportSection,
    Function, FunctionSection, InstanceSection, Module, ModuleArg, ModuleSection, TypeSection, ValType,
};

use crate::{ADD, Server, TOOLS, http};

const HOSTILE: (&str, &str) = ("hostile", "subs_hostile_0123456789abcdef");
const NEIGHBOUR: (&str, &str) = ("neighbour", "subs_neighbour_0123456789abcdef");

/// The compile budget of the test's server: far below what the bombs need
/// (each took over a minute and a gigabyte on the machine they were made
/// on), far above what the `tools` agent needs.
const WALL_SECS: u64 = 20;
const MEMORY_MIB: u64 = 512;

/// A component whose one core module is `module`, exporting its function
/// `f` as `decide`: enough of the subs:agent world's shape that the upload
/// is compiled before the export's type is checked.
fn component(module: &Module) -> Vec<u8> {
    let mut c = Component::new();
    c.section(&ModuleSection(module));
    let mut instances = InstanceSection::new();
    instances.instantiate(0, Vec::<(&str, ModuleArg)>::new());
    c.section(&instances);
    let mut aliases = ComponentAliasSection::new();
    aliases.alias(Alias::CoreInstanceExport { instance: 0, kind: ExportKind::Func, name: "f" });
    c.section(&aliases);
    let mut types = ComponentTypeSection::new();
    types.function().params(Vec::<(&str, ComponentValType)>::new()).result(None);
    c.section(&types);
    let mut canonical = CanonicalFunctionSection::new();
    canonical.lift(0, 0, Vec::<CanonicalOption>::new());
    c.section(&canonical);
    let mut exports = ComponentExportSection::new();
    exports.export("decide", ComponentExportKind::Func, 0, None);
    c.section(&exports);
    c.finish()
}

/// A module of `count` functions of type `() -> ()`, the first exported as
/// `f`, each with the body `body` makes.
fn module(count: u32, body: impl Fn() -> Function) -> Module {
    let mut m = Module::new();
    let mut types = TypeSection::new();
    types.ty().function([], []);
    m.section(&types);
    let mut functions = FunctionSection::new();
    for _ in 0..count {
        functions.function(0);
    }
    m.section(&functions);
    let mut exports = ExportSection::new();
    exports.export("f", ExportKind::Func, 0);
    m.section(&exports);
    let mut code = CodeSection::new();
    let body = body();
    for _ in 0..count {
        code.function(&body);
    }
    m.section(&code);
    m
}

/// One function of `bytes` bytes with 2,000 `i64` locals and thousands of
/// small blocks that each read, add and write them: register allocation
/// over it is what takes the compiler minutes.
fn branchy(bytes: usize) -> Vec<u8> {
    const LOCALS: u32 = 2000;
    component(&module(1, || {
        let mut f = Function::new([(LOCALS, ValType::I64)]);
        let mut k = 0u32;
        while f.byte_len() < bytes {
            let (a, b, c) = (k % LOCALS, (k * 7 + 3) % LOCALS, (k * 13 + 5) % LOCALS);
            let mut i = f.instructions();
            i.block(BlockType::Empty).local_get(a).i64_eqz().br_if(0);
            i.local_get(b).local_get(c).i64_add().local_set(a).end();
            k += 1;
        }
        f.instructions().end();
        f
    }))
}

/// `count` empty functions: each costs the compiler its own bookkeeping.
fn many(count: u32) -> Vec<u8> {
    component(&module(count, || {
        let mut f = Function::new([]);
        f.instructions().end();
        f
    }))
}

/// The files under `dir`, recursively.
fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found.sort();
    found
}

/// The highest resident memory of process `pid` so far, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server runs");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib << 10
}

async fn upload(url: &str, key: &str, agent: &str, bytes: Vec<u8>) -> (u16, Value) {
    let response = http()
        .put(format!("{url}/v1/agents/{agent}"))
        .bearer_auth(key)
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .expect("the server answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// One streamed tool turn of the neighbour's `tools` agent; its last
/// event's name.
async fn neighbour_turn(url: &str, session: &str) -> String {
    let body = json!({"type": "client.message", "agent_id": "tools", "stream": true,
        "message": {"role": "user", "content": ADD}});
    let response = http()
        .post(format!("{url}/v1/sessions/{session}/input"))
        .bearer_auth(NEIGHBOUR.1)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("the server answers");
    let text = response.text().await.expect("the stream ends");
    let last = text.lines().rev().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default();
    last.to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compile_bombs_are_refused_within_the_budget_while_a_neighbour_works() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(
        &config,
        format!(
            "[[keys]]\ntenant = \"{}\"\nkey = \"{}\"\n[[keys]]\ntenant = \"{}\"\nkey = \"{}\"\n\
             [compile]\nwall_secs = {WALL_SECS}\nmemory_mib = {MEMORY_MIB}\n",
            HOSTILE.0, HOSTILE.1, NEIGHBOUR.0, NEIGHBOUR.1
        ),
    )
    .unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, "127.0.0.1:0", &["--config", config.to_str().unwrap()]);
    let url = server.url.clone();
    let tools = std::fs::read(TOOLS).unwrap();
    let (status, body) = upload(&url, NEIGHBOUR.1, "tools", tools).await;
    assert_eq!(status, 201, "{body}");
    let kept = || [files(&data.join("components")), files(&data.join("compiled"))].concat();
    let kept_before = kept();
    let functions = data.join("compiled").join("functions");
    let (shared, whole): (Vec<_>, Vec<_>) = kept_before.iter().partition(|f| Path::new(f).starts_with(&functions));
    assert_eq!(whole.len(), 2, "the tools component and its compiled code: {whole:?}");
    assert!(!shared.is_empty(), "an accepted upload's compiled functions are shared");

    // The neighbour's tool turns, one after another, all along.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let neighbour = tokio::spawn({
        let (url, stop, done) = (url.clone(), stop.clone(), done.clone());
        async move {
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let last = tokio::time::timeout(Duration::from_secs(30), neighbour_turn(&url, &format!("n{n}")))
                    .await
                    .expect("the neighbour's turn ends within 30 s");
                assert_eq!(last, "turn.done");
                done.fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
        }
    });

    let bombs = [
        // Shape one: one big, branchy function.
        ("branchy", branchy(250_000), "compile budget"),
        // Shape two, under the function count's limit: the compile runs,
        // and runs out of its memory.
        ("many", many(190_000), "compile budget"),
        // Shape two, over it: refused without compiling.
        ("million", many(1_000_000), "functions: 1000000, more than the compile budget's 200000"),
    ];
    for (agent, bytes, expected) in bombs {
        let started = Instant::now();
        let (status, body) = upload(&url, HOSTILE.1, agent, bytes).await;
        let took = started.elapsed();
        assert_eq!(status, 422, "{agent}: {body}");
        let error = body["error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{agent}: {error}");
        assert!(took < Duration::from_secs(WALL_SECS + 15), "{agent} took {took:?}");
    }

    stop.store(true, Ordering::SeqCst);
    neighbour.await.unwrap();
    assert!(done.load(Ordering::SeqCst) > 0, "the neighbour's turns completed meanwhile");
    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200, "the server is alive");
    let peak = peak_rss(server.process.child.id());
    assert!(peak < 512 << 20, "the server itself peaked at {} MiB", peak >> 20);
    assert_eq!(kept(), kept_before, "nothing of a refused upload is kept, not one compiled function");
}
