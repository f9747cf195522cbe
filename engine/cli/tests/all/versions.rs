//! `subs agents put --inactive`, `subs agents get` and `subs agents
//! activate` against a real `subs serve`: a version stored without being
//! served, listed with its decision count, activated and rolled back.

use serde_json::Value;

use crate::{Server, TOOLS, output};

#[tokio::test(flavor = "multi_thread")]
async fn agents_versions_are_stored_listed_activated_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    let passthrough = subs_tests::guests::PASSTHROUGH;

    // The first version of an agent must be activated.
    let refused = output(&["agents", "put", "v", passthrough, "--inactive", "--server", &url]);
    assert_eq!(refused.code, Some(1), "{}", refused.stdout);
    assert!(refused.stderr.contains("409") && refused.stderr.contains("must be activated"), "{}", refused.stderr);

    assert_eq!(output(&["agents", "put", "v", TOOLS, "--server", &url]).code, Some(0));
    let stored = output(&["agents", "put", "v", passthrough, "--inactive", "--server", &url]);
    assert_eq!(stored.code, Some(0), "{}", stored.stderr);
    assert!(stored.stdout.contains("stored, not active"), "{}", stored.stdout);
    // The line names the stored version, to activate it by.
    let version = stored.stdout.split_whitespace().find(|w| w.starts_with("sha256:")).unwrap().to_owned();
    let again = output(&["agents", "put", "v", passthrough, "--inactive", "--server", &url]);
    assert!(again.stdout.contains("already stored"), "{}", again.stdout);

    let get = output(&["agents", "get", "v", "--server", &url]);
    assert_eq!(get.code, Some(0), "{}", get.stderr);
    let lines: Vec<&str> = get.stdout.lines().collect();
    assert!(lines[0].starts_with("agent v · sha256:"), "{}", get.stdout);
    assert!(lines[1].starts_with("ACTIVE") && lines[1].ends_with("DECISIONS"), "{}", get.stdout);
    assert!(
        lines[2].starts_with('*') && lines[2].ends_with(" 0"),
        "the active version, no decisions yet: {}",
        get.stdout
    );
    assert!(lines[3].contains(&version) && !lines[3].starts_with('*'), "{}", get.stdout);

    let activated = output(&["agents", "activate", "v", &version, "--server", &url]);
    assert_eq!(activated.code, Some(0), "{}", activated.stderr);
    assert!(activated.stdout.contains(&format!("{version} is active")), "{}", activated.stdout);
    let json = output(&["agents", "get", "v", "--server", &url, "--json"]);
    let agent: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(agent["version"], version.as_str());
    assert_eq!(agent["versions"][1]["active"], true, "{agent}");
    assert_eq!(agent["versions"][1]["decisions"], 0, "{agent}");

    // Rolled back to the first version.
    let first = agent["versions"][0]["version"].as_str().unwrap();
    assert_eq!(output(&["agents", "activate", "v", first, "--server", &url]).code, Some(0));
    let unknown = output(&["agents", "activate", "v", "sha256:00", "--server", &url]);
    assert_eq!(unknown.code, Some(1));
    assert!(unknown.stderr.contains("404") && unknown.stderr.contains("sha256:00"), "{}", unknown.stderr);
}

/// Two servers on one PostgreSQL database, each with its own data
/// directory: a version stored inactive and activated on one is served by
/// the other once it hears of the change, its bytes fetched from the
/// database.
#[tokio::test(flavor = "multi_thread")]
async fn a_version_activated_on_one_node_is_served_by_the_other() {
    let Some(cluster) = subs_store_postgres::testing::TestCluster::shared() else { return };
    let database = cluster.fresh_database();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start_with(&["--data", dir_a.path().to_str().unwrap(), "--store", &database], "127.0.0.1:0");
    let b = Server::start_with(&["--data", dir_b.path().to_str().unwrap(), "--store", &database], "127.0.0.1:0");
    assert_eq!(output(&["agents", "put", "v", TOOLS, "--server", &a.url]).code, Some(0));
    let stored = output(&["agents", "put", "v", subs_tests::guests::PASSTHROUGH, "--inactive", "--server", &a.url]);
    assert_eq!(stored.code, Some(0), "{}", stored.stderr);
    let version = stored.stdout.split_whitespace().find(|w| w.starts_with("sha256:")).unwrap().to_owned();
    assert_eq!(output(&["agents", "activate", "v", &version, "--server", &a.url]).code, Some(0));

    // Each turn on `b` is a new session; its latest decision names the
    // version `b` ran.
    let n = std::sync::atomic::AtomicUsize::new(0);
    subs_tests::wait::eventually(crate::PATIENCE, "b runs the new version", || async {
        let session = format!("on-b-{}", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let events = crate::stream_turn(&b.url, &session, "v", "hello").await;
        assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"), "{events:?}");
        let snapshot = crate::http().get(format!("{}/v1/sessions/{session}", b.url)).send().await.unwrap();
        let snapshot: Value = serde_json::from_str(&snapshot.text().await.unwrap()).unwrap();
        if snapshot["agent_version"] == version.as_str() { Ok(()) } else { Err(snapshot) }
    })
    .await;
}
