//! The client libraries (`clients/python`, `clients/ts`) checked as their
//! users run them, against the `subs` this test binary is built with:
//!
//! - Python: the package installed with `pip` (from a copy of its sources,
//!   so the build writes nothing into the tree) into a venv under
//!   `target/clients/` with the pins of `requirements-test.txt`; its own
//!   `pytest` suite, which starts `subs serve` itself; `mypy --strict` over
//!   the package (it ships `py.typed`).
//! - TypeScript: its own `node --test` suite, likewise; `tsc` over its
//!   declarations and type-level tests, TypeScript from the package's
//!   lockfile (`npm ci` into `target/clients/ts/`).
//! - A browser: headless Chromium (through chromedriver) opens a page that
//!   imports the TypeScript client's files as ES modules, and streams a
//!   turn with an end-user token from another origin (the server's
//!   `cors_origins`). Without Chromium and chromedriver the test skips,
//!   saying so, unless `SUBS_REQUIRE_BROWSER=1` (CI sets it).
//!
//! The suites find the binary and the agents through `SUBS_BIN`,
//! `SUBS_TOOLS_WASM` and `SUBS_SCENARIO_WASM`; installs are redone only
//! when their pins change.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::browser::Chromium;
use crate::{ADD, PATIENCE, Server, TOOLS, http};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/clients/<name>`, made if missing.
fn work_dir(name: &str) -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target/tmp is in target").to_path_buf();
    let dir = target.join("clients").join(name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

/// Runs `command`, panicking with its output unless it succeeds.
fn run(mut command: Command, what: &str) -> Output {
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {what} ({e})"));
    assert!(
        output.status.success(),
        "{what} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// What a suite needs to start `subs serve` with the test agents.
fn suite_env(command: &mut Command) {
    command
        .env("SUBS_BIN", env!("CARGO_BIN_EXE_subs"))
        .env("SUBS_TOOLS_WASM", TOOLS)
        .env("SUBS_SCENARIO_WASM", subs_tests::guests::TEST_SCENARIO)
        .env("SUBS_CACHE", crate::cache_dir());
}

/// A venv with `requirements` installed, redone when the file changes (a
/// copy of it inside the venv marks what it was installed from).
fn python_venv(requirements: &Path) -> PathBuf {
    let venv = work_dir("py-venv");
    let pins = std::fs::read(requirements).expect("the requirements file is readable");
    let stamp = venv.join("installed-requirements.txt");
    if std::fs::read(&stamp).ok().as_ref() != Some(&pins) {
        std::fs::remove_dir_all(&venv).expect("the old venv can be removed");
        let mut create = Command::new("python3");
        create.arg("-m").arg("venv").arg(&venv);
        run(create, "python3 -m venv (the client's tests need Python 3.11 or later with venv)");
        let mut install = Command::new(venv.join("bin/pip"));
        install.args(["install", "--quiet", "--disable-pip-version-check", "-r"]).arg(requirements);
        run(install, "pip install -r clients/python/requirements-test.txt");
        std::fs::write(&stamp, &pins).expect("the install stamp can be written");
    }
    venv
}

/// Copies the directory `from` to `to` (made anew), without bytecode.
fn copy_tree(from: &Path, to: &Path) {
    if to.exists() {
        std::fs::remove_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    }
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
    for entry in std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display())) {
        let entry = entry.expect("a directory entry");
        let name = entry.file_name();
        if name == "__pycache__" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name));
        } else {
            std::fs::copy(&path, to.join(&name)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        }
    }
}

/// `pip install ./clients/python` works, the package's own tests pass
/// against a real `subs serve` (a tool turn streamed; a stream cut
/// mid-turn resumed with every event once; an interrupt resumed; a client
/// tool answered; an agent uploaded and activated; an end-user token's
/// limits; 4xx answers as typed errors with their field; the async client;
/// the admin API), and `mypy --strict` passes on it.
#[test]
fn the_python_client_installs_and_passes_its_tests_against_subs_serve() {
    let client = repo_root().join("clients/python");
    assert!(client.join("src/subs_client/py.typed").is_file(), "the package ships its types (PEP 561)");
    let venv = python_venv(&client.join("requirements-test.txt"));
    let copy = work_dir("py-src");
    for file in ["pyproject.toml", "README.md"] {
        std::fs::copy(client.join(file), copy.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    copy_tree(&client.join("src"), &copy.join("src"));
    let mut install = Command::new(venv.join("bin/pip"));
    install
        .args(["install", "--quiet", "--disable-pip-version-check", "--no-deps", "--no-build-isolation"])
        .arg("--force-reinstall")
        .arg(&copy);
    run(install, "pip install ./clients/python");

    let mut pytest = Command::new(venv.join("bin/python"));
    pytest
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&client)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    suite_env(&mut pytest);
    let output = run(pytest, "pytest in clients/python");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains(" passed") && !said.contains("skipped"), "{said}");

    let mut mypy = Command::new(venv.join("bin/mypy"));
    mypy.arg("--cache-dir").arg(work_dir("mypy-cache")).current_dir(&client);
    let output = run(mypy, "mypy --strict in clients/python");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("Success: no issues found in"), "{said}");
}

/// `node_modules` of a copy of the package at `package` (its
/// `package.json` and lockfile), installed by `npm ci` and redone when the
/// lockfile changes.
fn npm_install(package: &Path, name: &str) -> PathBuf {
    let dir = work_dir(name);
    let mut lock = Vec::new();
    for file in ["package.json", "package-lock.json"] {
        let bytes = std::fs::read(package.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        if file == "package-lock.json" {
            lock.clone_from(&bytes);
        }
        std::fs::write(dir.join(file), bytes).expect("the package file can be copied");
    }
    let stamp = dir.join("node_modules/.installed-lock.json");
    if std::fs::read(&stamp).ok().as_ref() != Some(&lock) {
        let mut install = Command::new("npm");
        install.args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(&dir);
        run(install, "npm ci (the client's tests need Node 20 or later with npm)");
        std::fs::write(&stamp, &lock).expect("the install stamp can be written");
    }
    dir.join("node_modules")
}

/// The TypeScript client's own tests pass against a real `subs serve`
/// (the same cases as the Python client's), and `tsc` passes on its
/// declarations and type-level tests.
#[test]
fn the_ts_client_passes_its_tests_against_subs_serve() {
    let client = repo_root().join("clients/ts");
    let mut test = Command::new("node");
    test.args(["--test", "test/client.test.js"]).current_dir(&client);
    suite_env(&mut test);
    let output = run(test, "node --test in clients/ts");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("# fail 0") && said.contains("# skipped 0"), "{said}");

    let modules = npm_install(&client, "ts");
    let mut tsc = Command::new("node");
    tsc.arg(modules.join("typescript/bin/tsc")).arg("-p").arg(client.join("tsconfig.json"));
    run(tsc, "tsc over clients/ts");
}

/// Serves the TypeScript client's sources and its browser test page as
/// plain files; answers the origin (`http://127.0.0.1:<port>`).
async fn serve_client_files() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a free port");
    let origin = format!("http://{}", listener.local_addr().expect("an address"));
    let root = repo_root().join("clients/ts");
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let root = root.clone();
        async move {
            let path = uri.path().trim_start_matches('/');
            let allowed = (path.starts_with("src/") || path.starts_with("test/browser/")) && !path.contains("..");
            let kind = match Path::new(path).extension().and_then(|e| e.to_str()) {
                Some("js") => "text/javascript",
                Some("html") => "text/html; charset=utf-8",
                _ => "",
            };
            match std::fs::read(root.join(path)) {
                Ok(bytes) if allowed && !kind.is_empty() => {
                    (axum::http::StatusCode::OK, [(axum::http::header::CONTENT_TYPE, kind)], bytes)
                }
                _ => {
                    (axum::http::StatusCode::NOT_FOUND, [(axum::http::header::CONTENT_TYPE, "text/plain")], Vec::new())
                }
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    origin
}

/// `text` with every byte but `A-Z a-z 0-9` percent-encoded.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// A page on another origin imports the client's ES modules and, with an
/// end-user token, streams a tool turn from `turn.started` to `turn.done`
/// in headless Chromium; the session it made is the token's identity's,
/// and a route the token may not use is the typed 403.
#[tokio::test(flavor = "multi_thread")]
async fn the_ts_client_streams_a_turn_in_a_browser_with_an_end_user_token() {
    let Some(browser) = Chromium::start("clients browser", &[]).await else { return };
    let origin = serve_client_files().await;
    let key = "subs_c11e47c11e47c11e47c11e47c11e47c1";
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("subs.toml");
    std::fs::write(&config, format!("cors_origins = [\"{origin}\"]\n\n[[keys]]\ntenant = \"acme\"\nkey = \"{key}\"\n"))
        .unwrap();
    let data = dir.path().join("data");
    let server =
        Server::start_with(&["--config", config.to_str().unwrap(), "--data", data.to_str().unwrap()], "127.0.0.1:0");
    let url = &server.url;
    let wasm = std::fs::read(TOOLS).expect("the tools agent");
    let put = http().put(format!("{url}/v1/agents/tools")).bearer_auth(key).header("content-type", "application/wasm");
    let response = put.body(wasm).send().await.expect("the server answers");
    assert!(response.status().is_success(), "{}", response.text().await.unwrap_or_default());
    let minted = http()
        .post(format!("{url}/v1/tokens"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(json!({"identity": {"id": "browser-user"}, "ttl_secs": 300}).to_string())
        .send()
        .await
        .expect("the server answers");
    let token: Value = serde_json::from_slice(&minted.bytes().await.expect("a body")).expect("a token");
    let token = token["token"].as_str().expect("a token").to_owned();

    let page = format!(
        "{origin}/test/browser/index.html#server={}&token={}&session=browser-chat&agent=tools&text={}",
        encode(url),
        encode(&token),
        encode(ADD)
    );
    browser.client.goto(&page).await.unwrap_or_else(|e| panic!("opening {page}: {e}"));
    let done = subs_tests::wait::until(PATIENCE, || async {
        let value = browser.client.execute("return document.body.dataset.result || ''", vec![]).await;
        match value.expect("the script runs") {
            Value::String(text) if !text.is_empty() => Some(text),
            _ => None,
        }
    })
    .await;
    let Ok(text) = done else {
        let shown = browser.client.execute("return document.body.innerText", vec![]).await.unwrap_or_default();
        panic!("the page did not finish its turn; it shows {shown}");
    };
    let result: Value = serde_json::from_str(&text).expect("the page's result is JSON");
    assert!(result.get("error").is_none(), "{result:#}");
    let events = result["events"].as_array().expect("events");
    let names: Vec<&str> = events.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names.first(), Some(&"turn.started"), "{names:?}");
    assert_eq!(names.last(), Some(&"turn.done"), "{names:?}");
    let tool = events
        .iter()
        .find(|e| e["event"] == "message" && e["data"]["message"]["role"] == "tool")
        .unwrap_or_else(|| panic!("a tool message: {names:?}"));
    assert_eq!(tool["data"]["message"]["content"], r#"{"sum":3}"#);
    let ids: Vec<u64> = events.iter().filter_map(|e| e["id"].as_u64()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "each stored event once, in order: {ids:?}");
    assert_eq!(result["session"]["identity"]["id"], "browser-user");
    assert_eq!(result["refused"], json!({"status": 403, "code": "forbidden"}));
}
