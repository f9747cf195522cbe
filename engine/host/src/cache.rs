//! The compile cache: a component is compiled once per engine
//! configuration and kept on disk as native code, so a restart loads it
//! without compiling.
//!
//! A compiled artifact is named `<sha256 of the upload>-<hash of the
//! engine configuration>.cwasm`: a new component, a new wasmtime version
//! or a changed setting (limits on or off, pool sizes, stack size) each get
//! a new name, so a stale artifact is never loaded. wasmtime also checks
//! the artifact's header against the engine when loading it; an artifact
//! that fails to load (corrupt, foreign) is compiled again and replaced.
//!
//! Artifacts are native code that is run without further checks, so the
//! cache directory must be writable by the engine only.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::LoadError;

/// The directory of the compile cache that keeps compiled functions (see
/// `functions`).
pub(crate) const FUNCTIONS: &str = "functions";

/// Where compile children stage the functions they compile, beside
/// [`FUNCTIONS`] so that moving them in is a rename.
const STAGING: &str = "functions-staging";

/// Where compiled components are kept, and how many were compiled.
#[derive(Debug)]
pub(crate) struct CompileCache {
    /// `None` keeps nothing on disk (every load compiles).
    dir: Option<PathBuf>,
    /// The bytes in the functions directory, counted on first use and
    /// kept up to date as staged functions are moved in.
    function_bytes: std::sync::Mutex<Option<u64>>,
    /// Hash of the engine configuration, part of every artifact's name.
    engine_hash: u64,
    /// Components compiled (not loaded from disk) through this cache, so a
    /// test can prove a restart compiles nothing.
    pub(crate) compilations: AtomicU64,
}

/// Distinguishes temporary files of concurrent writers, in this process
/// and (with the process id) in compile children.
static WRITES: AtomicU64 = AtomicU64::new(0);

impl CompileCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        // `DefaultHasher::new` uses fixed keys, so the hash is the same in
        // every process of one build (a different Rust version may hash
        // differently; that only costs one recompile).
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self {
            dir,
            engine_hash: hasher.finish(),
            compilations: AtomicU64::new(0),
            function_bytes: std::sync::Mutex::new(None),
        }
    }

    /// The directory compiled components are kept in, if any.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Where the artifact of the upload with SHA-256 `digest` (hex) is
    /// kept, if the cache keeps anything.
    fn path(&self, digest: &str) -> Option<PathBuf> {
        Some(self.dir.as_ref()?.join(format!("{digest}-{:016x}.cwasm", self.engine_hash)))
    }

    /// The compiled component of the upload with SHA-256 `digest`, if the
    /// cache holds it. Only accepted components are kept, so a refused
    /// upload sent again is compiled and checked again.
    pub(crate) fn find(&self, engine: &Engine, digest: &str) -> Option<Component> {
        let path = self.path(digest)?;
        if !path.exists() {
            return None;
        }
        match deserialize_file(engine, &path) {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "a compiled component failed to load; compiling it again");
                None
            }
        }
    }

    /// A new, empty directory for a compile child to write the functions
    /// it compiles to, if the cache keeps anything; removed when dropped.
    pub(crate) fn stage_functions(&self) -> Result<Option<tempfile::TempDir>, LoadError> {
        let Some(dir) = &self.dir else { return Ok(None) };
        let staging = dir.join(STAGING);
        let made = std::fs::create_dir_all(&staging).and_then(|()| tempfile::tempdir_in(&staging));
        made.map(Some).map_err(|e| LoadError::Cache(format!("{}: {e}", staging.display())))
    }

    /// Moves the functions staged in `staged` into the functions
    /// directory, as far as `bound` (bytes) allows.
    pub(crate) fn keep_functions(&self, staged: &Path, bound: u64) {
        let Some(dir) = &self.dir else { return };
        let shared = dir.join(FUNCTIONS);
        let mut held = self.function_bytes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let held = held.get_or_insert_with(|| super::functions::entries(&shared).iter().map(|(_, bytes)| bytes).sum());
        let (moved, full) = super::functions::promote(staged, &shared, held, bound);
        if full {
            tracing::warn!(
                kept = moved,
                held_mib = *held >> 20,
                "the compiled-function cache is full (setting `compile.function_cache_mib`); \
                 agents sharing these functions will compile them again"
            );
        }
    }

    /// Keeps the compiled `artifact` of the upload with SHA-256 `digest`.
    pub(crate) fn keep(&self, digest: &str, artifact: &[u8]) -> Result<(), LoadError> {
        let (Some(dir), Some(path)) = (&self.dir, self.path(digest)) else { return Ok(()) };
        write_atomically(dir, &path, artifact).map_err(|e| LoadError::Cache(format!("{}: {e}", path.display())))
    }
}

/// Loads an artifact this cache wrote.
#[allow(unsafe_code)]
fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the file be an artifact produced by
    // `Engine::precompile_component` of a compatible engine and not change
    // while mapped. Only this cache writes the directory (the engine's own
    // data directory), every artifact is written whole under a temporary
    // name and renamed into place, and is never modified after; wasmtime
    // checks the header and the engine compatibility itself.
    unsafe { Component::deserialize_file(engine, path) }
}

/// Loads an artifact the host just compiled, in this process or in its
/// compile child.
#[allow(unsafe_code)]
pub(crate) fn deserialize(engine: &Engine, artifact: &[u8]) -> Result<Component, LoadError> {
    // SAFETY: wasmtime requires bytes produced by `precompile_component`
    // of a compatible engine: the caller compiled them with this engine or
    // with a compile child of the same binary and settings, which is where
    // the bytes came from, and wasmtime checks the header and the engine
    // compatibility itself.
    unsafe { Component::deserialize(engine, artifact) }.map_err(|e| LoadError::Engine(format!("{e:#}")))
}

/// Writes `bytes` to `path` under a temporary name and renames it into
/// place (creating `dir`, its directory), so that a reader, in this
/// process or another, sees the whole file or none of it.
pub fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let partial = path.with_extension(format!("partial-{}-{n}", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}
