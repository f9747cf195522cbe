//! Pulled artifacts kept on disk by digest, so that running the same
//! reference again needs no registry.
//!
//! - `blobs/sha256/<hex>`: a wasm layer, named by its digest.
//! - `manifests/sha256/<hex>`: the layer digest of a manifest.
//! - `tags/<hex>`: the manifest digest a tag resolved to, named by the
//!   sha256 of `REGISTRY/REPOSITORY:TAG` (no escaping of ports or
//!   slashes into file names).
//!
//! A tag is resolved once, when first pulled, and then read from here, as
//! a server pins a version to the digest it pulled; pulling again
//! ([`Cache::forget_tag`]) resolves it anew. Every read checks the layer
//! against its digest, so a damaged file is pulled again, never run.
//! Files are written to a temporary name and renamed, so a crash leaves
//! no half-written entry.

use std::io;
use std::path::{Path, PathBuf};

use crate::{Pulled, Reference, sha256};

/// The cache in one directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// The cache kept in `dir` (made when first written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The artifact `reference` names, when it was pulled before: the
    /// wasm bytes and the manifest digest.
    pub fn get(&self, reference: &Reference) -> Option<(Vec<u8>, String)> {
        let manifest = match &reference.digest {
            Some(digest) => digest.clone(),
            None => read_text(&self.tag_path(reference)?)?,
        };
        let layer = read_text(&self.digest_path("manifests", &manifest)?)?;
        let wasm = std::fs::read(self.digest_path("blobs", &layer)?).ok()?;
        (sha256(&wasm) == layer).then_some((wasm, manifest))
    }

    /// Keeps what was pulled for `reference`.
    ///
    /// # Errors
    /// A file of the cache could not be written.
    pub fn put(&self, reference: &Reference, pulled: &Pulled) -> io::Result<()> {
        let bad = || io::Error::new(io::ErrorKind::InvalidInput, "not a sha256 digest");
        write_atomically(&self.digest_path("blobs", &pulled.layer_digest).ok_or_else(bad)?, &pulled.wasm)?;
        let manifest = self.digest_path("manifests", &pulled.manifest_digest).ok_or_else(bad)?;
        write_atomically(&manifest, pulled.layer_digest.as_bytes())?;
        if let Some(tag) = self.tag_path(reference) {
            write_atomically(&tag, pulled.manifest_digest.as_bytes())?;
        }
        Ok(())
    }

    /// Forgets what `reference`'s tag resolved to, so the next pull asks
    /// the registry again.
    pub fn forget_tag(&self, reference: &Reference) {
        if let Some(path) = self.tag_path(reference) {
            let _ = std::fs::remove_file(path);
        }
    }

    fn tag_path(&self, reference: &Reference) -> Option<PathBuf> {
        let tag = reference.tag.as_ref().filter(|_| reference.digest.is_none())?;
        let name = format!("{}/{}:{tag}", reference.registry, reference.repository);
        let hex = sha256(name.as_bytes());
        Some(self.dir.join("tags").join(hex.trim_start_matches("sha256:")))
    }

    fn digest_path(&self, kind: &str, digest: &str) -> Option<PathBuf> {
        let hex = crate::reference::checked_digest(digest).ok()?;
        Some(self.dir.join(kind).join("sha256").join(hex.trim_start_matches("sha256:")))
    }
}

fn read_text(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    crate::reference::checked_digest(text.trim()).ok()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let temp =
        dir.join(format!(".{}.{}", path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"), std::process::id()));
    std::fs::write(&temp, bytes)?;
    std::fs::rename(&temp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pulled_tag_and_its_digest_read_back_and_a_damaged_layer_does_not() {
        let dir = tempdir();
        let cache = Cache::new(&dir);
        let tagged = Reference::parse("127.0.0.1:5000/team/agent:1").unwrap();
        let wasm = b"\0asm\x0d\0\x01\0".to_vec();
        let pulled = Pulled { manifest_digest: sha256(b"manifest"), layer_digest: sha256(&wasm), wasm: wasm.clone() };
        assert!(cache.get(&tagged).is_none());
        cache.put(&tagged, &pulled).unwrap();
        assert_eq!(cache.get(&tagged), Some((wasm.clone(), pulled.manifest_digest.clone())));
        let pinned = tagged.pinned(&pulled.manifest_digest);
        assert_eq!(cache.get(&pinned).map(|(w, _)| w), Some(wasm));
        cache.forget_tag(&tagged);
        assert!(cache.get(&tagged).is_none(), "the tag is resolved again");
        assert!(cache.get(&pinned).is_some(), "the digest stays");
        std::fs::write(dir.join("blobs/sha256").join(pulled.layer_digest.trim_start_matches("sha256:")), b"evil")
            .unwrap();
        assert!(cache.get(&pinned).is_none(), "a damaged layer is not run");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("subs-oci-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }
}
