//! The Python and JavaScript SDKs checked as their users check them: each
//! SDK's own unit tests, and its types under the strict checker of its
//! language, with the versions the SDK pins.
//!
//! - Python (`guest-sdk/python`): `python3 -m unittest`, and `mypy --strict`
//!   over the SDK and an agent written against it (`tests/typed_agent.py`,
//!   configured in `pyproject.toml`), mypy installed from
//!   `requirements-typecheck.txt` into a venv under `target/sdk-types/`.
//! - JavaScript (`guest-sdk/js`): `node --test test/`, and `tsc` over the
//!   declarations and `test/types.ts` (type-level tests: inferred tool
//!   arguments, typed state, `@ts-expect-error` mistakes) with the plain
//!   `tsconfig.json`, TypeScript from the package's lockfile installed by
//!   `npm ci` into a copy under `target/sdk-types/js/`.
//!
//! The installs are redone only when their pins change. Nothing is written
//! into the source tree (no bytecode, no caches, no `node_modules`): the
//! guest build (`build.rs`) watches those directories.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Where the checkers are installed: `target/sdk-types/<name>`.
fn work_dir(name: &str) -> PathBuf {
    let dir = repo_root().join("target/sdk-types").join(name);
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
        run(create, "python3 -m venv (the SDK tests need Python 3.11 or later with venv)");
        let mut install = Command::new(venv.join("bin/pip"));
        install.args(["install", "--quiet", "--disable-pip-version-check", "-r"]).arg(requirements);
        run(install, "pip install -r requirements-typecheck.txt");
        std::fs::write(&stamp, &pins).expect("the install stamp can be written");
    }
    venv
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
        // Only the packages are needed (TypeScript), not their install
        // scripts.
        install.args(["ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"]).current_dir(&dir);
        run(install, "npm ci (the SDK tests need Node 20 or later with npm)");
        std::fs::write(&stamp, &lock).expect("the install stamp can be written");
    }
    dir.join("node_modules")
}

/// The Python SDK's unit tests pass (stdlib only).
#[test]
fn the_python_sdk_passes_its_unit_tests() {
    let mut unittest = Command::new("python3");
    unittest
        .args(["-m", "unittest", "--quiet"])
        .current_dir(repo_root().join("guest-sdk/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    run(unittest, "python3 -m unittest in guest-sdk/python");
}

/// `mypy --strict` passes on the Python SDK and on an agent using it, whose
/// deliberate mistakes (`# type: ignore[code]`, which strict mode reports
/// when nothing needs ignoring) it must find. The package ships
/// `py.typed`, so an agent's own mypy run sees the same types.
#[test]
fn the_python_sdk_passes_mypy_strict() {
    let sdk = repo_root().join("guest-sdk/python");
    assert!(sdk.join("src/subs_sdk/py.typed").is_file(), "the package ships its types (PEP 561)");
    let venv = python_venv(&sdk.join("requirements-typecheck.txt"));
    let mut mypy = Command::new(venv.join("bin/mypy"));
    mypy.arg("--strict").arg("--cache-dir").arg(work_dir("mypy-cache")).current_dir(&sdk);
    let output = run(mypy, "mypy --strict in guest-sdk/python");
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("Success: no issues found in"), "{said}");
    assert!(!said.contains("in 0 source files"), "mypy checked the SDK: {said}");
}

/// The JavaScript SDK's unit tests pass (plain node, no WebAssembly).
#[test]
fn the_js_sdk_passes_its_unit_tests() {
    let mut test = Command::new("node");
    test.args(["--test", "test/"]).current_dir(repo_root().join("guest-sdk/js"));
    run(test, "node --test test/ in guest-sdk/js");
}

/// `tsc` passes on the JavaScript SDK's declarations and its type-level
/// tests, under a plain strict config: target es2022, no extra `lib`.
#[test]
fn the_js_sdk_types_pass_tsc_strict_with_a_plain_config() {
    let sdk = repo_root().join("guest-sdk/js");
    let config: Value =
        serde_json::from_slice(&std::fs::read(sdk.join("tsconfig.json")).expect("tsconfig.json")).expect("JSON");
    let options = &config["compilerOptions"];
    assert_eq!(options["strict"], true, "{config}");
    assert_eq!(options["target"], "es2022", "{config}");
    for extra in ["lib", "types", "skipLibCheck"] {
        assert!(options.get(extra).is_none(), "the config is a plain one: no `{extra}` ({config})");
    }
    let package: Value =
        serde_json::from_slice(&std::fs::read(sdk.join("package.json")).expect("package.json")).expect("JSON");
    let pinned = package["devDependencies"]["typescript"].as_str().expect("typescript is a dev dependency");
    assert!(pinned.chars().all(|c| c.is_ascii_digit() || c == '.'), "typescript is pinned exactly: {pinned}");

    let modules = npm_install(&sdk, "js");
    let tsc = modules.join("typescript/bin/tsc");
    let mut version = Command::new("node");
    version.arg(&tsc).arg("--version");
    let said = run(version, "tsc --version");
    assert_eq!(String::from_utf8_lossy(&said.stdout).trim(), format!("Version {pinned}"));
    let mut check = Command::new("node");
    check.arg(&tsc).args(["-p", "tsconfig.json"]).current_dir(&sdk);
    run(check, "tsc -p tsconfig.json in guest-sdk/js");

    // The same agent in a project of its own, the SDK installed as a
    // package (a link, as a `file:` dependency makes it): the types are
    // found through the package's `exports`, and the config is exactly
    // the plain one, with nothing to include.
    let project = work_dir("js-project");
    let linked = project.join("node_modules/@subs/sdk");
    std::fs::create_dir_all(linked.parent().expect("a parent")).expect("node_modules can be created");
    // Made again each time: the checkout may have moved.
    let _ = std::fs::remove_file(&linked);
    std::os::unix::fs::symlink(&sdk, &linked).expect("the SDK can be linked");
    std::fs::write(project.join("package.json"), r#"{"private": true, "type": "module"}"#).expect("package.json");
    let plain = r#"{"compilerOptions": {"target": "es2022", "module": "nodenext", "moduleResolution": "nodenext", "strict": true, "noEmit": true}}"#;
    std::fs::write(project.join("tsconfig.json"), plain).expect("tsconfig.json");
    std::fs::copy(sdk.join("test/types.ts"), project.join("agent.ts")).expect("the agent can be copied");
    let mut check = Command::new("node");
    check.arg(&tsc).args(["-p", "tsconfig.json"]).current_dir(&project);
    run(check, "tsc -p tsconfig.json in a project using the SDK as a package");
}
