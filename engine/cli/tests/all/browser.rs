//! Headless Chromium under a chromedriver of its own, for the tests that
//! check a page in a real browser (`clients`, `inspector`).
//!
//! `SUBS_CHROMIUM` and `SUBS_CHROMEDRIVER` name other binaries than those
//! on `PATH`; `SUBS_REQUIRE_BROWSER=1` (CI sets it) makes a missing one a
//! failure instead of a skip.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use fantoccini::{Client, ClientBuilder};
use serde_json::{Value, json};

use crate::{PATIENCE, http};

/// What every test's Chromium runs with, so that it starts the same on a
/// desktop, a CI runner and in a container (no display, GPU or large
/// `/dev/shm` there, maybe root), with no first-run screen over the page.
const ARGS: [&str; 5] =
    ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run"];

/// A headless Chromium under a chromedriver of its own; killed, with its
/// process group, when dropped.
pub struct Chromium {
    /// The WebDriver session.
    pub client: Client,
    /// The chromedriver (Chromium and its helpers are in its process
    /// group). Declared before `_tmp`, so it is killed before the
    /// directory goes.
    _driver: Group,
    /// Chromium's `TMPDIR`: chromedriver makes the browser's profile
    /// there, and a killed browser removes nothing; dropped after the kill.
    _tmp: tempfile::TempDir,
}

/// A child that leads its own process group; the whole group is killed
/// when this is dropped, also when a start fails halfway and unwinds.
struct Group(Child);

impl Drop for Group {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let group = format!("-{}", self.0.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
            let _ = self.0.wait();
        }
    }
}

impl Chromium {
    /// The browser for `test`, started with `args` besides [`ARGS`], or
    /// `None` (said on stderr) when it is not installed and not required.
    ///
    /// The one way the tests start a browser, so that each gets what lets
    /// them run side by side and leave nothing behind: a chromedriver on a
    /// free port, a `TMPDIR` of its own (Chromium's profile would
    /// otherwise pile up in `/tmp`), and a process group to kill.
    pub async fn start(test: &str, args: &[&str]) -> Option<Self> {
        let (chromium, driver) = binaries(test)?;
        Some(Self::start_with(&chromium, &driver, args).await)
    }

    /// The browser `chromium` under the chromedriver `driver`.
    async fn start_with(chromium: &Path, driver: &Path, args: &[&str]) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tmp = tempfile::tempdir().expect("a directory for Chromium's temporary files");
        let child = Group(
            Command::new(driver)
                .env("TMPDIR", tmp.path())
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("starting {}: {e}", driver.display())),
        );
        let url = format!("http://127.0.0.1:{port}");
        subs_tests::wait::eventually(PATIENCE, format!("chromedriver answers on {url}"), || async {
            http().get(format!("{url}/status")).send().await.is_ok_and(|r| r.status().is_success())
        })
        .await;
        let args: Vec<&str> = ARGS.iter().chain(args).copied().collect();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        });
        let Value::Object(capabilities) = capabilities else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&url)
            .await
            .unwrap_or_else(|e| panic!("a Chromium session through {}: {e}", driver.display()));
        Self { client, _driver: child, _tmp: tmp }
    }

    /// Ends the WebDriver session (Chromium quits) and the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

/// The first of `names` found on `PATH`.
fn find(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    names.iter().find_map(|name| std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file()))
}

/// Chromium and chromedriver, or `None` (and a line on stderr) when they
/// are not installed and the browser is not required.
fn binaries(test: &str) -> Option<(PathBuf, PathBuf)> {
    let chosen = |var: &str| std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_file());
    let chromium =
        chosen("SUBS_CHROMIUM").or_else(|| find(&["chromium", "chromium-browser", "google-chrome", "chrome"]));
    let driver = chosen("SUBS_CHROMEDRIVER").or_else(|| find(&["chromedriver"]));
    match (chromium, driver) {
        (Some(chromium), Some(driver)) => Some((chromium, driver)),
        _ if std::env::var("SUBS_REQUIRE_BROWSER").as_deref() == Ok("1") => {
            panic!("{test}: SUBS_REQUIRE_BROWSER=1 but chromium and chromedriver are not both installed")
        }
        _ => {
            eprintln!(
                "skipped {test}: chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
            );
            None
        }
    }
}

/// A start that fails once chromedriver runs (here: it answers its status
/// and refuses the session) kills the driver as it unwinds, rather than
/// leaving it running after the test.
#[tokio::test]
async fn a_start_failing_halfway_leaves_no_driver_running() {
    let dir = tempfile::tempdir().unwrap();
    let driver = dir.path().join("chromedriver");
    let pid_file = dir.path().join("pid");
    let script = format!(
        r#"#!/usr/bin/env python3
import http.server, os, sys
open({pid:?}, "w").write(str(os.getpid()))
port = int(next(a for a in sys.argv if a.startswith("--port=")).split("=")[1])
class Driver(http.server.BaseHTTPRequestHandler):
    def answer(self, status):
        body = b'{{"value": {{"ready": true, "message": "fake"}}}}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        self.answer(200)
    def do_POST(self):
        self.answer(500)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Driver).serve_forever()
"#,
        pid = pid_file.display().to_string()
    );
    std::fs::write(&driver, script).unwrap();
    std::fs::set_permissions(&driver, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let start = tokio::spawn(async move { Chromium::start_with(Path::new("/bin/true"), &driver, &[]).await });
    let Err(failed) = start.await else { panic!("a session the driver refuses fails the start") };
    assert!(failed.is_panic(), "{failed}");
    let pid = std::fs::read_to_string(&pid_file).expect("the driver ran and wrote its pid");
    // Reaped by the kill's `wait`: no process has the pid any more (or, if
    // the system reused it already, not this driver's script).
    let cmdline = std::fs::read_to_string(format!("/proc/{}/cmdline", pid.trim())).unwrap_or_default();
    assert!(!cmdline.contains("chromedriver"), "the driver {pid} still runs: {cmdline:?}");
}
