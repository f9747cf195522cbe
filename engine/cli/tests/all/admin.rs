//! `subs admin-key`, `subs tenants` and `subs keys` against a running
//! server's admin API: tenants and keys change while it runs.

use serde_json::{Value, json};
use subs_server::auth::hash_key;

use crate::{PATIENCE, Server, http, output};

#[tokio::test(flavor = "multi_thread")]
async fn tenants_and_keys_are_managed_while_the_server_runs() {
    let dir = tempfile::tempdir().unwrap();
    let made = output(&["admin-key", "--json"]);
    assert_eq!(made.code, Some(0), "{}", made.stderr);
    let made: Value = serde_json::from_str(&made.stdout).unwrap();
    let operator = made["key"].as_str().unwrap().to_owned();
    assert!(operator.starts_with("subs_admin_"), "{operator}");
    assert_eq!(made["hash"], hash_key(&operator));
    let text = output(&["admin-key"]);
    assert!(text.stderr.contains(&format!("key_sha256 = \"{}\"", hash_key(text.stdout.trim()))), "{}", text.stderr);

    let config = dir.path().join("subs.toml");
    std::fs::write(&config, format!("[admin]\nkey_sha256 = \"{}\"\n", hash_key(&operator))).unwrap();
    let data = dir.path().join("data");
    let mut server =
        Server::start_with(&["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0");
    let url = server.url.clone();
    let admin = |args: &[&str]| output(&[args, &["--server", &url, "--admin-key", &operator]].concat());

    // The operator key is needed, and no other key will do.
    let missing = output(&["tenants", "list", "--server", &url]);
    assert_eq!(missing.code, Some(2), "{}", missing.stderr);
    assert!(missing.stderr.contains("--admin-key"), "{}", missing.stderr);
    let wrong = output(&["tenants", "list", "--server", &url, "--admin-key", "subs_admin_not_the_key"]);
    assert_eq!(wrong.code, Some(1));
    assert!(wrong.stderr.contains("401") && wrong.stderr.contains("SUBS_ADMIN_KEY"), "{}", wrong.stderr);

    let created = admin(&["tenants", "create", "acme"]);
    assert_eq!(created.code, Some(0), "{}", created.stderr);
    assert!(created.stdout.starts_with("created tenant acme"), "{}", created.stdout);
    let again = admin(&["tenants", "create", "acme"]);
    assert!(again.stdout.starts_with("tenant acme exists"), "{}", again.stdout);

    // A key made now works now.
    let key = admin(&["keys", "create", "--tenant", "acme", "--name", "ci"]);
    assert_eq!(key.code, Some(0), "{}", key.stderr);
    let key = key.stdout.trim().to_owned();
    assert!(key.starts_with("subs_") && key.len() == 37, "{key}");
    let agents = output(&["agents", "list", "--server", &url, "--key", &key]);
    assert_eq!((agents.code, agents.stdout.as_str()), (Some(0), "no agents\n"), "{}", agents.stderr);
    let listed: Value = serde_json::from_str(&admin(&["keys", "list", "--json"]).stdout).unwrap();
    assert_eq!(
        (&listed[0]["tenant"], &listed[0]["name"], &listed[0]["source"]),
        (&json!("acme"), &json!("ci"), &json!("store"))
    );
    assert_eq!(listed[0]["hash"], hash_key(&key));
    let table = admin(&["keys", "list"]).stdout;
    assert!(table.starts_with("TENANT ") && table.contains("\nacme "), "{table}");
    // A tenant's key is no operator key.
    let tenant_as_operator = output(&["tenants", "list", "--server", &url, "--admin-key", &key]);
    assert_eq!(tenant_as_operator.code, Some(1));
    assert!(tenant_as_operator.stderr.contains("403"), "{}", tenant_as_operator.stderr);

    // Limits change at once; set-limits keeps what it does not name.
    let set = admin(&["tenants", "set-limits", "acme", "--set", "max_sessions=3", "--set", "budget=2.5"]);
    assert_eq!(set.code, Some(0), "{}", set.stderr);
    assert!(
        set.stdout.lines().any(|l| l.starts_with("max_sessions") && l.contains(" 3 ") && l.ends_with("set here")),
        "{}",
        set.stdout
    );
    let usage = http().get(format!("{url}/v1/usage")).bearer_auth(&key).send().await.unwrap();
    let usage: Value = serde_json::from_slice(&usage.bytes().await.unwrap()).unwrap();
    assert_eq!(usage["budget"], "2.5", "the engine has it");
    let unset = admin(&["tenants", "set-limits", "acme", "--unset", "budget", "--json"]);
    let unset: Value = serde_json::from_str(&unset.stdout).unwrap();
    assert_eq!(unset["overrides"], json!({"max_sessions": 3}));
    let nothing = admin(&["tenants", "set-limits", "acme"]);
    assert_eq!(nothing.code, Some(2));
    let bad = admin(&["tenants", "set-limits", "acme", "--set", "max_sessions=lots"]);
    assert_eq!(bad.code, Some(1));
    assert!(bad.stderr.contains("400"), "{}", bad.stderr);
    let show = admin(&["tenants", "show", "acme"]);
    assert!(show.stdout.starts_with("tenant acme · stored · 1 key\n"), "{}", show.stdout);
    assert!(show.stdout.contains("spent $0"), "{}", show.stdout);
    let list = admin(&["tenants", "list"]).stdout;
    assert!(list.starts_with("TENANT ") && list.contains("\nacme "), "{list}");

    // Revoked (the whole key is sent as its hash): refused at once.
    let revoked = admin(&["keys", "revoke", &key]);
    assert_eq!(revoked.code, Some(0), "{}", revoked.stderr);
    assert!(revoked.stdout.starts_with("revoked the key of tenant `acme`"), "{}", revoked.stdout);
    let refused = output(&["agents", "list", "--server", &url, "--key", &key]);
    assert_eq!(refused.code, Some(1));
    assert!(refused.stderr.contains("401"), "{}", refused.stderr);

    // Deleted: gone, and a key for it cannot be made.
    let second = admin(&["keys", "create", "--tenant", "acme"]).stdout.trim().to_owned();
    let deleted = admin(&["tenants", "delete", "acme"]);
    assert_eq!(deleted.code, Some(0), "{}", deleted.stderr);
    assert!(deleted.stdout.starts_with("deleted tenant acme: revoked 1 key(s)"), "{}", deleted.stdout);
    assert_eq!(output(&["agents", "list", "--server", &url, "--key", &second]).code, Some(1));
    let shown = admin(&["tenants", "show", "acme"]);
    assert_eq!(shown.code, Some(1));
    assert!(shown.stderr.contains("404"), "{}", shown.stderr);
    let orphan = admin(&["keys", "create", "--tenant", "nobody"]);
    assert_eq!(orphan.code, Some(1));
    assert!(orphan.stderr.contains("subs tenants create nobody"), "{}", orphan.stderr);

    server.process.terminate();
    assert_eq!(server.process.wait(PATIENCE), Some(0), "{}", server.process.stderr_text());
}

#[test]
fn an_operator_key_is_checked_and_counts_as_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let short = output(&["serve", "--listen", "127.0.0.1:0", "--data", data, "--admin-key", "short"]);
    assert_eq!(short.code, Some(2), "{}", short.stderr);
    assert!(short.stderr.contains("at least 16"), "{}", short.stderr);
    // With an operator key and no tenant key, the server may listen
    // beyond loopback: nothing is served without a key.
    let mut server = Server::start(dir.path(), "0.0.0.0:0", &["--admin-key", "subs_admin_0123456789abcdef"]);
    let port = server.addr.rsplit(':').next().unwrap().to_owned();
    let anonymous = output(&["agents", "list", "--server", &format!("http://127.0.0.1:{port}")]);
    assert_eq!(anonymous.code, Some(1));
    assert!(anonymous.stderr.contains("401"), "{}", anonymous.stderr);
    server.process.terminate();
    assert_eq!(server.process.wait(PATIENCE), Some(0));
}
