//! Builds every guest component the tests run, once, and tells the tests
//! where they are.
//!
//! Guests are the example agents under `examples/` and the test components
//! under `tests/components/` (each a workspace member whose package name is
//! `test-<dir>`). They are compiled for `wasm32-wasip2` by a nested cargo
//! into their own target directory, so the nested build neither waits for
//! nor invalidates the outer one. A few are also built for
//! `wasm32-unknown-unknown` (`LEAN`): core modules without WASI, which the
//! engine makes components at load. The paths end up as constants in
//! `guests.rs` (see `lib.rs`), so no test builds anything by hand: a
//! package's component as its upper-case name, its core module with
//! `_LEAN` appended.
//!
//! The Python and JavaScript examples (`FOREIGN`) are built by their own
//! `build.sh`, which installs the toolchain it pins (componentize-py from
//! PyPI into a venv, componentize-js and esbuild from npm) the first time
//! and whenever a pin changes; the Python test agents of `tests/python`
//! with the same componentize-py. So that neither the toolchains nor what
//! the builds write (`__pycache__`, bundles) land in the source tree,
//! where they would make this script run again, each language builds from
//! a copy of the files it reads under `target/guests/<py|js>/tree/`, which
//! keeps its toolchain between builds. Python and JavaScript build while
//! cargo builds the Rust guests.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The example agents, by package name.
const EXAMPLES: &[&str] = &["approver-rs", "passthrough", "tools"];

/// Examples also built with a feature, as other versions of the same
/// agent (the replay tests upgrade to them) or the same agent against
/// `subs:agent@0.1.0`: the constant naming the component, the package,
/// the feature.
const VARIANTS: &[(&str, &str, &str)] = &[
    ("TOOLS_TOTAL", "tools", "total"),
    ("TOOLS_TRAP_ON_MESSAGES", "tools", "trap-on-messages"),
    ("TOOLS_WIT_0_1_0", "tools", "wit-0-1-0"),
];

/// The packages also built as core modules for `wasm32-unknown-unknown`.
const LEAN: &[&str] = &["passthrough", "test-garbage", "test-floor"];

/// Agents in another language, built by scripts that install their
/// toolchain: what they read, and what they build.
struct Foreign {
    /// Its directory under `target/guests`: the copy of what it reads goes
    /// to `tree/`, the components beside it.
    dir: &'static str,
    /// What the builds read, from the repository's root: the agents'
    /// sources, their SDK's, the world, the scripts. Copied, and watched.
    reads: &'static [&'static str],
    /// Its components, built in this order.
    builds: &'static [Build],
}

/// One component of a [`Foreign`] language.
struct Build {
    /// The constant naming it.
    name: &'static str,
    /// What it is, for the constant's doc comment.
    what: &'static str,
    /// The script that builds it, from the repository's root.
    script: &'static str,
    /// The script's arguments before the output path.
    args: &'static [&'static str],
    /// The component's file name.
    out: &'static str,
}

/// The Python and JavaScript examples, and the Python test agents (built
/// with the examples' componentize-py).
const FOREIGN: &[Foreign] = &[
    Foreign {
        dir: "py",
        reads: &[
            "wit",
            "guest-sdk/python/src",
            "examples/tools-py/build.sh",
            "examples/tools-py/requirements.txt",
            "examples/tools-py/tools_agent.py",
            "tests/python",
            "guest-sdk/python/requirements-build.txt",
            "examples/approver-py/build.sh",
            "examples/approver-py/agent.py",
        ],
        builds: &[
            Build {
                name: "TOOLS_PY",
                what: "The `examples/tools-py` agent",
                script: "examples/tools-py/build.sh",
                args: &[],
                out: "tools_py.wasm",
            },
            Build {
                name: "TEST_PY_FAULTY",
                what: "The `tests/python/faulty_agent.py` test agent",
                script: "tests/python/build.sh",
                args: &["faulty_agent"],
                out: "faulty_py.wasm",
            },
            Build {
                name: "TEST_PY_APPROVER",
                what: "The `tests/python/approver_agent.py` approver agent",
                script: "tests/python/build.sh",
                args: &["approver_agent"],
                out: "approver_py.wasm",
            },
            Build {
                name: "APPROVER_PY",
                what: "The `examples/approver-py` agent",
                script: "examples/approver-py/build.sh",
                args: &[],
                out: "examples_approver_py.wasm",
            },
            Build {
                name: "TEST_PY_BRANCH",
                what: "The `tests/python/branch_agent.py` agent, which reads its branch on demand",
                script: "tests/python/build.sh",
                args: &["branch_agent"],
                out: "branch_py.wasm",
            },
            Build {
                name: "TOOLS_PY_WIT_0_1_0",
                what: "The `examples/tools-py` agent built against `subs:agent@0.1.0`",
                script: "examples/tools-py/build.sh",
                args: &["--wit-version", "0.1.0"],
                out: "tools_py_wit_0_1_0.wasm",
            },
        ],
    },
    Foreign {
        dir: "js",
        reads: &[
            "wit",
            "guest-sdk/js/package.json",
            "guest-sdk/js/src",
            "examples/tools-js/build.sh",
            "examples/tools-js/package.json",
            "examples/tools-js/package-lock.json",
            "examples/tools-js/agent.js",
            "tests/js",
            "guest-sdk/js/types",
            "examples/approver-ts/build.sh",
            "examples/approver-ts/package.json",
            "examples/approver-ts/package-lock.json",
            "examples/approver-ts/tsconfig.json",
            "examples/approver-ts/src",
            "examples/approver-ts/test",
            "tests/mcp/agent-ts/build.sh",
            "tests/mcp/agent-ts/tsconfig.json",
            "tests/mcp/agent-ts/src",
        ],
        builds: &[
            Build {
                name: "TOOLS_JS",
                what: "The `examples/tools-js` agent (world `agent-json`)",
                script: "examples/tools-js/build.sh",
                args: &[],
                out: "tools_js.wasm",
            },
            Build {
                name: "TOOLS_JS_TYPED",
                what: "The `examples/tools-js` agent built against the typed world `agent`",
                script: "examples/tools-js/build.sh",
                args: &["--world", "agent"],
                out: "tools_js_typed.wasm",
            },
            Build {
                name: "TEST_JS_APPROVER",
                what: "The `tests/js/approver_agent.js` approver agent",
                script: "tests/js/build.sh",
                args: &["approver_agent"],
                out: "approver_js.wasm",
            },
            Build {
                name: "TEST_JS_BRANCH",
                what: "The `tests/js/branch_agent.js` agent (world `agent-json`), which reads its branch on demand",
                script: "tests/js/build.sh",
                args: &["branch_agent"],
                out: "branch_js.wasm",
            },
            Build {
                name: "TEST_JS_BRANCH_TYPED",
                what: "The `tests/js/branch_agent.js` agent built against the typed world `agent`",
                script: "tests/js/build.sh",
                args: &["--world", "agent", "branch_agent"],
                out: "branch_js_typed.wasm",
            },
            Build {
                name: "TOOLS_JS_WIT_0_1_0",
                what: "The `examples/tools-js` agent built against `subs:agent@0.1.0`'s `agent-json`",
                script: "examples/tools-js/build.sh",
                args: &["--wit-version", "0.1.0"],
                out: "tools_js_wit_0_1_0.wasm",
            },
            Build {
                name: "APPROVER_TS",
                what: "The `examples/approver-ts` agent (world `agent-json`)",
                script: "examples/approver-ts/build.sh",
                args: &[],
                out: "examples_approver_ts.wasm",
            },
            Build {
                name: "TEST_TS_MCP",
                what: "The `tests/mcp/agent-ts` TypeScript agent (world `agent-json`), which uses the MCP server `demo`",
                script: "tests/mcp/agent-ts/build.sh",
                args: &[],
                out: "mcp_ts.wasm",
            },
        ],
    },
];

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("tests/ sits in the workspace root").to_path_buf();
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    let mut packages: Vec<String> = EXAMPLES.iter().map(|s| (*s).to_owned()).collect();
    let mut components: Vec<String> = fs::read_dir(root.join("tests/components"))
        .expect("tests/components exists")
        .filter_map(Result::ok)
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    components.sort();
    packages.extend(components.iter().map(|c| format!("test-{c}")));

    // The Python and JS directories are watched file by file: toolchains
    // and build outputs may sit beside their sources (a build by hand).
    let foreign_dirs = [
        "guest-sdk/python",
        "guest-sdk/js",
        "examples/tools-py",
        "examples/tools-js",
        "examples/approver-py",
        "examples/approver-ts",
    ];
    let mut watched: Vec<PathBuf> = ["engine/protocol", "wit", "tests/components", "Cargo.toml", "Cargo.lock"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    for dir in ["guest-sdk", "examples"] {
        for entry in fs::read_dir(root.join(dir)).expect("the directory exists").filter_map(Result::ok) {
            if !foreign_dirs.iter().any(|f| root.join(f) == entry.path()) {
                watched.push(entry.path());
            }
        }
    }
    watched.extend(FOREIGN.iter().flat_map(|f| f.reads).map(|p| root.join(p)));
    for path in watched {
        println!("cargo:rerun-if-changed={}", path.display());
    }

    let target_dir = root.join("target").join("guests");
    let lean: Vec<String> = LEAN.iter().map(|s| (*s).to_owned()).collect();
    let foreign = std::thread::scope(|scope| {
        let builds: Vec<_> = FOREIGN.iter().map(|f| scope.spawn(|| build_foreign(&root, &target_dir, f))).collect();
        // Before the plain build, which then puts the plain examples back
        // where the variants were built.
        let variants = build_variants(&root, &target_dir);
        build(&root, &target_dir, "wasm32-wasip2", &packages);
        build(&root, &target_dir, "wasm32-unknown-unknown", &lean);
        let foreign = builds.into_iter().map(|b| b.join().expect("a foreign build does not panic")).collect::<Vec<_>>();
        (foreign, variants)
    });
    let (foreign, variants) = foreign;

    let mut consts = String::new();
    for (target, packages, suffix, what) in [
        ("wasm32-wasip2", &packages, "", "component"),
        ("wasm32-unknown-unknown", &lean, "_LEAN", "core module (built without WASI)"),
    ] {
        let wasm_dir = target_dir.join(target).join("release");
        for package in packages {
            let file = wasm_dir.join(format!("{}.wasm", package.replace('-', "_")));
            assert!(file.exists(), "guest `{package}` built, but {} is missing", file.display());
            let name = package.to_uppercase().replace('-', "_");
            writeln!(consts, "/// The `{package}` {what}.").unwrap();
            writeln!(consts, "pub const {name}{suffix}: &str = {:?};", file.display().to_string()).unwrap();
        }
    }
    for (f, result) in FOREIGN.iter().zip(foreign) {
        let files = result.unwrap_or_else(|e| panic!("{e}"));
        for (b, file) in f.builds.iter().zip(files) {
            writeln!(consts, "/// {}, built by `{}`.", b.what, b.script).unwrap();
            writeln!(consts, "pub const {}: &str = {:?};", b.name, file.display().to_string()).unwrap();
        }
    }
    for ((name, package, feature), file) in VARIANTS.iter().zip(variants) {
        writeln!(consts, "/// The `{package}` component built with the feature `{feature}`.").unwrap();
        writeln!(consts, "pub const {name}: &str = {:?};", file.display().to_string()).unwrap();
    }
    writeln!(consts, "/// Every guest component, by package name.").unwrap();
    writeln!(consts, "pub const ALL: &[(&str, &str)] = &[").unwrap();
    for package in &packages {
        writeln!(consts, "    ({package:?}, {}),", package.to_uppercase().replace('-', "_")).unwrap();
    }
    writeln!(consts, "];").unwrap();
    fs::write(out_dir.join("guests.rs"), consts).expect("OUT_DIR is writable");
}

/// Builds each of [`VARIANTS`] for `wasm32-wasip2` and copies it out of
/// the way of the plain build, under `variants/`; their paths.
fn build_variants(root: &Path, target_dir: &Path) -> Vec<PathBuf> {
    let dir = target_dir.join("variants");
    fs::create_dir_all(&dir).expect("target/guests is writable");
    VARIANTS
        .iter()
        .map(|(_, package, feature)| {
            let mut cmd = cargo_build(root, target_dir, "wasm32-wasip2", &[(*package).to_owned()]);
            cmd.args(["--features", feature]);
            run(cmd, "wasm32-wasip2");
            let built = target_dir.join("wasm32-wasip2/release").join(format!("{}.wasm", package.replace('-', "_")));
            let file = dir.join(format!("{}_{}.wasm", package.replace('-', "_"), feature.replace('-', "_")));
            fs::copy(&built, &file)
                .unwrap_or_else(|e| panic!("copying {} to {}: {e}", built.display(), file.display()));
            file
        })
        .collect()
}

fn build(root: &Path, target_dir: &Path, target: &str, packages: &[String]) {
    run(cargo_build(root, target_dir, target, packages), target);
}

/// The nested cargo building `packages` for `target`.
fn cargo_build(root: &Path, target_dir: &Path, target: &str, packages: &[String]) -> Command {
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).args(["build", "--release", "--target", target, "--target-dir"]).arg(target_dir);
    for package in packages {
        cmd.args(["-p", package]);
    }
    // The outer build's settings are for the host target; the guests get
    // their own. The jobserver (CARGO_MAKEFLAGS) is kept so both builds
    // share the machine's cores instead of oversubscribing them.
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        cmd.env_remove(var);
    }
    cmd
}

fn run(mut cmd: Command, target: &str) {
    let status = cmd.status().expect("cargo can be run from a build script");
    assert!(
        status.success(),
        "building the guest components for {target} failed (is the target installed? `rustup target add {target}`)"
    );
}

/// Builds `f`'s components from a fresh copy of what they read under
/// `target/guests/<dir>/tree/`, with the toolchains their scripts keep
/// there; their paths, or why a build failed.
fn build_foreign(root: &Path, target_dir: &Path, f: &Foreign) -> Result<Vec<PathBuf>, String> {
    let dir = target_dir.join(f.dir);
    let tree = dir.join("tree");
    for path in f.reads {
        let (from, to) = (root.join(path), tree.join(path));
        if to.is_dir() {
            fs::remove_dir_all(&to).map_err(|e| format!("clearing {}: {e}", to.display()))?;
        }
        copy(&from, &to).map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
    }
    let mut files = Vec::new();
    for b in f.builds {
        let (script, out) = (tree.join(b.script), dir.join(b.out));
        let output = Command::new("bash")
            .arg(&script)
            .args(b.args)
            .arg(&out)
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "`{}` failed ({}); it needs python3 with venv and pip, or node with npm, and the \
                 package registries the first time\n--- stdout\n{}\n--- stderr\n{}",
                b.script,
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        if !out.exists() {
            return Err(format!("`{}` ran, but {} is missing", b.script, out.display()));
        }
        files.push(out);
    }
    Ok(files)
}

/// Copies the file or directory `from` to `to`, creating parents.
fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
    if from.is_dir() {
        fs::create_dir_all(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            copy(&entry.path(), &to.join(entry.file_name()))?;
        }
        return Ok(());
    }
    fs::create_dir_all(to.parent().expect("a file has a directory"))?;
    fs::copy(from, to).map(drop)
}
