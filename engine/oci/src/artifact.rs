//! The CNCF Wasm OCI artifact: an image manifest whose config has the
//! media type `application/vnd.wasm.config.v0+json` and whose one layer
//! is the `application/wasm` bytes, as `wkg oci push`, `oras` and
//! wasmCloud write it.
//!
//! The few manifest fields read and written are typed here rather than
//! with the `oci-spec` crate, which brings builders, getters and a regex
//! engine for the two structs this needs.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An OCI image manifest.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index.
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// Docker's image manifest, which some registries answer for OCI ones.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
/// Docker's manifest list: its image index.
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// The Wasm artifact's config.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The Wasm artifact's layer.
pub const WASM_LAYER: &str = "application/wasm";
/// The layer media type the older `wasm-to-oci` tool writes.
pub const LEGACY_WASM_LAYER: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// What the manifest endpoint is asked to answer with.
pub const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, \
                          application/vnd.docker.distribution.manifest.v2+json, \
                          application/vnd.docker.distribution.manifest.list.v2+json";

/// A content descriptor: what a manifest says of a blob or a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:<hex>`.
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// An index entry's platform.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
}

/// An index entry's platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    /// `wasm` for a Wasm artifact, `amd64` and so on for images.
    #[serde(default)]
    pub architecture: String,
    /// `wasip2` for a component, `wasip1` for a module, `linux`, ….
    #[serde(default)]
    pub os: String,
}

/// A manifest or an index, as read: the fields of both, each optional,
/// so one parse tells which it is.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Document {
    /// Its own media type, when it names it.
    #[serde(default)]
    pub media_type: Option<String>,
    /// A manifest's config.
    #[serde(default)]
    pub config: Option<Descriptor>,
    /// A manifest's layers.
    #[serde(default)]
    pub layers: Option<Vec<Descriptor>>,
    /// An index's manifests.
    #[serde(default)]
    pub manifests: Option<Vec<Descriptor>>,
}

impl Document {
    /// Whether it is an index: it says so, or the registry did, or it
    /// lists manifests and no layers.
    pub fn is_index(&self, content_type: &str) -> bool {
        let media = self.media_type.as_deref().unwrap_or(content_type);
        media == INDEX || media == DOCKER_LIST || (self.manifests.is_some() && self.layers.is_none())
    }
}

/// The manifest of a Wasm artifact with `config` and `layer`.
pub fn manifest(config: &Descriptor, layer: &Descriptor, created: &str) -> Value {
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config,
        "layers": [layer],
        "annotations": { "org.opencontainers.image.created": created },
    })
}

/// The artifact's config for `wasm` (whose layer is `layer_digest`): the
/// fields the Wasm OCI artifact layout gives it. A component is `wasip2`,
/// with the names of what it imports and exports; a core module `wasip1`.
pub fn config(wasm: &[u8], layer_digest: &str, created: &str) -> Value {
    let mut config = serde_json::json!({
        "created": created,
        "architecture": "wasm",
        "layerDigests": [layer_digest],
    });
    if wasmparser::Parser::is_component(wasm) {
        let (imports, exports) = component_names(wasm);
        config["os"] = "wasip2".into();
        config["component"] = serde_json::json!({ "imports": imports, "exports": exports });
    } else {
        config["os"] = "wasip1".into();
    }
    config
}

/// The names a component imports and exports at its top level
/// (`wasi:cli/environment@0.2.0`, `subs:agent/agent@…`). What does not
/// parse is left out: the upload's own checks judge the bytes.
fn component_names(wasm: &[u8]) -> (Vec<String>, Vec<String>) {
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { break };
        match payload {
            wasmparser::Payload::Version { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentImportSection(section) if depth == 1 => {
                imports.extend(section.into_iter().filter_map(Result::ok).map(|i| i.name.name.to_owned()));
            }
            wasmparser::Payload::ComponentExportSection(section) if depth == 1 => {
                exports.extend(section.into_iter().filter_map(Result::ok).map(|e| e.name.name.to_owned()));
            }
            _ => {}
        }
    }
    (imports, exports)
}

/// Now as RFC 3339 (`2026-01-02T03:04:05Z`), the form OCI's `created`
/// fields take.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// `secs` since the epoch as RFC 3339, in UTC. The civil date from a day
/// count is Howard Hinnant's `civil_from_days`; no date crate is needed
/// for one timestamp.
fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_764_903_845), "2025-12-05T03:04:05Z");
    }

    #[test]
    fn a_module_is_wasip1_and_a_component_wasip2_with_its_names() {
        let module = b"\0asm\x01\0\0\0";
        assert_eq!(config(module, "sha256:x", "t")["os"], "wasip1");
        // An empty component: no imports, no exports.
        let component = b"\0asm\x0d\0\x01\0";
        let c = config(component, "sha256:x", "t");
        assert_eq!(c["os"], "wasip2");
        assert_eq!(c["architecture"], "wasm");
        assert_eq!(c["layerDigests"][0], "sha256:x");
        assert_eq!(c["component"]["imports"], serde_json::json!([]));
    }
}
