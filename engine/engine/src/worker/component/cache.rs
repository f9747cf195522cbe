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

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::LoadError;
use super::componentize::componentize;

/// Where compiled components are kept, and how many were compiled.
#[derive(Debug)]
pub(crate) struct CompileCache {
    /// `None` keeps nothing on disk (every load compiles).
    dir: Option<PathBuf>,
    /// Hash of the engine configuration, part of every artifact's name.
    engine_hash: u64,
    /// Components compiled (not loaded from disk) through this cache, so a
    /// test can prove a restart compiles nothing.
    pub(crate) compilations: AtomicU64,
}

/// Distinguishes temporary files of concurrent writers.
static WRITES: AtomicU64 = AtomicU64::new(0);

impl CompileCache {
    pub(crate) fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        // `DefaultHasher::new` uses fixed keys, so the hash is the same in
        // every process of one build (a different Rust version may hash
        // differently; that only costs one recompile).
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        Self { dir, engine_hash: hasher.finish(), compilations: AtomicU64::new(0) }
    }

    /// The component of `bytes`, from the cache when it holds it.
    pub(crate) fn load(&self, engine: &Engine, bytes: &[u8]) -> Result<Component, LoadError> {
        let Some(dir) = &self.dir else {
            self.compilations.fetch_add(1, Ordering::Relaxed);
            return Component::new(engine, componentize(bytes)?).map_err(|e| LoadError::Invalid(format!("{e:#}")));
        };
        let digest = hex::encode(Sha256::digest(bytes));
        let path = dir.join(format!("{digest}-{:016x}.cwasm", self.engine_hash));
        if path.exists() {
            match deserialize(engine, &path) {
                Ok(component) => return Ok(component),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "a compiled component failed to load; compiling it again")
                }
            }
        }
        self.compilations.fetch_add(1, Ordering::Relaxed);
        let compiled =
            engine.precompile_component(&componentize(bytes)?).map_err(|e| LoadError::Invalid(format!("{e:#}")))?;
        write_atomically(dir, &path, &compiled).map_err(|e| LoadError::Cache(format!("{}: {e}", path.display())))?;
        deserialize(engine, &path).map_err(|e| LoadError::Cache(format!("{}: {e:#}", path.display())))
    }
}

/// Loads an artifact this cache wrote.
#[allow(unsafe_code)]
fn deserialize(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: wasmtime requires that the file be an artifact produced by
    // `Engine::precompile_component` of a compatible engine and not change
    // while mapped. Only this cache writes the directory (the engine's own
    // data directory), every artifact is written whole under a temporary
    // name and renamed into place, and is never modified after; wasmtime
    // checks the header and the engine compatibility itself.
    unsafe { Component::deserialize_file(engine, path) }
}

/// Writes `bytes` to `path` so that readers see the whole file or none.
fn write_atomically(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let partial = path.with_extension(format!("partial-{}-{n}", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}
