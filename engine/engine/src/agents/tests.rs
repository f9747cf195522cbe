//! The registry's bounds on stored versions and what it reclaims, on a
//! `MemStore`, with HTTP workers (no compile) and component records
//! written straight to the store beside files in the data directory.

use std::path::Path;
use std::time::Duration;

use super::*;
use crate::model::Models;
use crate::store::MemStore;
use crate::{Engine, EngineConfig};

fn registry(dir: &Path) -> AgentRegistry {
    let store: Arc<dyn crate::Store> = Arc::new(MemStore::new());
    let engine = Engine::open(store, Models::with_offline(), EngineConfig::default());
    AgentRegistry::new(engine, ComponentHost::new().expect("a component host"), dir.to_path_buf())
}

fn url(n: usize) -> String {
    format!("http://127.0.0.1:1/{n}")
}

/// The record's versions, current last, as the URLs' numbers.
fn numbers(record: &AgentRecord) -> Vec<String> {
    record
        .history
        .iter()
        .chain([&record.current])
        .map(|v| match &v.worker {
            AgentWorker::Http { url, .. } => url.rsplit('/').next().unwrap_or_default().to_owned(),
            AgentWorker::Component { .. } => v.digest.clone(),
        })
        .collect()
}

/// Returns once the clock's millisecond has turned, so that upload and
/// activation times (in milliseconds) tell versions apart.
async fn next_ms() {
    let now = crate::clock::now_ms();
    while crate::clock::now_ms() <= now {
        tokio::task::yield_now().await;
    }
}

/// Stores version `n`, a millisecond or so after the one before, so that
/// upload and activation times tell them apart.
async fn put(registry: &AgentRegistry, tenant: &str, agent: &str, n: usize, limits: &AgentLimits, activate: bool) {
    next_ms().await;
    registry.put_http(tenant, agent, url(n), None, limits, activate).await.expect("the version is stored");
}

#[tokio::test]
async fn past_the_version_bound_the_oldest_inactive_go_and_the_rollback_target_stays() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path());
    let limits = AgentLimits { max_agent_versions: 4, ..AgentLimits::default() };
    put(&registry, "t", "a", 1, &limits, true).await;
    put(&registry, "t", "a", 2, &limits, true).await;
    // Candidates stored inactive: the version current before (1) is the
    // one a rollback goes back to, and outlives them.
    for n in 3..=6 {
        put(&registry, "t", "a", n, &limits, false).await;
    }
    let record = registry.agent("t", "a").await.unwrap().unwrap();
    assert_eq!(numbers(&record), ["1", "5", "6", "2"], "oldest candidates dropped, the rollback target kept");
    let rollback = record.history[0].digest.clone();
    next_ms().await;
    registry.activate("t", "a", &rollback, u64::MAX).await.unwrap();

    // Activating uploads one after another keeps the latest ones.
    for n in 7..=9 {
        put(&registry, "t", "a", n, &limits, true).await;
    }
    let record = registry.agent("t", "a").await.unwrap().unwrap();
    assert_eq!(numbers(&record), ["6", "7", "8", "9"]);

    // A bound below 2 keeps the current version and one other.
    let one = AgentLimits { max_agent_versions: 1, ..limits };
    put(&registry, "t", "a", 10, &one, false).await;
    assert_eq!(numbers(&registry.agent("t", "a").await.unwrap().unwrap()), ["10", "9"]);
}

#[tokio::test]
async fn bytes_past_the_agent_and_tenant_bounds_drop_old_versions_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path());
    let long = |n: usize| format!("http://127.0.0.1:1/{n}/{}", "x".repeat(80));
    let size = long(1).len() as u64;
    let limits = AgentLimits { max_agent_bytes: 2 * size, max_stored_agent_bytes: 3 * size, ..AgentLimits::default() };
    for n in 1..=3 {
        registry.put_http("t", "a", long(n), None, &limits, true).await.unwrap();
    }
    let record = registry.agent("t", "a").await.unwrap().unwrap();
    assert_eq!(record.versions().count(), 2, "the oldest made room");
    assert_eq!(record.stored_bytes(), 2 * size);

    // Another agent of the tenant: what the first holds counts.
    registry.put_http("t", "b", long(4), None, &limits, true).await.unwrap();
    let err = registry.put_http("t", "b", long(5), None, &limits, false).await.unwrap_err();
    assert!(matches!(err, AgentError::StoredQuota { setting: "max_stored_agent_bytes", .. }), "{err:?}");
    assert!(err.to_string().contains("max_stored_agent_bytes"), "{err}");
    // Made current, its version before goes, and there is room.
    registry.put_http("t", "b", long(5), None, &limits, true).await.unwrap();
    assert_eq!(registry.agent("t", "b").await.unwrap().unwrap().versions().count(), 1);

    // One version bigger than an agent may hold is refused, and changes nothing.
    let tight = AgentLimits { max_agent_bytes: size - 1, ..limits };
    let err = registry.put_http("t", "c", long(6), None, &tight, true).await.unwrap_err();
    assert!(matches!(err, AgentError::StoredQuota { setting: "max_agent_bytes", .. }), "{err:?}");
    assert_eq!(registry.agent("t", "c").await.unwrap(), None);
    // Another tenant's bytes are its own.
    registry.put_http("u", "a", long(7), None, &limits, true).await.expect("a tenant of its own");
}

#[tokio::test]
async fn long_urls_and_secrets_are_refused_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path());
    let limits = AgentLimits { max_worker_url_bytes: 64, max_worker_secret_bytes: 8, ..AgentLimits::default() };
    let long = format!("http://127.0.0.1:1/{}", "x".repeat(64));
    let err = registry.put_http("t", "a", long, None, &limits, true).await.unwrap_err();
    assert!(matches!(err, AgentError::Invalid { field: "url", .. }), "{err:?}");
    assert!(err.to_string().contains("max_worker_url_bytes"), "{err}");
    let err = registry.put_http("t", "a", url(1), Some("s".repeat(9)), &limits, true).await.unwrap_err();
    assert!(matches!(err, AgentError::Invalid { field: "secret", .. }), "{err:?}");
    assert!(err.to_string().contains("max_worker_secret_bytes"), "{err}");
    assert_eq!(registry.agent("t", "a").await.unwrap(), None, "nothing stored");
    registry.put_http("t", "a", url(1), Some("s".repeat(8)), &limits, true).await.expect("at the bounds");
}

#[tokio::test]
async fn one_tenant_holding_its_lock_does_not_hold_up_another() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path());
    let limits = AgentLimits::default();
    let held = registry.tenants.lock("slow").await;
    tokio::time::timeout(Duration::from_secs(5), registry.put_http("quick", "a", url(1), None, &limits, true))
        .await
        .expect("another tenant is not held up")
        .unwrap();
    let same =
        tokio::time::timeout(Duration::from_millis(200), registry.put_http("slow", "a", url(1), None, &limits, true));
    assert!(same.await.is_err(), "the tenant's own changes wait for its lock");
    drop(held);
    registry.put_http("slow", "a", url(1), None, &limits, true).await.unwrap();
    assert!(registry.tenants.map().is_empty(), "locks nobody holds are forgotten");
}

fn hex(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn component(n: u8, created_ms: u64) -> AgentVersion {
    AgentVersion {
        digest: format!("sha256:{}", hex(n)),
        worker: AgentWorker::Component { bytes: 4 },
        created_ms,
        activated_ms: None,
        oci: None,
    }
}

async fn store_record(registry: &AgentRegistry, tenant: &str, agent: &str, current: u8, history: &[u8]) {
    let record = AgentRecord {
        tenant: tenant.to_owned(),
        agent_id: agent.to_owned(),
        current: component(current, 10),
        history: history.iter().map(|&n| component(n, u64::from(n))).collect(),
        created_ms: 1,
    };
    registry.engine.store().commit(Batch::of([Op::PutAgent(record)])).await.unwrap();
}

/// Writes the files a component `n` leaves: its bytes and its compiled
/// code.
fn write_files(dir: &Path, n: u8) {
    std::fs::create_dir_all(dir.join("components")).unwrap();
    std::fs::create_dir_all(dir.join("compiled")).unwrap();
    std::fs::write(dir.join("components").join(format!("{}.wasm", hex(n))), b"wasm").unwrap();
    std::fs::write(dir.join("compiled").join(format!("{}-0123456789abcdef.cwasm", hex(n))), b"code").unwrap();
}

fn has_files(dir: &Path, n: u8) -> (bool, bool) {
    (
        dir.join("components").join(format!("{}.wasm", hex(n))).exists(),
        dir.join("compiled").join(format!("{}-0123456789abcdef.cwasm", hex(n))).exists(),
    )
}

#[tokio::test]
async fn deleting_reclaims_the_files_no_other_agent_has() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path());
    // a/x has 1 (current), 2 and 3; b/y (another tenant) has 2 as well.
    store_record(&registry, "a", "x", 1, &[2, 3]).await;
    store_record(&registry, "b", "y", 2, &[]).await;
    for n in 1..=4 {
        write_files(dir.path(), n);
    }
    // What is not a component's file stays whatever happens.
    std::fs::write(dir.path().join("components").join("README"), b"mine").unwrap();
    std::fs::create_dir_all(dir.path().join("compiled").join("functions")).unwrap();
    std::fs::write(dir.path().join("compiled").join("functions").join(hex(9)), b"shared").unwrap();
    let partial = dir.path().join("compiled").join(format!("{}-0123456789abcdef.partial-1-2", hex(5)));
    std::fs::write(&partial, b"torn").unwrap();

    let record = registry.delete_version("a", "x", &component(3, 0).digest).await.unwrap().unwrap();
    assert_eq!(record.history.len(), 1);
    assert_eq!(has_files(dir.path(), 3), (false, false), "the deleted version's files");
    assert_eq!(has_files(dir.path(), 4), (false, false), "files nobody had");
    assert!(!partial.exists(), "a partly written file nobody has");

    let err = registry.delete_version("a", "x", &component(1, 0).digest).await.unwrap_err();
    assert!(matches!(err, AgentError::CurrentVersion { .. }), "{err:?}");
    let err = registry.delete_version("a", "x", &component(3, 0).digest).await.unwrap_err();
    assert!(matches!(err, AgentError::UnknownVersion { .. }), "{err:?}");
    assert!(registry.delete_version("a", "nobody", "sha256:00").await.unwrap().is_none());

    assert!(registry.delete("a", "x").await.unwrap());
    assert_eq!(has_files(dir.path(), 1), (false, false), "the deleted agent's");
    assert_eq!(has_files(dir.path(), 2), (true, true), "another tenant's agent has it");
    assert!(dir.path().join("components").join("README").exists());
    assert!(dir.path().join("compiled").join("functions").join(hex(9)).exists());

    assert!(registry.delete("b", "y").await.unwrap());
    assert_eq!(has_files(dir.path(), 2), (false, false), "nobody has it now");
}

#[tokio::test]
async fn a_collection_leaves_a_digest_being_uploaded_and_a_start_sweeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry(dir.path());
    store_record(&registry, "a", "x", 1, &[]).await;
    for n in 1..=3 {
        write_files(dir.path(), n);
    }
    // An upload of 2 holds its digest until its record is stored.
    let uploading = registry.files.lock(&component(2, 0).digest).await;
    registry.collect().await;
    assert_eq!(has_files(dir.path(), 2), (true, true), "being uploaded");
    assert_eq!(has_files(dir.path(), 3), (false, false));
    drop(uploading);
    // What a crash left (a record deleted, its files not yet) goes at start.
    let failed = registry.load_all().await.unwrap();
    assert_eq!(failed.len(), 1, "the fake component does not load: {failed:?}");
    assert_eq!(has_files(dir.path(), 2), (false, false));
    assert_eq!(has_files(dir.path(), 1), (true, true), "an agent has it");
}

#[test]
fn component_files_are_told_by_their_names() {
    let digest = format!("sha256:{}", hex(0xab));
    assert_eq!(file_digest(&format!("{}.wasm", hex(0xab))), Some(digest.clone()));
    assert_eq!(file_digest(&format!("{}-00ff.cwasm", hex(0xab))), Some(digest.clone()));
    assert_eq!(file_digest(&format!("{}.partial-12-3", hex(0xab))), Some(digest));
    assert_eq!(file_digest(&hex(0xab)), None, "no separator");
    assert_eq!(file_digest(&format!("{}.wasm", hex(0xab).to_uppercase())), None, "not the registry's");
    assert_eq!(file_digest("README"), None);
    assert_eq!(file_digest("functions"), None);
    assert_eq!(file_digest("é".repeat(40).as_str()), None, "a character across the 64th byte");
}
