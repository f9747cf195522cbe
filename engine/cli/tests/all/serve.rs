//! `subs serve` and the commands that talk to it: the whole story on a
//! real server on `127.0.0.1:0`, then each way starting can fail.

use serde_json::{Value, json};

use crate::{ADD, PATIENCE, Server, TOOLS, http, output, stream_turn};

#[tokio::test(flavor = "multi_thread")]
async fn serve_runs_agents_and_refuses_what_it_cannot_do() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let mut server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();

    let health = http().get(format!("{url}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.json_text().await, json!({"status": "ok"}));

    // Upload the example component with the CLI.
    let put = output(&["agents", "put", "tools", TOOLS, "--server", &url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    assert!(put.stdout.starts_with("agent tools: sha256:"), "{}", put.stdout);
    assert!(put.stdout.contains("component,") && put.stdout.contains("a new version"), "{}", put.stdout);
    let again = output(&["agents", "put", "tools", TOOLS, "--server", &url]);
    assert!(again.stdout.contains("unchanged"), "{}", again.stdout);
    let list = output(&["agents", "list", "--server", &url, "--json"]);
    let agents: Value = serde_json::from_str(&list.stdout).unwrap();
    assert_eq!(agents[0]["agent_id"], "tools");
    assert_eq!(agents[0]["kind"], "component");
    let table = output(&["agents", "list", "--server", &url]);
    assert!(table.stdout.starts_with("AGENT ") && table.stdout.contains("\ntools "), "{}", table.stdout);

    // A turn through the API.
    let input = json!({
        "type": "client.message",
        "agent_id": "tools",
        "message": {"role": "user", "content": ADD},
    });
    let accepted = http()
        .post(format!("{url}/v1/sessions/demo/input"))
        .header("content-type", "application/json")
        .body(input.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let accepted = accepted.json_text().await;
    assert_eq!(accepted["session_id"], "demo");
    // The next turn queues behind the first and streams; when it ends,
    // both have.
    let events = stream_turn(&url, "demo", "tools", "thanks").await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"));

    let show = output(&["sessions", "show", "demo", "--server", &url]);
    assert_eq!(show.code, Some(0), "{}", show.stderr);
    assert!(show.stdout.starts_with("session demo · agent tools · idle"), "{}", show.stdout);
    for line in ["→ add {\"a\":1,\"b\":2}", "← add: {\"sum\":3}", "add returned {\"sum\":3}.", "You said: thanks"] {
        assert!(show.stdout.lines().any(|l| l == line), "{line} in {}", show.stdout);
    }
    let sessions = output(&["sessions", "list", "--server", &url, "--json"]);
    let sessions: Value = serde_json::from_str(&sessions.stdout).unwrap();
    assert_eq!(sessions[0]["session_id"], "demo");
    let missing = output(&["sessions", "show", "nope", "--server", &url]);
    assert_eq!(missing.code, Some(1));
    assert!(missing.stderr.contains("404"), "{}", missing.stderr);

    // A second server on the same data directory: the store is taken.
    let other = tempfile::tempdir().unwrap();
    let locked = output(&["serve", "--listen", "127.0.0.1:0", "--data", data]);
    assert_eq!(locked.code, Some(3), "{}", locked.stderr);
    assert!(locked.stderr.contains("is locked by another process"), "{}", locked.stderr);
    assert_eq!(locked.stderr.lines().count(), 1, "{}", locked.stderr);
    // So are its keys.
    let keys = output(&["keys", "create", "--tenant", "acme", "--data", data]);
    assert_eq!(keys.code, Some(3));
    assert!(keys.stderr.contains("a running `subs serve` holds it"), "{}", keys.stderr);

    // Anywhere but loopback, keys are required.
    let open = output(&["serve", "--listen", "0.0.0.0:0", "--data", other.path().to_str().unwrap()]);
    assert_eq!(open.code, Some(2), "{}", open.stderr);
    assert!(open.stderr.contains("refusing to listen on 0.0.0.0:0 without API keys"), "{}", open.stderr);
    assert!(open.stderr.contains("loopback"), "{}", open.stderr);

    // The port is taken.
    let taken = output(&["serve", "--listen", &server.addr, "--data", other.path().to_str().unwrap()]);
    assert_eq!(taken.code, Some(3), "{}", taken.stderr);
    assert!(taken.stderr.contains(&format!("cannot listen on {}", server.addr)), "{}", taken.stderr);
    assert!(taken.stderr.contains("already in use"), "{}", taken.stderr);

    // SIGTERM stops the server cleanly and lets go of the store.
    server.process.terminate();
    assert_eq!(server.process.wait(PATIENCE), Some(0), "{}", server.process.stderr_text());

    // With the server stopped, keys can be managed; then it needs one.
    let created = output(&["keys", "create", "--tenant", "acme", "--name", "ci", "--data", data]);
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    let key = created.stdout.trim().to_owned();
    assert!(key.starts_with("subs_") && key.len() == 37, "{key}");
    let listed = output(&["keys", "list", "--data", data, "--json"]);
    let listed: Value = serde_json::from_str(&listed.stdout).unwrap();
    assert_eq!(listed[0]["tenant"], "acme");
    assert_eq!(listed[0]["name"], "ci");
    assert_eq!(listed[0]["hash"], subs_server::auth::hash_key(&key));

    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    let anonymous = output(&["agents", "list", "--server", &url]);
    assert_eq!(anonymous.code, Some(1));
    assert!(anonymous.stderr.contains("401") && anonymous.stderr.contains("--key"), "{}", anonymous.stderr);
    // acme is not the local tenant: it sees none of its agents.
    let acme = output(&["agents", "list", "--server", &url, "--key", &key, "--json"]);
    assert_eq!((acme.code, acme.stdout.trim()), (Some(0), "[]"), "{}", acme.stderr);
    drop(server);

    let revoked = output(&["keys", "revoke", &key[..12], "--data", data]);
    assert_eq!(revoked.code, Some(0), "{}", revoked.stderr);
    let listed = output(&["keys", "list", "--data", data, "--json"]);
    assert_eq!(listed.stdout.trim(), "[]");
}

#[test]
fn the_config_file_sets_what_flags_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(
        &config,
        "listen = \"0.0.0.0:1\"\ndata = \"state\"\n\n[[keys]]\ntenant = \"acme\"\nkey = \"subs_from_the_file\"\n",
    )
    .unwrap();
    // The flag wins over the file's listen; the file's data dir (relative
    // to the file) and keys are used.
    let mut server = Server::start_with(&["--config", config.to_str().unwrap()], "127.0.0.1:0");
    assert!(dir.path().join("state").join("subs.redb").exists());
    let listed = output(&["agents", "list", "--server", &server.url, "--key", "subs_from_the_file"]);
    assert_eq!((listed.code, listed.stdout.as_str()), (Some(0), "no agents\n"), "{}", listed.stderr);
    server.process.terminate();
    assert_eq!(server.process.wait(PATIENCE), Some(0));

    std::fs::write(&config, "listen = \"127.0.0.1:0\"\nlisten_port = 3\n").unwrap();
    let bad = output(&["serve", "--config", config.to_str().unwrap()]);
    assert_eq!(bad.code, Some(2));
    assert!(bad.stderr.contains("listen_port"), "{}", bad.stderr);
}

/// Reads a response's JSON body.
trait JsonText {
    async fn json_text(self) -> Value;
}

impl JsonText for reqwest::Response {
    async fn json_text(self) -> Value {
        serde_json::from_slice(&self.bytes().await.unwrap()).unwrap()
    }
}
