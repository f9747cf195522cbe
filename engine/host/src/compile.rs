//! Compiling components within a budget.
//!
//! Compiling is the one thing an upload makes the engine do before any
//! limit of a decision applies, and its cost does not follow the size of
//! the bytes: a few hundred kilobytes of one function with thousands of
//! locals and branches takes cranelift tens of seconds and gigabytes. So a
//! compile is held to a [`CompileBudget`] twice over:
//!
//! - before compiling, the component's shape (read without compiling, see
//!   `inspect`) must stay under the budget's counts: functions, code bytes,
//!   the largest function, locals;
//! - the compile itself runs, with [`Compiler::Child`], in a child process
//!   that is killed as soon as its resident memory passes the budget or its
//!   wall-clock time ends. A compile bomb then costs the server one child,
//!   never its own memory. (The parent watches the child's resident memory
//!   rather than the child limiting its address space: allocators and
//!   thread stacks reserve gigabytes of address space they never touch.) [`Compiler::InProcess`] compiles on the caller's thread,
//!   bounded by the counts alone: for embedding the engine, tests, and
//!   `subs run` on one's own agents.
//!
//! The child is this engine's own binary, started with arguments the
//! embedder names (`subs` passes a hidden subcommand): it reads the
//! engine's [`ChildSettings`] as JSON from its first argument and the
//! component from stdin, and writes the compiled artifact to stdout
//! ([`run_child`]). Nothing is written to disk, so a refused upload leaves
//! nothing behind.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::LoadError;
use super::inspect::Shape;

/// What compiling one component may cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileBudget {
    /// Functions the component's core modules may define.
    pub max_functions: u64,
    /// The largest function body, in bytes.
    pub max_function_bytes: u64,
    /// Locals one function may declare.
    pub max_locals: u64,
    /// All function bodies together, in bytes.
    pub max_code_bytes: u64,
    /// Wall-clock time of one compile (with [`Compiler::Child`]).
    pub wall: Duration,
    /// Resident memory of the compiling process (with
    /// [`Compiler::Child`]), in bytes.
    pub memory_bytes: u64,
}

impl Default for CompileBudget {
    fn default() -> Self {
        Self {
            max_functions: 200_000,
            max_function_bytes: 4 << 20,
            max_locals: 50_000,
            max_code_bytes: 128 << 20,
            wall: Duration::from_secs(120),
            memory_bytes: 2 << 30,
        }
    }
}

impl CompileBudget {
    /// Refuses a component whose shape is over the budget's counts.
    pub(crate) fn check(&self, shape: &Shape) -> Result<(), LoadError> {
        let over = |what: &str, has: u64, max: u64, setting: &str| {
            LoadError::CompileBudget(format!(
                "it has {what} {has}, more than the compile budget's {max} (setting `{setting}`)"
            ))
        };
        if shape.functions > self.max_functions {
            return Err(over("functions:", shape.functions, self.max_functions, "compile.max_functions"));
        }
        if shape.largest_function > self.max_function_bytes {
            return Err(over(
                "a function of bytes:",
                shape.largest_function,
                self.max_function_bytes,
                "compile.max_function_bytes",
            ));
        }
        if shape.most_locals > self.max_locals {
            return Err(over("a function with locals:", shape.most_locals, self.max_locals, "compile.max_locals"));
        }
        if shape.code_bytes > self.max_code_bytes {
            return Err(over("code bytes:", shape.code_bytes, self.max_code_bytes, "compile.max_code_bytes"));
        }
        Ok(())
    }
}

/// Where components are compiled.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Compiler {
    /// On the calling thread: bounded by the budget's counts only.
    #[default]
    InProcess,
    /// In a child process, bounded in memory and wall-clock time too:
    /// `program args…` must call [`run_child`].
    Child {
        /// The executable (usually the running one).
        program: PathBuf,
        /// Arguments that make it a compile child.
        args: Vec<String>,
    },
}

/// What a compile child needs to build an engine whose artifacts the
/// parent's engine loads: the settings that shape compiled code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildSettings {
    /// Epoch interruption compiled in.
    pub epoch_interruption: bool,
    /// The guest's native call stack.
    pub max_stack_bytes: usize,
    /// Where compiled functions are kept by content (see `functions`), if
    /// anywhere.
    #[serde(default)]
    pub function_cache: Option<PathBuf>,
    /// Where functions compiled now are written instead of
    /// `function_cache`, to be kept only if the upload is accepted.
    #[serde(default)]
    pub function_staging: Option<PathBuf>,
    /// Baseline code (Winch: quick to compile, slower to run) instead of
    /// optimized code (Cranelift); see `tier`.
    #[serde(default)]
    pub baseline: bool,
}

/// How many bytes of a child's stderr an error quotes.
const STDERR_QUOTED: usize = 2000;

/// The most a compiled artifact may be; a bigger one is refused rather
/// than read into memory.
const MAX_ARTIFACT: usize = 1 << 30;

/// Compiles `component` in a child process under `budget`; the artifact.
pub(crate) fn in_child(
    program: &std::path::Path,
    args: &[String],
    settings: &ChildSettings,
    budget: &CompileBudget,
    component: &[u8],
) -> Result<Vec<u8>, LoadError> {
    use std::process::{Command, Stdio};

    let started = std::time::Instant::now();
    let settings = serde_json::to_string(settings).map_err(|e| LoadError::Engine(e.to_string()))?;
    let mut child = Command::new(program)
        .args(args)
        .arg(settings)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_LIB_BACKTRACE", "0")
        .spawn()
        .map_err(|e| LoadError::Engine(format!("starting the compiler `{}`: {e}", program.display())))?;
    let (mut stdin, mut stdout, mut stderr) =
        (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    // The three pipes are served on their own threads so that none of them
    // fills while this thread waits on another, and this thread watches
    // the clock.
    std::thread::scope(|scope| {
        let writer = scope.spawn(move || {
            let _ = stdin.write_all(component);
        });
        let reader = scope.spawn(move || {
            let mut artifact = Vec::new();
            let read = (&mut stdout).take(MAX_ARTIFACT as u64 + 1).read_to_end(&mut artifact);
            read.map(|_| artifact)
        });
        let errors = scope.spawn(move || {
            let mut text = Vec::new();
            let _ = (&mut stderr).take(64 << 10).read_to_end(&mut text);
            let _ = std::io::copy(&mut stderr, &mut std::io::sink());
            String::from_utf8_lossy(&text).into_owned()
        });
        let status = loop {
            let over = match child.try_wait() {
                Ok(Some(status)) => break Ok(status),
                Ok(None) if started.elapsed() >= budget.wall => format!(
                    "compiling it took longer than the compile budget's {} (setting `compile.wall_secs`)",
                    humantime::format_duration(budget.wall)
                ),
                Ok(None) if resident(child.id()).is_some_and(|bytes| bytes > budget.memory_bytes) => {
                    memory_message(budget)
                }
                Ok(None) => {
                    // Sampling the compiler's memory: no event tells of it
                    // growing, and its exit is checked on the same beat.
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(e) => break Err(LoadError::Engine(format!("waiting for the compiler: {e}"))),
            };
            let _ = child.kill();
            let _ = child.wait();
            break Err(LoadError::CompileBudget(over));
        };
        let _ = writer.join();
        let artifact = reader.join().unwrap_or_else(|_| Ok(Vec::new()));
        let errors = errors.join().unwrap_or_default();
        let status = status?;
        if status.success() {
            let artifact = artifact.map_err(|e| LoadError::Engine(format!("reading the compiled component: {e}")))?;
            if artifact.len() > MAX_ARTIFACT {
                return Err(LoadError::CompileBudget(format!(
                    "its compiled code is larger than {} MiB",
                    MAX_ARTIFACT >> 20
                )));
            }
            return Ok(artifact);
        }
        Err(child_failure(status, &errors, budget))
    })
}

/// The error of a child that did not produce an artifact.
fn child_failure(status: std::process::ExitStatus, stderr: &str, budget: &CompileBudget) -> LoadError {
    use std::os::unix::process::ExitStatusExt as _;

    let said: String = stderr.trim().chars().take(STDERR_QUOTED).collect();
    // A child killed by the system (out of memory) or failing to allocate
    // ran out of memory before the watch saw it pass the budget.
    let out_of_memory = said.contains("memory allocation of") || said.contains("out of memory");
    if out_of_memory || status.signal().is_some() {
        return LoadError::CompileBudget(memory_message(budget));
    }
    match said.strip_prefix(INVALID) {
        Some(why) => LoadError::Invalid(why.trim().to_owned()),
        None => LoadError::Engine(format!("the compiler failed ({status}): {said}")),
    }
}

fn memory_message(budget: &CompileBudget) -> String {
    format!(
        "compiling it needed more memory than the compile budget's {} MiB (setting `compile.memory_mib`)",
        budget.memory_bytes >> 20
    )
}

/// The resident memory of process `pid`, in bytes, where the system says.
fn resident(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib << 10)
}

/// How a child says the component itself is invalid, on stderr.
const INVALID: &str = "invalid component:";

/// The body of a compile child: compiles the component on stdin for an
/// engine set up by `settings` (JSON, as the parent passed it), writes the
/// artifact to stdout, and returns the exit code.
pub fn run_child(settings: &str) -> i32 {
    let settings: ChildSettings = match serde_json::from_str(settings) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bad compile settings: {e}");
            return 2;
        }
    };
    let mut component = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut component) {
        eprintln!("reading the component: {e}");
        return 2;
    }
    let engine = match wasmtime::Engine::new(&compile_config(&settings)) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("the compiler's engine: {e:#}");
            return 2;
        }
    };
    match engine.precompile_component(&component) {
        Ok(artifact) => match std::io::stdout().lock().write_all(&artifact) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("writing the compiled component: {e}");
                2
            }
        },
        Err(e) => {
            eprintln!("{INVALID} {e:#}");
            1
        }
    }
}

/// The wasmtime configuration that compiles code for a host with
/// `settings`; the parent's engine uses the same settings, so wasmtime
/// accepts the artifacts (and checks that it does).
pub(crate) fn compile_config(settings: &ChildSettings) -> wasmtime::Config {
    let mut wasm = wasmtime::Config::new();
    wasm.wasm_component_model(true)
        .epoch_interruption(settings.epoch_interruption)
        .max_wasm_stack(settings.max_stack_bytes)
        .async_stack_size(settings.max_stack_bytes + (512 << 10));
    if settings.baseline {
        // Winch compiles each function in one pass; it has no incremental
        // cache to share functions through, and needs none.
        wasm.strategy(wasmtime::Strategy::Winch);
        return wasm;
    }
    if let Some(dir) = &settings.function_cache {
        let store =
            std::sync::Arc::new(super::functions::FunctionCache::new(dir.clone(), settings.function_staging.clone()));
        // Fails only for an engine without a compiler, which this is not.
        let _ = wasm.enable_incremental_compilation(store);
    }
    wasm
}

#[cfg(test)]
mod tests {
    use super::super::{HostConfig, cache, child_settings, engine_config};
    use super::*;

    #[test]
    fn what_a_child_compiles_without_the_pool_loads_into_the_pooled_engine() {
        let dir = tempfile::tempdir().unwrap();
        for (enforce_limits, cache) in [(true, None), (false, None), (true, Some(dir.path()))] {
            let config = HostConfig { enforce_limits, compile_cache: cache.map(Into::into), ..HostConfig::default() };
            let child = wasmtime::Engine::new(&compile_config(&child_settings(&config, cache))).unwrap();
            let host = wasmtime::Engine::new(&engine_config(&config)).unwrap();
            let hash = |engine: &wasmtime::Engine| {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                engine.precompile_compatibility_hash().hash(&mut hasher);
                hasher.finish()
            };
            assert_eq!(hash(&child), hash(&host), "the compile cache names artifacts by this hash");
            let component = wat::parse_str("(component (core module (func (export \"f\"))))").unwrap();
            let artifact = child.precompile_component(&component).unwrap();
            cache::deserialize(&host, &artifact).unwrap();
        }
    }

    /// A compile child told to compile baseline code (the settings travel
    /// as JSON) builds Winch code that the host's baseline engine loads.
    #[test]
    fn what_a_baseline_child_compiles_loads_into_the_baseline_engine() {
        let config = HostConfig { baseline_first: true, ..HostConfig::default() };
        let settings = super::super::tier::settings(&config);
        let sent: ChildSettings = serde_json::from_str(&serde_json::to_string(&settings).unwrap()).unwrap();
        assert!(sent.baseline, "the child is told to compile baseline code");
        let child = wasmtime::Engine::new(&compile_config(&sent)).unwrap();
        let host = super::super::tier::Baseline::new(&config).map_err(|e| e.to_string()).unwrap();
        let component = wat::parse_str("(component (core module (func (export \"f\"))))").unwrap();
        let artifact = child.precompile_component(&component).unwrap();
        cache::deserialize(&host.engine, &artifact).unwrap();
        let optimized = wasmtime::Engine::new(&engine_config(&config)).unwrap();
        assert!(cache::deserialize(&optimized, &artifact).is_err(), "baseline code never loads as optimized code");
    }

    #[test]
    fn shapes_over_the_counts_are_refused_naming_the_setting() {
        let budget = CompileBudget { max_functions: 10, max_locals: 5, ..CompileBudget::default() };
        let fine = Shape { functions: 10, most_locals: 5, ..Shape::default() };
        assert!(budget.check(&fine).is_ok());
        let err = budget.check(&Shape { functions: 11, ..fine.clone() }).unwrap_err().to_string();
        assert!(err.contains("functions: 11") && err.contains("compile.max_functions"), "{err}");
        let err = budget.check(&Shape { most_locals: 6, ..fine }).unwrap_err().to_string();
        assert!(err.contains("compile.max_locals"), "{err}");
    }
}
