//! `subs new`: a project from a template, that passes its own tests and
//! builds into an agent `subs run` runs; never over an existing directory.

use std::path::Path;
use std::process::{Command, Stdio};

/// `subs new args…` run in `dir`.
fn new_in(dir: &Path, args: &[&str]) -> crate::Output {
    let child = crate::subs()
        .arg("new")
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("subs starts");
    let mut process = crate::Process::new(child);
    let code = process.wait(crate::PATIENCE);
    crate::Output { code, stdout: process.stdout_text(), stderr: process.stderr_text() }
}

#[test]
fn an_existing_directory_or_a_bad_name_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("taken")).unwrap();
    std::fs::write(dir.path().join("taken/keep.txt"), "mine").unwrap();
    for language in ["rust", "python", "ts"] {
        let out = new_in(dir.path(), &[language, "taken"]);
        assert_eq!(out.code, Some(2), "{language}: {}", out.stdout);
        assert_eq!(
            out.stderr, "error: taken exists: subs new writes a new directory, and leaves existing ones alone\n",
            "{language}"
        );
        let left: Vec<_> =
            std::fs::read_dir(dir.path().join("taken")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["keep.txt"], "{language}: nothing written");
        assert_eq!(std::fs::read_to_string(dir.path().join("taken/keep.txt")).unwrap(), "mine", "{language}");
    }

    let out = new_in(dir.path(), &["rust", "Bad/Name"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("`Bad/Name` is not a project name"), "{}", out.stderr);
    let out = new_in(dir.path(), &["rust", "fine", "--sdk", "/nowhere"]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("is not a subs source tree with its guest-sdk/"), "{}", out.stderr);
    assert!(!dir.path().join("fine").exists());
}

/// The Rust project passes its own tests, builds with the one command its
/// README gives, and the agent it builds runs: a lookup, and refunds
/// approved and denied, through `--resume` and at a terminal, the denied
/// one never run.
#[test]
fn a_rust_project_tests_builds_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = new_in(dir.path(), &["rust", "my-agent"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("cargo build --target wasm32-wasip2 --release"), "{}", out.stdout);
    let project = dir.path().join("my-agent");
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(readme.contains("target/wasm32-wasip2/release/my_agent.wasm"), "{readme}");

    // The workspace's lock: the same versions as the tree's own builds,
    // from the local registry cache, and the compiled ones shared.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock")).unwrap();
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("templates");
    let cargo = |args: &[&str]| {
        let status = Command::new(env!("CARGO"))
            .args(args)
            .arg("--offline")
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cargo {args:?}");
    };
    cargo(&["test", "--quiet"]);
    cargo(&["build", "--target", "wasm32-wasip2", "--release", "--quiet"]);

    let wasm = target.join("wasm32-wasip2/release/my_agent.wasm");
    let wasm = wasm.to_str().unwrap();
    let lookup = crate::output(&["run", wasm, r#"use tool lookup_order with {"order_id": "A1"}"#]);
    assert_eq!(lookup.code, Some(0), "{}", lookup.stderr);
    assert!(lookup.stdout.contains(r#"← lookup_order: {"order_id":"A1","status":"shipped"}"#), "{}", lookup.stdout);

    refunds_are_asked_for(wasm, RUST_OR_PYTHON_REFUND);
}

/// The Python project passes its own tests, builds with its `./build.sh`,
/// and the agent it builds runs: a lookup, and refunds approved and
/// denied, through `--resume` and at a terminal, the denied one never run.
#[test]
fn a_python_project_tests_builds_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = new_in(dir.path(), &["python", "my-agent"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stdout.contains("./build.sh"), "{}", out.stdout);
    let project = dir.path().join("my-agent");
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(readme.contains("subs run my-agent.wasm"), "{readme}");

    let status = Command::new("python3")
        .args(["-m", "unittest", "--quiet"])
        .current_dir(&project)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .status()
        .expect("python3 runs");
    assert!(status.success(), "python3 -m unittest in the project");

    // The componentize-py the tree's own Python builds installed, when
    // there is one; else the script installs the pinned one.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let installed = root.join("target/guests/py/tree/examples/tools-py/.venv/bin/componentize-py");
    let mut build = Command::new(project.join("build.sh"));
    build.current_dir(&project);
    if installed.is_file() {
        build.env("COMPONENTIZE_PY", &installed);
    }
    assert!(build.status().expect("build.sh runs").success(), "./build.sh");

    let wasm = project.join("my-agent.wasm");
    let wasm = wasm.to_str().unwrap();
    // CPython inside: the first run takes tens of seconds on a busy machine.
    a_lookup_runs_first(wasm);
    refunds_are_asked_for(wasm, RUST_OR_PYTHON_REFUND);
}

/// The TypeScript project installs its pinned toolchain and builds with
/// the one command its README gives, passes its own tests (`npm test`:
/// `tsc --strict`, then `node --test`), and the agent it builds runs: a
/// lookup, and refunds approved and denied, through `--resume` and at a
/// terminal, the denied one never run.
#[test]
fn a_ts_project_tests_builds_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let out = new_in(dir.path(), &["ts", "my-agent"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let build = "npm install && npm run build";
    assert!(out.stdout.contains(build), "{}", out.stdout);
    let project = dir.path().join("my-agent");
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(readme.contains(build) && readme.contains("subs run my-agent.wasm"), "{readme}");

    // The README's command, verbatim; packages the local npm cache holds
    // (the tree's own JavaScript builds put the same pins there) are taken
    // from it.
    let status = Command::new("sh")
        .args(["-c", build])
        .current_dir(&project)
        .env("npm_config_prefer_offline", "true")
        .env("npm_config_audit", "false")
        .env("npm_config_fund", "false")
        .status()
        .expect("sh runs");
    assert!(status.success(), "{build} in the project");
    let status = Command::new("npm").arg("test").current_dir(&project).status().expect("npm runs");
    assert!(status.success(), "npm test in the project");

    let wasm = project.join("my-agent.wasm");
    let wasm = wasm.to_str().unwrap();
    a_lookup_runs_first(wasm);
    // JavaScript writes the amount 5 as an integer.
    refunds_are_asked_for(wasm, r#"← refund: {"refunded":5,"order_id":"A1"}"#);
}

/// What the Rust and Python templates' `refund` returns for 5 on `A1`.
const RUST_OR_PYTHON_REFUND: &str = r#"← refund: {"refunded":5.0,"order_id":"A1"}"#;

/// The first `subs run` of `wasm`, a lookup: it compiles the component
/// into the cache the later runs read, which may take a while for an
/// interpreter's component on a busy machine.
fn a_lookup_runs_first(wasm: &str) {
    let child = crate::subs()
        .args(["run", wasm, r#"use tool lookup_order with {"order_id": "A1"}"#])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("subs starts");
    let mut first = crate::Process::new(child);
    let code = first.wait(std::time::Duration::from_secs(300));
    let lookup = crate::Output { code, stdout: first.stdout_text(), stderr: first.stderr_text() };
    assert_eq!(lookup.code, Some(0), "{}", lookup.stderr);
    assert!(lookup.stdout.contains(r#"← lookup_order: {"order_id":"A1","status":"shipped"}"#), "{}", lookup.stdout);
}

/// The template's gated `refund` through `subs run` of `wasm`: approved and
/// denied with `--resume`, then asked at a terminal, granted once and
/// denied once; a denied refund never runs. `refunded` is the line of an
/// approved one.
fn refunds_are_asked_for(wasm: &str, refunded: &str) {
    let refund = r#"use tool refund with {"order_id": "A1", "amount": 5}"#;
    let approved = crate::output(&["run", wasm, refund, "--resume", r#"{"approved": true}"#]);
    assert_eq!(approved.code, Some(0), "{}", approved.stderr);
    assert!(approved.stdout.contains(refunded), "{}", approved.stdout);
    let denied = crate::output(&["run", wasm, refund, "--resume", r#"{"approved": false, "reason": "no"}"#]);
    assert_eq!(denied.code, Some(0), "{}", denied.stderr);
    assert!(denied.stdout.contains("← refund: denied by the approver: no"), "{}", denied.stdout);
    assert!(!denied.stdout.contains("refunded"), "{}", denied.stdout);

    // At a terminal: the approval asked, granted once and denied once.
    let mut t = crate::run::Terminal::spawn(&["run", wasm]);
    for (answer, result) in [("y", refunded), ("n", "← refund: denied by the approver")] {
        t.expect(">>> ");
        t.type_in(&format!("{refund}\n"));
        t.expect(r#"approve refund {"order_id":"A1","amount":5}? [y/N] "#);
        t.type_in(&format!("{answer}\n"));
        t.expect(result);
    }
    t.expect(">>> ");
    t.type_in("/exit\n");
    assert_eq!(t.wait(), Some(0), "{}", t.text());
}
