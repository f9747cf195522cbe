//! `subs agents replay` against a real `subs serve` (the candidate
//! uploaded inactive and replayed there) and offline on the data
//! directory the server left.

use serde_json::Value;

use crate::{ADD, Server, TOOLS, output, stream_turn};

#[tokio::test(flavor = "multi_thread")]
async fn agents_replay_reports_differences_and_failures_online_and_offline() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let url = server.url.clone();
    let (total, trap) = (subs_tests::guests::TOOLS_TOTAL, subs_tests::guests::TOOLS_TRAP_ON_MESSAGES);
    assert_eq!(output(&["agents", "put", "calc", TOOLS, "--server", &url]).code, Some(0));
    for session in ["a", "b"] {
        let events = stream_turn(&url, session, "calc", ADD).await;
        assert_eq!(events.last().unwrap().1, "turn.done", "{events:?}");
    }

    let replayed = output(&["agents", "replay", "calc", total, "--server", &url]);
    assert_eq!(replayed.code, Some(0), "{}", replayed.stderr);
    let out = &replayed.stdout;
    assert!(out.starts_with("replayed ") && out.contains(" decisions of agent calc against sha256:"), "{out}");
    assert!(out.contains("  different      2\n"), "{out}");
    assert!(out.contains("  - /actions/0/result/sum: 3\n  + /actions/0/result/total: 3\n"), "{out}");
    assert!(!out.contains("\x1b["), "no colours into a pipe: {out}");
    // The candidate was stored, not activated.
    let agent: Value =
        serde_json::from_str(&output(&["agents", "get", "calc", "--server", &url, "--json"]).stdout).unwrap();
    assert_eq!(agent["versions"].as_array().unwrap().len(), 2, "{agent}");
    assert_eq!(agent["versions"][0]["active"], true, "{agent}");

    let checked = output(&["agents", "replay", "calc", total, "--server", &url, "--check"]);
    assert_eq!(checked.code, Some(1), "{}", checked.stderr);
    assert!(checked.stderr.contains("2 decisions differ and 0 failed"), "{}", checked.stderr);
    let json = output(&["agents", "replay", "calc", TOOLS, "--server", &url, "--json", "--check"]);
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let report: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(report["same"], report["decisions"], "{report}");
    assert_eq!(report["sessions"], 2, "{report}");

    // Offline needs the store the server holds.
    let locked = output(&["agents", "replay", "calc", TOOLS, "--data", data]);
    assert_eq!(locked.code, Some(3), "{}", locked.stderr);
    assert!(locked.stderr.contains("locked") && locked.stderr.contains("without --data"), "{}", locked.stderr);
    server.process.terminate();
    drop(server);

    let offline = output(&["agents", "replay", "calc", trap, "--data", data, "--sessions", "a"]);
    assert_eq!(offline.code, Some(0), "{}", offline.stderr);
    let out = &offline.stdout;
    assert!(out.contains("  failed         1\n"), "{out}");
    assert!(out.contains("failed: session a turn "), "{out}");
    assert!(out.contains("client.messages\n") && out.contains("this version cannot read client messages"), "{out}");
    let json = output(&["agents", "replay", "calc", total, "--data", data, "--json"]);
    let report: Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!((report["different"].as_u64(), report["sessions"].as_u64()), (Some(2), Some(2)), "{report}");
    let unknown = output(&["agents", "replay", "calc", total, "--data", data, "--sessions", "zzz"]);
    assert_eq!(unknown.code, Some(1));
    assert!(unknown.stderr.contains("no session `zzz` of agent `calc`"), "{}", unknown.stderr);
}
