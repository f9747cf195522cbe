//! Disk as a hostile tenant fills it: uploads padded with a large custom
//! section, stored inactive, then the agent deleted. Deleting reclaims
//! each version's component bytes and compiled code unless another
//! tenant's agent has the same digest; a version dropped past the
//! tenant's `max_stored_agent_bytes` is reclaimed as well; and a restart
//! removes the files no agent refers to (what a crash between a record's
//! removal and its files' would leave).

use std::path::Path;
use std::time::Duration;

use reqwest::Method;
use serde_json::Value;

use super::{Arena, HOSTILE, HOSTILE2};
use crate::{Server, TOOLS, http};

/// The tools component with a custom section of `mib` MiB of `fill`
/// appended: a component of its own digest, compiled to the same code.
fn padded(mib: usize, fill: u8) -> Vec<u8> {
    let mut bytes = std::fs::read(TOOLS).expect("the tools component is built");
    let name = b"padding";
    let payload = mib << 20;
    let mut section = Vec::new();
    leb128(&mut section, name.len());
    section.extend_from_slice(name);
    section.resize(section.len() + payload, fill);
    bytes.push(0); // a custom section
    leb128(&mut bytes, section.len());
    bytes.extend_from_slice(&section);
    bytes
}

fn leb128(out: &mut Vec<u8>, mut n: usize) {
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The digest's hex, as the data directory names its files.
fn hex(version: &str) -> &str {
    version.trim_start_matches("sha256:")
}

/// Whether the data directory holds the component `version`'s bytes, and
/// its compiled code.
fn files_of(data: &Path, version: &str) -> (bool, bool) {
    let bytes = data.join("components").join(format!("{}.wasm", hex(version))).exists();
    let compiled = std::fs::read_dir(data.join("compiled"))
        .map(|entries| {
            entries.flatten().any(|e| e.file_name().to_string_lossy().starts_with(&format!("{}-", hex(version))))
        })
        .unwrap_or(false);
    (bytes, compiled)
}

/// Bytes of the regular files directly in `dir`.
fn bytes_in(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()
        })
        .unwrap_or(0)
}

async fn upload(arena: &Arena, key: &str, agent: &str, bytes: Vec<u8>, activate: bool) -> Value {
    let path = if activate { agent.to_owned() } else { format!("{agent}?activate=false") };
    let (status, body) = arena.upload(key, &path, bytes).await;
    assert!(status == 201, "uploading {path}: {status} {body}");
    body
}

fn versions(agent: &Value) -> Vec<String> {
    agent["versions"].as_array().expect("versions").iter().map(|v| v["version"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_reclaims_bytes_and_compiled_code_and_a_restart_sweeps_orphans() {
    let mut arena = Arena::start("").await;
    let neighbour = arena.neighbour();
    let components = arena.data.join("components");
    let before = bytes_in(&components);

    // Five versions of 8 MiB each, one active and four stored inactive.
    upload(&arena, HOSTILE.1, "big", padded(8, 1), true).await;
    let mut agent = Value::Null;
    for fill in 2..=5 {
        agent = upload(&arena, HOSTILE.1, "big", padded(8, fill), false).await;
    }
    let stored = versions(&agent);
    assert_eq!(stored.len(), 5, "{agent}");
    // Another tenant's agent has the third version's bytes too.
    let shared = stored[2].clone();
    upload(&arena, HOSTILE2.1, "same", padded(8, 3), true).await;
    for version in &stored {
        assert_eq!(files_of(&arena.data, version), (true, true), "{version} is kept before the delete");
    }
    assert!(bytes_in(&components) - before >= 5 * (8 << 20));

    // A version deleted alone goes with its files.
    let (status, body) =
        arena.call(Method::DELETE, &format!("/v1/agents/big/versions/{}", stored[1]), Some(HOSTILE.1), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(versions(&body).len(), 4);
    assert_eq!(files_of(&arena.data, &stored[1]), (false, false), "the deleted version's files");
    let (status, body) =
        arena.call(Method::DELETE, &format!("/v1/agents/big/versions/{}", stored[0]), Some(HOSTILE.1), None).await;
    assert_eq!((status, body["code"].as_str()), (409, Some("conflict")), "the current version: {body}");

    // The agent deleted: every version's files go, but the shared one's.
    let (status, _) = arena.call(Method::DELETE, "/v1/agents/big", Some(HOSTILE.1), None).await;
    assert_eq!(status, 204);
    for version in stored.iter().filter(|v| **v != shared) {
        assert_eq!(files_of(&arena.data, version), (false, false), "{version} is reclaimed");
    }
    assert_eq!(files_of(&arena.data, &shared), (true, true), "another tenant's agent has {shared}");
    let left = bytes_in(&components) - before;
    assert!(left < (9 << 20), "{} MiB of components left, one version's worth expected", left >> 20);

    let watched = neighbour.stop().await;
    watched.assert_within(Duration::from_secs(10), Duration::from_secs(1));
    arena.assert_peak_below(768 << 20);

    // Files no record names, as a crash after a record's removal leaves
    // them, are gone after a restart; the shared version's stay.
    let orphan = "ab".repeat(32);
    std::fs::write(components.join(format!("{orphan}.wasm")), padded(1, 9)).unwrap();
    std::fs::write(arena.data.join("compiled").join(format!("{orphan}-0000000000000000.cwasm")), b"code").unwrap();
    arena.restart();
    let orphan = format!("sha256:{orphan}");
    assert_eq!(files_of(&arena.data, &orphan), (false, false), "the orphan is swept at start");
    assert_eq!(files_of(&arena.data, &shared), (true, true), "what an agent has stays");
    let (status, _) = arena.call(Method::GET, "/v1/agents/same", Some(HOSTILE2.1), None).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tenants_stored_bytes_are_bounded_and_what_is_dropped_is_reclaimed() {
    let arena = Arena::start("[tenants.hostile]\nmax_stored_agent_bytes = 20971520\n").await;
    let first = upload(&arena, HOSTILE.1, "big", padded(8, 1), true).await;
    let second = upload(&arena, HOSTILE.1, "big", padded(8, 2), false).await;
    let dropped = versions(&second)[1].clone();
    // A third does not fit beside both: the oldest inactive one makes room.
    let third = upload(&arena, HOSTILE.1, "big", padded(8, 3), false).await;
    let kept = versions(&third);
    assert_eq!(kept.len(), 2, "{third}");
    assert!(!kept.contains(&dropped) && kept.contains(&versions(&first)[0]), "{third}");
    assert_eq!(files_of(&arena.data, &dropped), (false, false), "the dropped version's files");

    // Another agent's first version has nothing to drop: refused, naming
    // the limit, and nothing of it kept.
    let (status, body) = arena.upload(HOSTILE.1, "other", padded(8, 4)).await;
    assert_eq!((status, body["code"].as_str()), (422, Some("limit_exceeded")), "{body}");
    assert!(body["error"].as_str().unwrap_or_default().contains("max_stored_agent_bytes"), "{body}");
    let (status, _) = arena.call(Method::GET, "/v1/agents/other", Some(HOSTILE.1), None).await;
    assert_eq!(status, 404);
    let refused = digest(&padded(8, 4));
    assert_eq!(files_of(&arena.data, &refused), (false, false), "nothing of a refused upload stays");
    arena.assert_peak_below(768 << 20);
}

/// Two servers on one PostgreSQL database, each with its own data
/// directory: an agent deleted through one is removed from the other's
/// disk too, once the other hears of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_removes_its_files_of_an_agent_deleted_on_another() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    let database = cluster.fresh_database();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let node = |dir: &Path| Server::start_with(&["--data", dir.to_str().unwrap(), "--store", &database], "127.0.0.1:0");
    let (a, _b) = (node(dir_a.path()), node(dir_b.path()));
    let bytes = padded(2, 7);
    let version = digest(&bytes);
    let response = http()
        .put(format!("{}/v1/agents/big", a.url))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);

    // `b` (kept running as `_b`) loads the agent once it hears of it: its bytes from the
    // database, its code compiled into its own data directory.
    let within = |what: &'static str, done: &dyn Fn() -> bool| {
        subs_tests::wait::eventually_blocking(Duration::from_secs(60), what, done);
    };
    within("b keeps the agent's files", &|| files_of(dir_b.path(), &version) == (true, true));
    let response = http().delete(format!("{}/v1/agents/big", a.url)).send().await.unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(files_of(dir_a.path(), &version), (false, false), "a removes its files at once");
    within("b removes its files once it hears of the delete", &|| files_of(dir_b.path(), &version) == (false, false));
}

/// The version name of a component's bytes.
fn digest(bytes: &[u8]) -> String {
    subs_engine::agents::component_digest(bytes)
}
