//! What `subs serve` tells operators, checked with the ecosystem's own
//! tools: a real scrape of `/metrics` passes `promtool check metrics`
//! (Debian's `prometheus` package) with every documented series, the
//! process's and the build's.

use std::io::Write as _;
use std::process::{Command, Stdio};

use crate::{ADD, Server, TOOLS, http, output, stream_turn};

/// `promtool`, or `None` when it is not installed and
/// `SUBS_REQUIRE_PROMTOOL` does not ask for it.
fn promtool() -> Option<Command> {
    let found = Command::new("promtool").arg("--version").output().is_ok_and(|o| o.status.success());
    if found {
        return Some(Command::new("promtool"));
    }
    assert!(
        std::env::var_os("SUBS_REQUIRE_PROMTOOL").is_none_or(|v| v != "1"),
        "promtool is not installed (Debian: apt-get install prometheus)"
    );
    eprintln!("skipped: promtool is not installed (set SUBS_REQUIRE_PROMTOOL=1 to fail instead)");
    None
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scrape_passes_promtool_with_every_documented_series() {
    let Some(mut promtool) = promtool() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), "127.0.0.1:0", &[]);
    let scrape = || async {
        let response = http().get(format!("{}/metrics", server.url)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    };
    // Before anything happened: the series are there, at zero.
    let fresh = scrape().await;
    for line in [
        "subs_deliveries_total{worker=\"component\",outcome=\"ok\"} 0",
        "subs_guest_traps_total{kind=\"trap\"} 0",
        "subs_llm_tokens_total{model=\"other\",kind=\"input\"} 0",
        "subs_llm_cost_dollars_total{model=\"other\"} 0.0",
        &format!("subs_build_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION")),
    ] {
        assert!(fresh.lines().any(|l| l == line), "`{line}` in\n{fresh}");
    }

    let put = output(&["agents", "put", "tools", TOOLS, "--server", &server.url]);
    assert_eq!(put.code, Some(0), "{}", put.stderr);
    let events = stream_turn(&server.url, "s", "tools", ADD).await;
    assert_eq!(events.last().map(|e| e.1.as_str()), Some("turn.done"));
    let text = scrape().await;
    for name in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_start_time_seconds",
        "process_open_fds",
        "process_max_fds",
        "subs_http_requests_total",
    ] {
        assert!(text.lines().any(|l| l.starts_with(name)), "`{name}` in\n{text}");
    }
    let delivered = "subs_deliveries_total{worker=\"component\",outcome=\"ok\"} ";
    let delivered: u64 = text.lines().find_map(|l| l.strip_prefix(delivered)?.parse().ok()).expect("deliveries");
    assert!(delivered > 0, "the turn's decisions were delivered");
    let resident: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.parse().ok())
        .expect("a resident size");
    assert!(resident > 1e6, "{resident} bytes resident");

    let mut check = promtool
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    check.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&checked.stdout), String::from_utf8_lossy(&checked.stderr));
    assert!(checked.status.success() && said.trim().is_empty(), "promtool check metrics: {said}\n{text}");
}
