//! Compiled functions by content: cranelift's incremental compilation
//! cache, kept on disk beside the compile cache.
//!
//! Agents built with the same toolchain carry the same runtime: every
//! componentize-py agent embeds CPython, every componentize-js agent
//! SpiderMonkey, thousands of functions that are byte for byte the same
//! from one agent to the next. Cranelift names each function it compiles
//! by a hash of its code and of the compile settings; with this store a
//! function compiled once, for any upload, is not compiled again. The
//! first agent of a runtime compiles in full; the next compile only what
//! differs: loading the `tools` example after another agent of the same
//! toolchain took 3.0 s instead of 9.5 s in Python, 2.9 s instead of 9.3 s
//! in JavaScript (two cores). Both runtimes together take about 150 MB of
//! disk, in 28,000 files.
//!
//! Entries are native code that the compiler trusts, like the compiled
//! components beside them, so the directory must be writable by the engine
//! only. An entry that does not read back is compiled again; a write that
//! fails only costs a later compile.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::Digest as _;

/// Distinguishes temporary files of concurrent writers, in this process
/// and (with the process id) in compile children.
static WRITES: AtomicU64 = AtomicU64::new(0);

/// A cranelift cache store of one file per compiled function.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
}

impl FunctionCache {
    /// The store under `dir` (created when the first entry is written).
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Where the entry of `key` is kept: spread over 256 directories by
    /// the first byte of its hash, so no directory holds tens of
    /// thousands of files.
    fn path(&self, key: &[u8]) -> PathBuf {
        let name = hex::encode(sha2::Sha256::digest(key));
        self.dir.join(&name[..2]).join(&name[2..])
    }
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        std::fs::read(self.path(key)).ok().map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        write_whole(&self.path(key), &value).is_ok()
    }
}

/// Writes `bytes` to `path` under a temporary name and renames it into
/// place, so that a reader, in this process or another, sees all of an
/// entry or none of it.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let n = WRITES.fetch_add(1, Ordering::Relaxed);
    let partial = path.with_extension(format!("partial-{}-{n}", std::process::id()));
    std::fs::write(&partial, bytes)?;
    std::fs::rename(&partial, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })
}

#[cfg(test)]
mod tests {
    use wasmtime::CacheStore as _;

    use super::*;

    #[test]
    fn entries_read_back_and_missing_ones_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path().join("functions"));
        assert!(cache.get(b"key").is_none());
        assert!(cache.insert(b"key", b"compiled".to_vec()));
        assert_eq!(cache.get(b"key").as_deref(), Some(&b"compiled"[..]));
        assert!(cache.get(b"other").is_none());
    }
}
