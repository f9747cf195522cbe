//! `subs serve` on PostgreSQL (`--store`, `SUBS_STORE`, `[store] url`):
//! a turn whose session is kept in the database and read back by the next
//! server, and the ways a store setting can be wrong. The tests that need
//! a server start a throwaway cluster, or are skipped, saying so, where
//! PostgreSQL is not installed.

use subs_store_postgres::testing::TestCluster;

use crate::{ADD, PATIENCE, Server, TOOLS, output, stream_turn, subs};

#[tokio::test(flavor = "multi_thread")]
async fn serve_keeps_sessions_in_postgres_for_the_next_server() {
    let Some(cluster) = TestCluster::shared() else { return };
    let database = cluster.fresh_database();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let args = ["--data", data, "--store", database.as_str()];
    let mut server = Server::start_with(&args, "127.0.0.1:0");
    let put = output(&["agents", "put", "tools", TOOLS, "--server", &server.url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let events = stream_turn(&server.url, "demo", "tools", ADD).await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"), "{events:?}");
    server.process.terminate();
    assert_eq!(server.process.wait(PATIENCE), Some(0), "{}", server.process.stderr_text());
    let said = server.process.stderr_text();
    assert!(said.contains(&format!("sessions are kept in PostgreSQL at {database}")), "{said}");
    assert!(!dir.path().join("subs.redb").exists(), "nothing was kept in redb");

    // The next server on the same database has the session and the agent.
    let server = Server::start_with(&args, "127.0.0.1:0");
    let show = output(&["sessions", "show", "demo", "--server", &server.url]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(show.stdout.lines().any(|l| l == "add returned {\"sum\":3}."), "{}", show.stdout);
    let events = stream_turn(&server.url, "demo", "tools", "thanks").await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"), "{events:?}");
}

#[test]
fn an_unreachable_database_fails_serve_before_it_listens_naming_it_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let out = output(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data",
        data,
        "--store",
        "postgres://subs:hunter2@127.0.0.1:1/subs",
    ]);
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert!(out.stderr.contains("postgres://subs:***@127.0.0.1:1/subs"), "{}", out.stderr);
    assert!(!out.stderr.contains("hunter2") && !out.stdout.contains("listening"), "{}{}", out.stdout, out.stderr);

    let out = output(&["serve", "--listen", "127.0.0.1:0", "--data", data, "--store", "mysql://u:hunter2@db/subs"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("is not a PostgreSQL URL") && !out.stderr.contains("hunter2"), "{}", out.stderr);
}

/// The flag wins over `SUBS_STORE`, which wins over the config file: each
/// time, the store named in the error is the one that counted.
#[test]
fn the_store_comes_from_the_flag_then_the_environment_then_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, "[store]\nurl = \"postgres://file@127.0.0.1:1/subs\"\nlease_secs = 6\nrenew_secs = 2\n")
        .unwrap();
    let serve = |flag: Option<&str>, env: Option<&str>| {
        let mut command = subs();
        command.args(["serve", "--listen", "127.0.0.1:0", "--data", dir.path().to_str().unwrap()]);
        command.args(["--config", config.to_str().unwrap()]);
        if let Some(flag) = flag {
            command.args(["--store", flag]);
        }
        if let Some(env) = env {
            command.env("SUBS_STORE", env);
        }
        let out = command.output().expect("subs runs");
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = serve(Some("postgres://flag@127.0.0.1:1/subs"), Some("postgres://env@127.0.0.1:1/subs"));
    assert!(said.contains("postgres://flag@"), "{said}");
    let said = serve(None, Some("postgres://env@127.0.0.1:1/subs"));
    assert!(said.contains("postgres://env@"), "{said}");
    let said = serve(None, None);
    assert!(said.contains("postgres://file@"), "{said}");

    // Keys are not made offline in a store the file keeps elsewhere.
    let keys = output(&["keys", "create", "--tenant", "acme", "--config", config.to_str().unwrap()]);
    assert_eq!(keys.code, Some(2), "{}", keys.stderr);
    assert!(keys.stderr.contains("admin API"), "{}", keys.stderr);

    // Lease settings the file cannot have.
    std::fs::write(&config, "[store]\nurl = \"postgres://file@127.0.0.1:1/subs\"\nlease_secs = 3\nrenew_secs = 2\n")
        .unwrap();
    let out = output(&["serve", "--listen", "127.0.0.1:0", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("renew_secs") && out.stderr.contains("half"), "{}", out.stderr);
}
