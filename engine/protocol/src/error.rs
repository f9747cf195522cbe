//! The one error type of the protocol crate: what is wrong, and where.

use std::fmt;

/// A protocol value that could not be read: bad JSON, a missing or
/// wrongly-typed field, an unknown union tag.
///
/// `field` is the path of the offending field from the top of the value
/// (`actions[0].arguments`), so an HTTP API can answer `{error, field}` and a
/// worker author can find the mistake without reading the whole payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError {
    field: String,
    message: String,
}

impl ProtocolError {
    /// An error about the value as a whole (no field path yet).
    pub fn new(message: impl Into<String>) -> Self {
        Self { field: String::new(), message: message.into() }
    }

    /// The path of the offending field (`actions[0].arguments`), empty when
    /// the error is about the whole value.
    pub fn field(&self) -> Option<&str> {
        (!self.field.is_empty()).then_some(self.field.as_str())
    }

    /// What is wrong, without the field path.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Places this error inside the named field of an enclosing value.
    #[must_use]
    pub fn in_field(mut self, name: &str) -> Self {
        self.field = join_path(name, &self.field);
        self
    }

    /// Places this error inside the element `index` of an enclosing list.
    #[must_use]
    pub fn in_index(mut self, index: usize) -> Self {
        let inner = std::mem::take(&mut self.field);
        self.field = join_path(&format!("[{index}]"), &inner);
        self
    }

    /// Builds an error from what `serde_path_to_error` reports: the path at
    /// which deserialization failed and serde's message. Messages produced by
    /// a nested tagged-union deserializer already start with the inner path
    /// (`arguments: …`); that path is joined onto the outer one.
    pub(crate) fn from_serde(path: &str, message: &str) -> Self {
        let outer = if path == "." { "" } else { path };
        // `?` is serde_path_to_error's segment for an object key it could not
        // read (`{'a': 1}`, `{"a": 1,}`): it names no field, so the error
        // belongs to the enclosing object.
        let outer = match outer.strip_suffix(".?") {
            Some(object) => object,
            None if outer == "?" => "",
            None => outer,
        };
        match split_nested_path(message) {
            Some((inner, rest)) => Self { field: join_path(outer, inner), message: rest.to_owned() },
            None => Self { field: outer.to_owned(), message: message.to_owned() },
        }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() { f.write_str(&self.message) } else { write!(f, "{}: {}", self.field, self.message) }
    }
}

impl std::error::Error for ProtocolError {}

/// Joins two field paths: `a` + `b` → `a.b`, `a` + `[0].b` → `a[0].b`.
fn join_path(outer: &str, inner: &str) -> String {
    match (outer.is_empty(), inner.is_empty()) {
        (true, _) => inner.to_owned(),
        (_, true) => outer.to_owned(),
        _ if inner.starts_with('[') => format!("{outer}{inner}"),
        _ => format!("{outer}.{inner}"),
    }
}

/// Splits `path: message` when the part before `: ` looks like a field path
/// (identifier characters, dots and `[n]` only). serde's own messages
/// (`invalid type: …`, `missing field …`) contain spaces there and never
/// match.
fn split_nested_path(message: &str) -> Option<(&str, &str)> {
    let (head, rest) = message.split_once(": ")?;
    let is_path =
        !head.is_empty() && head.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '[' | ']'));
    is_path.then_some((head, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_join_like_field_accessors() {
        let e = ProtocolError::new("bad").in_field("arguments").in_index(2).in_field("actions");
        assert_eq!(e.field(), Some("actions[2].arguments"));
        assert_eq!(e.to_string(), "actions[2].arguments: bad");
    }

    #[test]
    fn nested_serde_paths_are_joined() {
        let e = ProtocolError::from_serde("actions[0]", "arguments: invalid type: null");
        assert_eq!(e.field(), Some("actions[0].arguments"));
        assert_eq!(e.message(), "invalid type: null");
        let e = ProtocolError::from_serde(".", "missing field `model`");
        assert_eq!(e.field(), None);
        let e = ProtocolError::from_serde("messages", "[3].role: unknown variant");
        assert_eq!(e.field(), Some("messages[3].role"));
    }

    #[test]
    fn unreadable_keys_blame_their_object() {
        let e = ProtocolError::from_serde("agent.?", "key must be a string");
        assert_eq!(e.field(), Some("agent"));
        let e = ProtocolError::from_serde("[1].?", "key must be a string");
        assert_eq!(e.field(), Some("[1]"));
        let e = ProtocolError::from_serde("?", "key must be a string");
        assert_eq!(e.field(), None);
    }
}
