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
//!
//! A server's compile children do not write the shared directory: each
//! writes what it compiles to a staging directory of its own, which the
//! host moves into the shared one only once the upload was accepted, and
//! only while the whole stays under its bound (`compile.function_cache_mib`).
//! A refused upload, a compile bomb stopped half way, leaves nothing.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

/// A cranelift cache store of one file per compiled function.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
    /// Where new entries are written instead of `dir`, if anywhere; read
    /// after `dir`.
    staging: Option<PathBuf>,
}

impl FunctionCache {
    /// The store under `dir` (created when the first entry is written),
    /// writing new entries under `staging` when given.
    pub(crate) fn new(dir: PathBuf, staging: Option<PathBuf>) -> Self {
        Self { dir, staging }
    }
}

/// Where the entry of `key` is kept under `dir`: spread over 256
/// directories by the first byte of its hash, so no directory holds tens
/// of thousands of files.
fn entry_path(dir: &Path, key: &[u8]) -> PathBuf {
    let name = hex::encode(sha2::Sha256::digest(key));
    dir.join(&name[..2]).join(&name[2..])
}

impl wasmtime::CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        let read = |dir: &Path| std::fs::read(entry_path(dir, key)).ok();
        read(&self.dir).or_else(|| read(self.staging.as_deref()?)).map(Cow::Owned)
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        let dir = self.staging.as_deref().unwrap_or(&self.dir);
        let path = entry_path(dir, key);
        let shard = path.parent().unwrap_or(dir);
        super::cache::write_atomically(shard, &path, &value).is_ok()
    }
}

/// The entries under `dir` (as a [`FunctionCache`] lays them out), with
/// their sizes; unreadable ones and partial writes are left out.
pub(crate) fn entries(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut found = Vec::new();
    let Ok(shards) = std::fs::read_dir(dir) else { return found };
    for shard in shards.flatten() {
        let Ok(files) = std::fs::read_dir(shard.path()) else { continue };
        for file in files.flatten() {
            let path = file.path();
            let whole = path.extension().is_none_or(|ext| !ext.to_string_lossy().starts_with("partial-"));
            if let (true, Ok(meta)) = (whole, file.metadata())
                && meta.is_file()
            {
                found.push((path, meta.len()));
            }
        }
    }
    found
}

/// Moves the entries staged under `staging` into `dir`, while `dir`'s
/// size (`held`, in bytes, updated) stays within `bound`: how many were
/// moved, and whether the bound stopped it. Entries `dir` has already are
/// left where they are.
pub(crate) fn promote(staging: &Path, dir: &Path, held: &mut u64, bound: u64) -> (usize, bool) {
    let mut moved = 0;
    for (path, bytes) in entries(staging) {
        let (Some(name), Some(shard)) = (path.file_name(), path.parent().and_then(Path::file_name)) else {
            continue;
        };
        let target = dir.join(shard).join(name);
        if target.exists() {
            continue;
        }
        if held.saturating_add(bytes) > bound {
            return (moved, true);
        }
        // Staging and the shared directory are on one filesystem, so the
        // rename puts each entry in place whole.
        let placed = std::fs::create_dir_all(dir.join(shard)).and_then(|()| std::fs::rename(&path, &target));
        if placed.is_ok() {
            *held += bytes;
            moved += 1;
        }
    }
    (moved, false)
}

#[cfg(test)]
mod tests {
    use wasmtime::CacheStore as _;

    use super::*;

    #[test]
    fn entries_read_back_and_missing_ones_are_misses() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FunctionCache::new(dir.path().join("functions"), None);
        assert!(cache.get(b"key").is_none());
        assert!(cache.insert(b"key", b"compiled".to_vec()));
        assert_eq!(cache.get(b"key").as_deref(), Some(&b"compiled"[..]));
        assert!(cache.get(b"other").is_none());
    }

    #[test]
    fn staged_entries_are_read_but_reach_the_shared_directory_only_when_promoted_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("functions");
        FunctionCache::new(shared.clone(), None).insert(b"old", b"12345".to_vec());
        let staging = dir.path().join("staging");
        let cache = FunctionCache::new(shared.clone(), Some(staging.clone()));
        assert!(cache.insert(b"a", b"aaaa".to_vec()));
        assert!(cache.insert(b"b", b"bbbb".to_vec()));
        assert_eq!(cache.get(b"old").as_deref(), Some(&b"12345"[..]), "the shared entries are read");
        assert_eq!(cache.get(b"a").as_deref(), Some(&b"aaaa"[..]), "and the staged ones");
        assert_eq!(entries(&shared).len(), 1, "nothing staged is shared before promotion");

        // Room for one of the two staged entries only.
        let mut held = 5;
        assert_eq!(promote(&staging, &shared, &mut held, 12), (1, true));
        assert_eq!(held, 9);
        assert_eq!(entries(&shared).len(), 2);
        let mut held = 9;
        assert_eq!(promote(&staging, &shared, &mut held, 100), (1, false), "the other fits once the bound allows it");
        assert_eq!(entries(&shared).len(), 3);
        assert!(entries(&staging).is_empty());
    }
}
