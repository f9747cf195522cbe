//! A real MCP server for tests: `tests/mcp/server.py`, made with the
//! Python SDK (`mcp` from PyPI, pinned in `tests/mcp/requirements.txt`),
//! serving Streamable HTTP on 127.0.0.1 at a free port.
//!
//! The SDK is installed into `target/mcp-venv` the first time (and again
//! when the pin changes), never into the system's Python. Where it cannot
//! be installed (no network, no `venv`), [`FastMcp::start`] returns
//! `None` and the test says it skipped, unless `SUBS_REQUIRE_MCP=1` (CI
//! sets it), which makes it fail.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ is in the repository").to_path_buf()
}

/// One install at a time, across the tests of a binary.
static INSTALL: Mutex<()> = Mutex::new(());

/// The venv's Python, installing the pinned SDK first when it is missing
/// or its pin changed; `Err` says why it could not be.
pub fn python() -> Result<PathBuf, String> {
    let _one = INSTALL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let root = root();
    let requirements = root.join("tests/mcp/requirements.txt");
    let venv = root.join("target/mcp-venv");
    let marker = venv.join("requirements.txt");
    let python = venv.join("bin/python");
    let wanted = std::fs::read(&requirements).map_err(|e| format!("reading {}: {e}", requirements.display()))?;
    if std::fs::read(&marker).ok().as_deref() == Some(wanted.as_slice()) && python.exists() {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    let run = |command: &mut Command| -> Result<(), String> {
        let output = command.output().map_err(|e| format!("{command:?}: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr)))
        }
    };
    run(Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned()))
        .args(["-m", "venv"])
        .arg(&venv))?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements))?;
    std::fs::write(&marker, &wanted).map_err(|e| e.to_string())?;
    Ok(python)
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free port")
}

/// A running `tests/mcp/server.py`; stopped (killed) when dropped.
pub struct FastMcp {
    child: Child,
    port: u16,
    mode: String,
}

impl FastMcp {
    /// Starts the server in `mode` (`normal`, `collide`) on a free port and
    /// waits until it accepts connections. `None` when the SDK cannot be
    /// installed here and `SUBS_REQUIRE_MCP` is not `1`.
    pub fn start(mode: &str) -> Option<Self> {
        Self::start_on(free_port(), mode)
    }

    /// As [`start`](Self::start), on `port`.
    pub fn start_on(port: u16, mode: &str) -> Option<Self> {
        let python = match python() {
            Ok(python) => python,
            Err(why) if std::env::var("SUBS_REQUIRE_MCP").as_deref() == Ok("1") => {
                panic!("SUBS_REQUIRE_MCP=1 but the Python MCP SDK could not be installed: {why}")
            }
            Err(why) => {
                eprintln!(
                    "skipped: the Python MCP SDK could not be installed ({why}); SUBS_REQUIRE_MCP=1 fails instead"
                );
                return None;
            }
        };
        let child = Command::new(python)
            .arg(root().join("tests/mcp/server.py"))
            .arg(port.to_string())
            .args(["--mode", mode])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting tests/mcp/server.py");
        let server = Self { child, port, mode: mode.to_owned() };
        server.wait_ready();
        Some(server)
    }

    fn wait_ready(&self) {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        crate::wait::eventually_blocking(Duration::from_secs(30), format!("the MCP server listens on {addr}"), || {
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        });
    }

    /// Its endpoint: `http://127.0.0.1:<port>/mcp`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops it and starts it again on the same port: a new process, which
    /// knows none of the old one's MCP sessions.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let python = python().expect("installed before");
        self.child = Command::new(python)
            .arg(root().join("tests/mcp/server.py"))
            .arg(self.port.to_string())
            .args(["--mode", &self.mode])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("restarting tests/mcp/server.py");
        self.wait_ready();
    }
}

impl Drop for FastMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
