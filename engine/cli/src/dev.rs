//! `subs dev DIR`: a project made by `subs new`, built, chatted with, and
//! built again whenever its sources change.
//!
//! The project's kind is told by its files: `Cargo.toml` (Rust, built
//! with `cargo build --target wasm32-wasip2 --release`), `agent.py` with
//! `build.sh` (Python, `./build.sh OUT`), or `package.json` (TypeScript,
//! `npm run build` into `<name>.wasm`, after `npm install` when
//! `node_modules/` is missing): the commands each template's README
//! gives. The built agent is registered as `subs run` registers one, and
//! the same chat opens ([`run::Chat`]), its session kept in the
//! project's `.subs/` (so the next `subs dev` continues it).
//!
//! A change to the sources (anything but the build's output, `.subs/`,
//! `target/`, `node_modules/` and hidden files), once the files have been
//! quiet for a moment, rebuilds the project between turns. A failed build
//! prints the build's output and leaves the last build and the chat as
//! they were. A successful one is asked every recorded decision of the
//! conversation again through the engine's replay (no outgoing HTTP,
//! nothing stored), each decision that changed printed with its changes,
//! and then serves the chat's next turns.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use notify::Watcher as _;
use serde_json::Value;
use subs_engine::replay::{self, Selection};
use subs_engine::worker::Worker;
use subs_engine::worker::component::{AgentPolicy, ComponentAgent, ComponentHost};
use subs_server::LOCAL_TENANT;
use tokio::io::AsyncReadExt as _;

use crate::error::{CliError, CliResult};
use crate::progress::Spinner;
use crate::replay::{Paint, write_changes};
use crate::run::{self, AGENT_ID, Answers, Chat, EXIT, Local, PROMPT};
use crate::{data, settings};

/// The directory in the project that holds the session's store and the
/// Python build's output.
pub const DATA_DIR: &str = ".subs";

/// How long the sources must be quiet after a change before the build
/// starts: an editor's save is several events in a few milliseconds, a
/// `git checkout` many more.
const QUIET: Duration = Duration::from_millis(300);

/// The most of each of a build's output streams kept (its end) to show
/// when it fails.
const MAX_BUILD_OUTPUT: usize = 256 << 10;

/// The most decisions of the conversation replayed after a build, and
/// for how long at most.
const REPLAY_LIMIT: usize = 1_000;
const REPLAY_TIME: Duration = Duration::from_secs(60);

/// `subs dev [DIR]`.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// The project: a directory made by `subs new` (Rust, Python or
    /// TypeScript).
    #[arg(value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// Another agent, registered as NAME beside the project's (a `.wasm`
    /// file or an HTTP worker's URL), so that sub-agents it delegates to
    /// run here too. Repeatable. Not watched.
    #[arg(long = "agent", value_name = "NAME=AGENT")]
    pub agents: Vec<String>,
    /// The session id (kept in the project's `.subs/`).
    #[arg(long, value_name = "ID", default_value = "dev")]
    pub session: String,
    /// The model used when the agent names none. [default: the config
    /// file's, else subs/offline]
    #[arg(long, value_name = "MODEL", env = "SUBS_DEFAULT_MODEL")]
    pub default_model: Option<String>,
    /// Sign requests to `--agent` HTTP workers with this secret.
    #[arg(long, value_name = "SECRET", env = "SUBS_WORKER_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// A TOML config file, as `subs serve` takes (docs/configuration.md):
    /// sandbox limits, providers, the default model.
    #[arg(long, value_name = "FILE", env = "SUBS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Where compiled components are kept between runs. [default: a
    /// per-user cache directory, e.g. ~/.cache/subs/compiled]
    #[arg(long, value_name = "DIR", env = "SUBS_CACHE")]
    pub cache: Option<PathBuf>,
}

/// Builds the project, opens the chat and rebuilds on changes until the
/// chat is left.
pub async fn exec(args: DevArgs) -> CliResult {
    let project = Project::find(&args.dir)?;
    let file = settings::load(args.config.as_deref())?;
    // `AGENT_ID` is the project's agent; the placeholder source is never read.
    let specs = run::agent_specs("-", &args.agents)?.split_off(1);
    let data_dir = project.dir.join(DATA_DIR);
    data::prepare(&data_dir)?;
    // Whatever makes the project's `.gitignore`, the session stays out of
    // its repository.
    let _ = std::fs::write(data_dir.join(".gitignore"), "*\n");
    let host = run::component_host(&file, args.cache.clone()).await?;
    let mut workers = run::load_workers(specs, args.secret.as_deref(), Some(&host), None, &file).await?;
    let mut watcher = Watcher::start(&project.dir)?;
    let dev = Dev { project, host, file, session: args.session.clone(), paint: Paint::for_stdout() };

    let first = tokio::select! {
        first = dev.first_build(&mut watcher) => first?,
        _ = tokio::signal::ctrl_c() => return Err(run::interrupted()),
    };
    let Some(first) = first else { return Ok(()) };
    workers.push((AGENT_ID.to_owned(), Arc::new(first.clone()) as Arc<dyn Worker>));
    let local = Local::open(
        &dev.file,
        args.default_model.as_deref(),
        &data_dir,
        "is another `subs dev` (or a `subs serve`) using this project? Stop it first",
        workers,
    )
    .await?;
    let outcome = tokio::select! {
        outcome = dev.chat(&local, &first, &mut watcher) => outcome,
        _ = tokio::signal::ctrl_c() => Err(run::interrupted()),
    };
    local.close().await?;
    outcome
}

/// The languages a project can be in, and so how it builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rust,
    Python,
    TypeScript,
}

/// The project being developed.
struct Project {
    /// Its directory, absolute.
    dir: PathBuf,
    kind: Kind,
}

impl Project {
    /// The project in `dir`, told by its files; anything else is a usage
    /// error naming what is missing.
    fn find(dir: &Path) -> CliResult<Self> {
        let dir = dir.canonicalize().map_err(|e| CliError::usage(anyhow!("{}: {e}", dir.display())))?;
        if !dir.is_dir() {
            return Err(CliError::usage(anyhow!("{} is not a directory", dir.display())));
        }
        let kind = if dir.join("Cargo.toml").is_file() {
            Kind::Rust
        } else if dir.join("agent.py").is_file() && dir.join("build.sh").is_file() {
            Kind::Python
        } else if dir.join("package.json").is_file() {
            Kind::TypeScript
        } else {
            return Err(CliError::usage(anyhow!(
                "{} is not an agent project: subs dev takes a directory made by `subs new`, with a Cargo.toml \
                 (Rust), an agent.py and build.sh (Python) or a package.json (TypeScript)",
                dir.display()
            )));
        };
        Ok(Self { dir, kind })
    }

    /// The project's name: its directory's.
    fn name(&self) -> String {
        self.dir.file_name().map_or_else(|| self.dir.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    /// Runs the project's build; the component it made, or the build's
    /// output when it failed.
    async fn build(&self) -> CliResult<Result<PathBuf, String>> {
        match self.kind {
            Kind::Rust => {
                // The artifact is found in cargo's messages, wherever the
                // target directory is; the diagnostics go to stderr as
                // people read them.
                let mut cargo = command("cargo", &self.dir);
                cargo.args([
                    "build",
                    "--target",
                    "wasm32-wasip2",
                    "--release",
                    "--message-format=json-render-diagnostics",
                ]);
                let output = match run_build(cargo, "cargo build", true).await {
                    Ok(output) => output,
                    Err(failed) => return Ok(Err(failed)),
                };
                let manifest = self.dir.join("Cargo.toml");
                let artifact = String::from_utf8_lossy(&output.stdout)
                    .lines()
                    .filter_map(|line| serde_json::from_str::<Value>(line).ok())
                    .filter(|m| m["reason"] == "compiler-artifact")
                    .filter(|m| m["manifest_path"].as_str().is_some_and(|p| Path::new(p) == manifest))
                    .flat_map(|m| m["filenames"].as_array().cloned().unwrap_or_default())
                    .filter_map(|f| f.as_str().filter(|f| f.ends_with(".wasm")).map(PathBuf::from))
                    .next_back();
                Ok(artifact.ok_or_else(|| {
                    "cargo built no .wasm: the crate needs `crate-type = [\"cdylib\"]` under [lib]".to_owned()
                }))
            }
            Kind::Python => {
                let out = self.dir.join(DATA_DIR).join("agent.wasm");
                let mut build = command(self.dir.join("build.sh"), &self.dir);
                build.arg(&out);
                Ok(run_build(build, "./build.sh", false).await.map(|_| out))
            }
            Kind::TypeScript => {
                if !self.dir.join("node_modules").is_dir() {
                    println!("installing the project's toolchain (npm install)…");
                    let mut install = command("npm", &self.dir);
                    install.arg("install");
                    if let Err(failed) = run_build(install, "npm install", false).await {
                        return Ok(Err(failed));
                    }
                }
                let mut build = command("npm", &self.dir);
                build.args(["run", "build"]);
                if let Err(failed) = run_build(build, "npm run build", false).await {
                    return Ok(Err(failed));
                }
                let package = std::fs::read_to_string(self.dir.join("package.json")).context("reading package.json")?;
                let name = serde_json::from_str::<Value>(&package)
                    .ok()
                    .and_then(|p| p["name"].as_str().map(str::to_owned))
                    .ok_or_else(|| CliError::usage(anyhow!("package.json names no package (`name`)")))?;
                let out = self.dir.join(format!("{name}.wasm"));
                Ok(if out.is_file() {
                    Ok(out)
                } else {
                    Err(format!("npm run build made no {name}.wasm (the template's build writes <name>.wasm)"))
                })
            }
        }
    }
}

/// `program` run in `dir`, reading nothing of the chat's input.
fn command(program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(program);
    command
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        // Ctrl-C (or leaving) stops a build in progress.
        .kill_on_drop(true);
    command
}

/// What a successful build printed on stdout (its end).
struct BuildOutput {
    stdout: Vec<u8>,
}

/// Runs a build command; its stdout when it succeeds, else what it
/// printed (stdout unless it is `machine` output, then stderr; the end of
/// each), to be shown.
async fn run_build(mut command: tokio::process::Command, what: &str, machine: bool) -> Result<BuildOutput, String> {
    let mut child = command.spawn().map_err(|e| format!("{what} could not start: {e}"))?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (stdout, stderr, status) = tokio::join!(tail(stdout), tail(stderr), child.wait());
    match status {
        Ok(status) if status.success() => Ok(BuildOutput { stdout }),
        Ok(status) => {
            let mut shown =
                if machine { String::new() } else { String::from_utf8_lossy(&stdout).trim_end().to_owned() };
            let stderr = String::from_utf8_lossy(&stderr);
            if !shown.is_empty() && !stderr.trim().is_empty() {
                shown.push('\n');
            }
            shown.push_str(stderr.trim_end());
            Err(format!("{shown}\n{what} failed ({status})"))
        }
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// The last [`MAX_BUILD_OUTPUT`] bytes of a stream (all of it when
/// shorter), with a note when the start was cut.
async fn tail(stream: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    let Some(mut stream) = stream else { return Vec::new() };
    let mut kept = Vec::new();
    let mut cut = false;
    let mut buffer = [0u8; 8192];
    while let Ok(n @ 1..) = stream.read(&mut buffer).await {
        kept.extend_from_slice(&buffer[..n]);
        // Cut in halves, not per read, so keeping the end costs little.
        if kept.len() > 2 * MAX_BUILD_OUTPUT {
            kept.drain(..kept.len() - MAX_BUILD_OUTPUT);
            cut = true;
        }
    }
    if kept.len() > MAX_BUILD_OUTPUT {
        kept.drain(..kept.len() - MAX_BUILD_OUTPUT);
        cut = true;
    }
    if cut {
        kept.splice(..0, b"(the start of the output is cut)\n".iter().copied());
    }
    kept
}

/// What the chat and its rebuilds share.
struct Dev {
    project: Project,
    host: ComponentHost,
    file: settings::ConfigFile,
    session: String,
    paint: Paint,
}

impl Dev {
    /// Builds until a build succeeds (each failure shown, the next change
    /// building again); `None` when the person leaves meanwhile.
    async fn first_build(&self, watcher: &mut Watcher) -> CliResult<Option<ComponentAgent>> {
        println!("building {} ({})…", self.project.name(), self.project.dir.display());
        loop {
            match self.build().await? {
                Ok(agent) => return Ok(Some(agent)),
                Err(failure) => {
                    self.show_failure(&failure);
                    println!("there is nothing to chat with yet: the next change to the sources builds again");
                }
            }
            loop {
                tokio::select! {
                    changed = watcher.next() => {
                        println!("{} changed: building…", changed?);
                        break;
                    }
                    line = run::read_line() => match line? {
                        None => return Ok(None),
                        Some(line) if line.trim() == EXIT => return Ok(None),
                        Some(_) => println!("no build to chat with yet: fix the build and save"),
                    },
                }
            }
        }
    }

    /// Builds the project and loads what it built; why not, to show.
    async fn build(&self) -> CliResult<Result<ComponentAgent, String>> {
        let started = Instant::now();
        let built = {
            let _spinner = Spinner::start("building");
            self.project.build().await?
        };
        let wasm = match built {
            Ok(wasm) => wasm,
            Err(output) => return Ok(Err(output)),
        };
        let bytes = match tokio::fs::read(&wasm).await {
            Ok(bytes) => bytes,
            Err(e) => return Ok(Err(format!("reading {}: {e}", wasm.display()))),
        };
        let source = wasm.display().to_string();
        match run::load_components(&self.host, &self.file, vec![(AGENT_ID.to_owned(), source, bytes)]).await {
            Ok(mut loaded) => match loaded.pop() {
                Some((_, agent)) => {
                    println!("built in {:.1} s", started.elapsed().as_secs_f64());
                    Ok(Ok(agent))
                }
                None => Ok(Err("nothing was loaded".to_owned())),
            },
            // The build made something the engine cannot run: as much a
            // failed build as a compile error.
            Err(e) => Ok(Err(format!("{e}"))),
        }
    }

    /// Shows a failed build's output.
    fn show_failure(&self, output: &str) {
        println!("{}", self.paint.paint("31", "the build failed:"));
        println!("{output}");
    }

    /// The chat, rebuilding between turns when the sources change.
    async fn chat(&self, local: &Local, first: &ComponentAgent, watcher: &mut Watcher) -> CliResult {
        let answers = Answers::new(&[], false)?;
        let terminal = answers.terminal;
        let mut chat = Chat { engine: local.engine.clone(), session: self.session.clone(), json: false, answers };
        // A conversation kept from an earlier `subs dev`, against this build.
        self.replay(local, first).await?;
        chat.open_interrupts().await?;
        println!(
            "Chatting with {} (session {} in {DATA_DIR}/): {EXIT} or Ctrl-D leaves; saving a change rebuilds it.",
            self.project.name(),
            self.session
        );
        loop {
            if terminal {
                run::prompt(PROMPT)?;
            }
            let line = tokio::select! {
                line = run::read_line() => line?,
                changed = watcher.next() => {
                    let changed = changed?;
                    if terminal {
                        // Off the prompt's line.
                        println!();
                    }
                    println!("{changed} changed: building…");
                    match self.build().await? {
                        Err(failure) => {
                            self.show_failure(&failure);
                            println!("the chat goes on with the last build");
                        }
                        Ok(agent) => {
                            self.replay(local, &agent).await?;
                            local.engine.register_agent(LOCAL_TENANT, AGENT_ID, Arc::new(agent));
                            println!("the chat goes on with the new build");
                        }
                    }
                    continue;
                }
            };
            let Some(line) = line else {
                if terminal {
                    // Ctrl-D leaves the cursor after the prompt.
                    println!();
                }
                return Ok(());
            };
            match line.trim() {
                EXIT => return Ok(()),
                line => chat.say(line).await?,
            }
        }
    }

    /// Asks `agent` the conversation's recorded decisions again and prints
    /// those it decides differently, or that none changed. A replay that
    /// fails is reported; the chat goes on.
    async fn replay(&self, local: &Local, agent: &ComponentAgent) -> CliResult {
        let snapshot = local.engine.reads().snapshot(LOCAL_TENANT, &self.session).await.map_err(CliError::failed)?;
        if snapshot.is_none_or(|s| s.record.agent_id != AGENT_ID) {
            return Ok(());
        }
        let own =
            self.file.agent_policies().remove(&(LOCAL_TENANT.to_owned(), AGENT_ID.to_owned())).unwrap_or_default();
        // A replay reaches nothing outside, whatever the agent may do in
        // the chat.
        let policy = AgentPolicy { http_hosts: Some(Vec::new()), ..own };
        let candidate = agent.for_agent(LOCAL_TENANT, AGENT_ID, &policy).map_err(|e| CliError::failed(anyhow!(e)))?;
        let selection = Selection {
            sessions: Some(vec![self.session.clone()]),
            limit: REPLAY_LIMIT,
            time: REPLAY_TIME,
            ..Selection::default()
        };
        let outcome = {
            let _spinner = Spinner::start("replaying the conversation");
            replay::replay(local.store.as_ref(), LOCAL_TENANT, AGENT_ID, &candidate, &selection, None).await
        };
        match outcome {
            Ok(report) => {
                let report = serde_json::to_value(&report).map_err(|e| CliError::failed(anyhow!(e)))?;
                print!("{}", compact(&report, self.paint));
            }
            Err(e) => println!("{}", self.paint.paint("31", &format!("the replay failed: {e}"))),
        }
        Ok(())
    }
}

/// A replay's report in a few lines: how many decisions were replayed,
/// then each that changed with its changes, and each that failed.
fn compact(report: &Value, paint: Paint) -> String {
    use std::fmt::Write as _;
    let count = |key: &str| report.get(key).and_then(Value::as_u64).unwrap_or(0);
    let text = |value: &Value, key: &str| value.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut out = String::new();
    let (decisions, different, failed) = (count("decisions"), count("different"), count("failed"));
    let verdict = match (different, failed) {
        (0, 0) => paint.paint("32", "no decision changed"),
        (changed, 0) => paint.paint("33", &format!("{changed} changed")),
        (changed, failed) => paint.paint("31", &format!("{changed} changed, {failed} failed")),
    };
    let _ = writeln!(out, "replayed {decisions} decisions of the conversation against the new build: {verdict}");
    let decision = |entry: &Value| {
        let turn = entry.get("turn_id").and_then(Value::as_str).map(|t| format!("{t} ")).unwrap_or_default();
        format!("{turn}step {} {}", entry.get("step").and_then(Value::as_u64).unwrap_or(0), text(entry, "trigger"))
    };
    for entry in report.get("differences").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(out, "  {}", paint.paint("1", &format!("changed: {}", decision(entry))));
        write_changes(&mut out, entry, "    ", paint);
    }
    for entry in report.get("failures").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(out, "  {}", paint.paint("1", &format!("failed: {}", decision(entry))));
        let _ = writeln!(out, "{}", paint.paint("31", &format!("    {}", text(entry, "error"))));
    }
    if count("skipped") > 0 {
        let _ = writeln!(out, "  {} decisions kept no request to replay", count("skipped"));
    }
    if count("http_refused") > 0 {
        let _ = writeln!(out, "  {} decisions tried outgoing HTTP, which a replay refuses", count("http_refused"));
    }
    if let Some(why) = report.get("stopped").and_then(Value::as_str) {
        let _ = writeln!(out, "  stopped early ({why}): not every decision was compared");
    }
    out
}

/// Whether a change at `path` (relative to the project) leaves the
/// sources as they were: the build's output and the tools' own files
/// (those the templates' `.gitignore`s list, and the lock files a build
/// writes), the session's store, hidden files and editors' scratch files.
fn ignored(path: &Path) -> bool {
    let mut components = path.components().peekable();
    while let Some(component) = components.next() {
        let name = component.as_os_str().to_string_lossy();
        if name.starts_with('.') || ["target", "node_modules", "__pycache__", "build", "dist"].contains(&&*name) {
            return true;
        }
        if components.peek().is_none() {
            return name.ends_with(".wasm")
                || name.ends_with('~')
                || name.ends_with(".swp")
                || name.ends_with(".tsbuildinfo")
                // vim checks it can write a directory with this file.
                || name == "4913"
                || ["Cargo.lock", "package-lock.json"].contains(&&*name);
        }
    }
    // The project's directory itself.
    true
}

/// The project's sources, watched: the directory itself, and each of its
/// subdirectories that holds sources (not `target/`, `node_modules/`, …,
/// which are large and only ever hold output), as they appear.
struct Watcher {
    root: PathBuf,
    watcher: notify::RecommendedWatcher,
    /// The subdirectories watched.
    watched: HashSet<PathBuf>,
    /// Paths that changed, relative to the root; full when a change is
    /// already waiting, which is all a rebuild needs to know.
    changes: tokio::sync::mpsc::Receiver<PathBuf>,
}

impl Watcher {
    fn start(root: &Path) -> CliResult<Self> {
        let (sender, changes) = tokio::sync::mpsc::channel(64);
        let base = root.to_path_buf();
        let handler = move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if matches!(event.kind, notify::EventKind::Access(_)) {
                return;
            }
            for path in event.paths {
                let Ok(relative) = path.strip_prefix(&base) else { continue };
                if !ignored(relative) {
                    let _ = sender.try_send(relative.to_path_buf());
                }
            }
        };
        let failed = |e: notify::Error| CliError::unavailable(anyhow!("watching {}: {e}", root.display()));
        let mut watcher = notify::recommended_watcher(handler).map_err(failed)?;
        watcher.watch(root, notify::RecursiveMode::NonRecursive).map_err(failed)?;
        let mut this = Self { root: root.to_path_buf(), watcher, watched: HashSet::new(), changes };
        let entries = std::fs::read_dir(root).with_context(|| format!("reading {}", root.display()))?;
        for entry in entries.flatten() {
            this.watch_dir(Path::new(&entry.file_name()))?;
        }
        Ok(this)
    }

    /// Watches the project's subdirectory `relative`, and all beneath it,
    /// when it is one that holds sources and is not watched yet.
    fn watch_dir(&mut self, relative: &Path) -> CliResult {
        let path = self.root.join(relative);
        if relative.components().count() != 1 || ignored(relative) || !path.is_dir() || self.watched.contains(&path) {
            return Ok(());
        }
        self.watcher
            .watch(&path, notify::RecursiveMode::Recursive)
            .map_err(|e| CliError::unavailable(anyhow!("watching {}: {e}", path.display())))?;
        self.watched.insert(path);
        Ok(())
    }

    /// The next change to the sources, once they have been quiet for
    /// [`QUIET`]: what changed, for people (`agent.py`, `src/a.rs, src/b.rs
    /// and 3 more`).
    async fn next(&mut self) -> CliResult<String> {
        let first = self.changes.recv().await.ok_or_else(|| CliError::failed(anyhow!("the file watcher stopped")))?;
        let mut paths = vec![first];
        while let Ok(Some(more)) = tokio::time::timeout(QUIET, self.changes.recv()).await {
            if !paths.contains(&more) && paths.len() < MAX_NAMED {
                paths.push(more);
            }
        }
        for path in &paths {
            self.watch_dir(path)?;
        }
        // An editor's or `sed -i`'s temporary file, renamed onto the file
        // it saves, is gone by now: the files still there are named, or
        // those removed when nothing is left.
        let (present, gone): (Vec<_>, Vec<_>) = paths.into_iter().partition(|p| self.root.join(p).exists());
        let named = if present.is_empty() { gone } else { present };
        let mut text = named.iter().take(3).map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        if named.len() > 3 {
            text.push_str(&format!(" and {} more", named.len() - 3));
        }
        Ok(text)
    }
}

/// The most changed paths one rebuild keeps to name.
const MAX_NAMED: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sources_are_watched() {
        for source in ["agent.py", "src/lib.rs", "src/agent.ts", "Cargo.toml", "package.json", "tests/test_agent.py"] {
            assert!(!ignored(Path::new(source)), "{source}");
        }
        for output in [
            ".subs/subs.redb",
            ".venv/bin/python",
            "__pycache__/agent.cpython-311.pyc",
            "target/release/x.wasm",
            "node_modules/esbuild/package.json",
            "build/agent.bundle.js",
            "dist/test/agent.test.js",
            "my-agent.wasm",
            ".agent.py.swp",
            "agent.py~",
            "4913",
            "Cargo.lock",
            "",
        ] {
            assert!(ignored(Path::new(output)), "{output}");
        }
    }

    #[test]
    fn the_compact_report_names_each_changed_decision() {
        let report = serde_json::json!({
            "decisions": 5, "same": 4, "different": 1, "failed": 0, "skipped": 0, "http_refused": 0,
            "differences": [{"session_id": "dev", "turn_id": "turn_1", "step": 4, "trigger": "tool.execute",
                "changes": [{"path": "/actions/0/result/status", "change": "changed",
                             "recorded": "shipped", "candidate": "delivered"}]}],
        });
        assert_eq!(
            compact(&report, Paint(false)),
            "replayed 5 decisions of the conversation against the new build: 1 changed\n  changed: turn_1 step 4 \
             tool.execute\n    ~ /actions/0/result/status: \"shipped\" → \"delivered\"\n"
        );
        let same = serde_json::json!({"decisions": 5, "same": 5, "different": 0, "failed": 0});
        assert_eq!(
            compact(&same, Paint(false)),
            "replayed 5 decisions of the conversation against the new build: no decision changed\n"
        );
    }
}
