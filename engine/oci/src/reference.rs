//! References to artifacts in a registry: `REGISTRY/REPOSITORY[:TAG][@DIGEST]`.
//!
//! The grammar is the distribution reference grammar, with one rule of our
//! own: the registry is always named. A bare `org/agent` would mean Docker
//! Hub to docker and something else to other tools; an operator's
//! allow-list is clearer when every reference says where it points.

use std::fmt;

use crate::OciError;

/// The tag a reference without a tag or digest names, as docker, oras
/// and wkg read it.
pub const DEFAULT_TAG: &str = "latest";

/// The longest repository name the distribution spec allows.
const MAX_REPOSITORY: usize = 255;

/// The longest tag.
const MAX_TAG: usize = 128;

/// A parsed reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// The registry's host, with its port when it has one
    /// (`ghcr.io`, `127.0.0.1:5000`).
    pub registry: String,
    /// The repository (`org/agent`).
    pub repository: String,
    /// The tag, when the reference names one.
    pub tag: Option<String>,
    /// The manifest digest (`sha256:<hex>`), when the reference is pinned.
    pub digest: Option<String>,
}

impl Reference {
    /// Parses `text`; a reference with neither tag nor digest names the
    /// tag `latest`.
    ///
    /// # Errors
    /// [`OciError::Reference`] naming what is wrong.
    pub fn parse(text: &str) -> Result<Self, OciError> {
        let bad = |message: String| OciError::Reference { reference: text.to_owned(), message };
        if text.len() > 1024 {
            return Err(bad(format!("{} bytes long, more than 1024", text.len())));
        }
        let (rest, digest) = match text.split_once('@') {
            Some((rest, digest)) => (rest, Some(checked_digest(digest).map_err(bad)?)),
            None => (text, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .filter(|(registry, _)| registry.contains(['.', ':']) || *registry == "localhost")
            .ok_or_else(|| {
                bad("the registry is not named: write REGISTRY/REPOSITORY[:TAG][@sha256:…], e.g. \
                     ghcr.io/org/agent:1.0"
                    .to_owned())
            })?;
        checked_registry(registry).map_err(bad)?;
        // A colon after the last slash starts the tag; one before it is
        // the registry's port, which is already split off.
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, Some(tag)),
            _ => (path, None),
        };
        checked_repository(repository).map_err(bad)?;
        if let Some(tag) = tag {
            checked_tag(tag).map_err(bad)?;
        }
        let tag = match (tag, &digest) {
            (Some(tag), _) => Some(tag.to_owned()),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_TAG.to_owned()),
        };
        Ok(Self { registry: registry.to_owned(), repository: repository.to_owned(), tag, digest })
    }

    /// What the registry's manifest endpoint is asked for: the digest when
    /// the reference is pinned, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or(DEFAULT_TAG)
    }

    /// The same artifact pinned to `digest`, without its tag:
    /// `REGISTRY/REPOSITORY@sha256:…`.
    pub fn pinned(&self, digest: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_owned()),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Reference {
    type Err = OciError;

    fn from_str(text: &str) -> Result<Self, OciError> {
        Self::parse(text)
    }
}

/// `sha256:<64 lowercase hex>`: the one algorithm registries and this
/// engine share; others are refused rather than trusted unchecked.
pub(crate) fn checked_digest(digest: &str) -> Result<String, String> {
    let Some((algorithm, hex)) = digest.split_once(':') else {
        return Err(format!("`{}` is not a digest (sha256:<hex>)", digest.escape_debug()));
    };
    if algorithm != "sha256" {
        return Err(format!("digest algorithm `{}` is not supported; only sha256 is", algorithm.escape_debug()));
    }
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("`{}` is not a sha256 digest (64 lowercase hex digits)", digest.escape_debug()));
    }
    Ok(digest.to_owned())
}

fn checked_registry(registry: &str) -> Result<(), String> {
    let (host, port) = match registry.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    if let Some(port) = port
        && port.parse::<u16>().is_err()
    {
        return Err(format!("`{}` is not a port", port.escape_debug()));
    }
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if host_ok { Ok(()) } else { Err(format!("`{}` is not a registry host", registry.escape_debug())) }
}

fn checked_repository(repository: &str) -> Result<(), String> {
    if repository.is_empty() || repository.len() > MAX_REPOSITORY {
        return Err(format!("the repository name is 1 to {MAX_REPOSITORY} characters, not {}", repository.len()));
    }
    // Lowercase alphanumerics, separated within a component by `.`, `_`,
    // `__` or dashes.
    let component_ok = |c: &str| {
        let bytes = c.as_bytes();
        !c.is_empty()
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
            && !c.contains("..")
            && !c.contains("___")
    };
    if repository.split('/').all(component_ok) {
        Ok(())
    } else {
        Err(format!(
            "`{}` is not a repository name (lowercase letters, digits and `._-`, components separated by `/`)",
            repository.escape_debug()
        ))
    }
}

fn checked_tag(tag: &str) -> Result<(), String> {
    let bytes = tag.as_bytes();
    let ok = !tag.is_empty()
        && tag.len() <= MAX_TAG
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("`{}` is not a tag (up to {MAX_TAG} letters, digits and `_.-`)", tag.escape_debug()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn references_read_as_registries_write_them() {
        let r = Reference::parse("127.0.0.1:5000/team/agent:1.0").unwrap();
        assert_eq!(
            (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
            ("127.0.0.1:5000", "team/agent", Some("1.0"))
        );
        assert_eq!(r.manifest_ref(), "1.0");
        let pinned = format!("ghcr.io/org/agent@sha256:{HEX}");
        let r = Reference::parse(&pinned).unwrap();
        assert_eq!((r.tag.as_deref(), r.manifest_ref()), (None, format!("sha256:{HEX}").as_str()));
        assert_eq!(r.to_string(), pinned);
        let r = Reference::parse("localhost/agent").unwrap();
        assert_eq!(r.tag.as_deref(), Some("latest"));
        let both = Reference::parse(&format!("ghcr.io/a:v1@sha256:{HEX}")).unwrap();
        assert_eq!(both.manifest_ref(), format!("sha256:{HEX}"), "a digest wins over the tag");
        assert_eq!(both.pinned(&format!("sha256:{HEX}")).to_string(), format!("ghcr.io/a@sha256:{HEX}"));
    }

    #[test]
    fn bad_references_say_what_is_wrong() {
        for (text, says) in [
            ("org/agent:1", "registry is not named"),
            ("ghcr.io/Org/agent", "not a repository name"),
            ("ghcr.io/org//agent", "not a repository name"),
            ("ghcr.io/agent:bad tag", "not a tag"),
            ("ghcr.io/agent@md5:00", "only sha256"),
            ("ghcr.io/agent@sha256:abc", "64 lowercase hex"),
            ("host:99999/agent", "not a port"),
            ("ghcr.io/", "1 to 255"),
        ] {
            let error = Reference::parse(text).unwrap_err().to_string();
            assert!(error.contains(says) && error.contains(text), "{text}: {error}");
        }
    }
}
