//! Client libraries from npm, run by `node`, for the tests that check a
//! wire format those libraries read (AG-UI, the AI SDK's stream).
//!
//! Each client lives in `tests/clients/<name>/`: a `package.json` pinning
//! exact versions, its `package-lock.json`, and the scripts the tests run.
//! [`client`] copies the directory to `target/clients/<name>/` and runs
//! `npm ci` there the first time (and whenever the lock file changes), so
//! nothing is installed into the source tree and a fresh clone needs only
//! node and npm. Tests run a script with [`run`], which gives it a server's
//! address and reads what it prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

/// Installs are serialized: two tests of one client must not run `npm ci`
/// into the same directory at once.
static INSTALLING: Mutex<()> = Mutex::new(());

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The directory of the npm client `name` with its packages installed,
/// ready for [`run`]. Panics, naming what to install, when node or npm is
/// missing or the install fails.
pub fn client(name: &str) -> PathBuf {
    let source = repo_root().join("tests/clients").join(name);
    let dir = repo_root().join("target/clients").join(name);
    let _guard = INSTALLING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    std::fs::create_dir_all(&dir).expect("target/clients can be created");
    // The scripts are copied every time (they are small and may change);
    // the packages are reinstalled only when the lock file changes.
    let mut lock = Vec::new();
    for entry in std::fs::read_dir(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display())) {
        let entry = entry.expect("a readable directory entry");
        let name = entry.file_name();
        if name == "node_modules" || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let bytes = std::fs::read(entry.path()).expect("a readable client file");
        if name == "package-lock.json" {
            lock.clone_from(&bytes);
        }
        std::fs::write(dir.join(&name), bytes).expect("the client file can be copied");
    }
    assert!(!lock.is_empty(), "{} has no package-lock.json", source.display());
    let stamp = dir.join("node_modules/.installed-lock.json");
    if std::fs::read(&stamp).ok().as_ref() != Some(&lock) {
        let status = Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(&dir)
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run npm ({e}): the client tests need Node 20 or later with npm on the PATH")
            });
        assert!(status.success(), "`npm ci` in {} failed ({status})", dir.display());
        std::fs::write(&stamp, &lock).expect("the install stamp can be written");
    }
    dir
}

/// Runs `node <script> <args…>` in the client directory `dir` (from
/// [`client`]) and returns its output; panics with its stderr when it
/// fails.
pub async fn run(dir: &Path, script: &str, args: &[&str]) -> Output {
    let output = tokio::process::Command::new("node")
        .arg(script)
        .args(args)
        .current_dir(dir)
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("cannot run node ({e}): the client tests need Node 20 or later on the PATH"));
    assert!(
        output.status.success(),
        "node {script} failed ({}):\n{}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}
