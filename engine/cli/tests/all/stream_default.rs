//! `stream_by_default`: `subs serve` streams an agent's tokens when its
//! config does not say, unless the server's `[limits]` or the tenant's
//! table turns it off.

use crate::{ADD, Server, TOOLS, output, stream_turn};

/// Runs the `tools` agent's turn on a `subs serve` with `config` and
/// answers the text its token deltas carried.
async fn streamed_text(config: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("subs.toml");
    std::fs::write(&file, config).unwrap();
    let data = dir.path().join("data");
    let server =
        Server::start_with(&["--config", file.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0");
    let put = output(&["agents", "put", "tools", TOOLS, "--server", &server.url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let events = stream_turn(&server.url, "s", "tools", ADD).await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"), "{events:?}");
    events.iter().filter(|e| e.1 == "llm.token.delta").filter_map(|e| e.2["text"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_streams_tokens_unless_the_server_or_the_tenant_says_not() {
    let answer = "add returned {\"sum\":3}.";
    assert_eq!(streamed_text("").await, answer, "on in the default config");
    assert_eq!(streamed_text("[limits]\nstream_by_default = false\n").await, "", "off for every tenant");
    let tenant_on = "[limits]\nstream_by_default = false\n\n[tenants.local]\nstream_by_default = true\n";
    assert_eq!(streamed_text(tenant_on).await, answer, "the tenant's own table wins over [limits]");
}
