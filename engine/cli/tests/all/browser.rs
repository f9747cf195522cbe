//! Headless Chromium under a chromedriver of its own, for the tests that
//! check a page in a real browser (`clients`, `inspector`).
//!
//! `SUBS_CHROMIUM` and `SUBS_CHROMEDRIVER` name other binaries than those
//! on `PATH`; `SUBS_REQUIRE_BROWSER=1` (CI sets it) makes a missing one a
//! failure instead of a skip.

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
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
    /// The chromedriver, leader of its own process group (Chromium and
    /// its helpers are in it too), so one kill ends them all.
    driver: Child,
    /// Chromium's `TMPDIR`: chromedriver makes the browser's profile
    /// there, and a killed browser removes nothing; dropped after the kill.
    _tmp: tempfile::TempDir,
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
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tmp = tempfile::tempdir().expect("a directory for Chromium's temporary files");
        let child = Command::new(&driver)
            .env("TMPDIR", tmp.path())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", driver.display()));
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
        Some(Self { client, driver: child, _tmp: tmp })
    }

    /// Ends the WebDriver session (Chromium quits) and the driver.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}

impl Drop for Chromium {
    fn drop(&mut self) {
        if self.driver.try_wait().ok().flatten().is_none() {
            let group = format!("-{}", self.driver.id());
            let _ = Command::new("kill").args(["-KILL", "--", &group]).stderr(Stdio::null()).status();
            let _ = self.driver.wait();
        }
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
