//! [`ToolSchema`]: a tool's JSON Schema, shared, and read from its text
//! only when first looked at where it arrives as text.

use std::borrow::Cow;
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::Value;

/// A tool's JSON Schema: the `input` or `output` of an
/// [`AgentTool`](crate::AgentTool) or an [`LlmTool`](crate::LlmTool).
///
/// It is shared: a session's config, each model call's tools and each
/// proposal hold the same one, and a clone copies a pointer. It reads as
/// the [`Value`] it holds (it derefs to one), and is written as that value.
///
/// Made from JSON text with [`ToolSchema::lazy`], it is parsed when first
/// looked at. An agent component is handed its session's config, every
/// tool's schemas with it, in each decision's request, and most decisions
/// never look at a schema: in a guest, parsing them all up front into
/// `Value`s was most of the work of reading a request. The text is checked
/// to be JSON when the schema is made (a pass that allocates nothing), so
/// a schema that reads at all reads whole.
#[derive(Clone)]
pub struct ToolSchema(Arc<Inner>);

struct Inner {
    /// The JSON text it was made from, if it was.
    text: Option<Box<str>>,
    /// The schema, once read.
    value: OnceLock<Arc<Value>>,
}

impl ToolSchema {
    /// A schema of `value`.
    pub fn new(value: impl Into<Arc<Value>>) -> Self {
        Self(Arc::new(Inner { text: None, value: OnceLock::from(value.into()) }))
    }

    /// Reads a schema from its JSON text now, keeping the text to write it
    /// out again.
    ///
    /// # Errors
    /// The text is not JSON.
    pub fn read(text: String) -> Result<Self, serde_json::Error> {
        let value = serde_json::from_str::<Value>(&text)?;
        Ok(Self(Arc::new(Inner { text: Some(text.into()), value: OnceLock::from(Arc::new(value)) })))
    }

    /// A schema of JSON text checked now and parsed when first looked at.
    ///
    /// # Errors
    /// The text is not JSON, as [`ToolSchema::read`] would find.
    pub fn lazy(text: String) -> Result<Self, serde_json::Error> {
        serde_json::from_str::<Checked>(&text)?;
        Ok(Self(Arc::new(Inner { text: Some(text.into()), value: OnceLock::new() })))
    }

    /// The schema, shared with every clone of this one.
    pub fn shared(&self) -> &Arc<Value> {
        self.0.value.get_or_init(|| {
            // Only a lazy schema gets here (the others are made read), and
            // `lazy` checked its text with the parser `Value` is read with,
            // through the same path (every value by `deserialize_any`): the
            // text parses, and the `Null`s are never taken.
            let text = self.0.text.as_deref().unwrap_or("null");
            Arc::new(serde_json::from_str(text).unwrap_or(Value::Null))
        })
    }

    /// The schema as JSON text: the text it was made from, if it was.
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0.text {
            Some(text) => Cow::Borrowed(text),
            None => Cow::Owned(crate::to_json(&**self.shared())),
        }
    }

    /// Whether the schema has been parsed (a schema made from a value
    /// always has).
    pub fn is_read(&self) -> bool {
        self.0.value.get().is_some()
    }
}

impl Deref for ToolSchema {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.shared()
    }
}

impl From<Value> for ToolSchema {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

impl From<Arc<Value>> for ToolSchema {
    fn from(value: Arc<Value>) -> Self {
        Self::new(value)
    }
}

impl PartialEq for ToolSchema {
    /// Equal when their values are; two of the same text are, unread.
    fn eq(&self, other: &Self) -> bool {
        if Arc::ptr_eq(&self.0, &other.0) {
            return true;
        }
        if let (Some(a), Some(b)) = (&self.0.text, &other.0.text)
            && a == b
        {
            return true;
        }
        **self == **other
    }
}

impl fmt::Debug for ToolSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl Serialize for ToolSchema {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ToolSchema {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::new)
    }
}

/// Any JSON value on the wire, as the value it holds.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for ToolSchema {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        Value::schema_name()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<Value>()
    }
}

/// JSON read and thrown away, through the path a [`Value`] is read by, so
/// that it fails where reading a `Value` would. (`serde::de::IgnoredAny`
/// takes the parser's quicker skipping path, which lets through numbers a
/// `Value` cannot hold.)
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_key::<Checked>()?.is_some() {
            map.next_value::<Checked>()?;
        }
        Ok(Checked)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_lazy_schema_is_read_when_looked_at_and_reads_as_its_text() {
        let text = r#"{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}"#;
        let schema = ToolSchema::lazy(text.to_owned()).unwrap();
        let clone = schema.clone();
        assert!(!schema.is_read());
        assert_eq!(schema.text(), text);
        assert_eq!(schema, ToolSchema::lazy(text.to_owned()).unwrap());
        assert!(!schema.is_read(), "equal texts compare unread");
        assert_eq!(schema["required"], json!(["a"]));
        assert!(clone.is_read(), "a clone shares the read");
        assert_eq!(*schema, serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(schema, ToolSchema::new(serde_json::from_str::<Value>(text).unwrap()));
        assert_eq!(serde_json::to_string(&schema).unwrap(), text);
    }

    #[test]
    fn what_a_value_cannot_hold_is_refused_up_front() {
        for text in ["{", "[1,]", r#"{"a" 1}"#, "1e400", "-1e999", r#""\ud800x""#, r#""\q""#, "nul", "{} {}"] {
            let read = ToolSchema::read(text.to_owned()).map(|_| ()).map_err(|e| e.to_string());
            let lazy = ToolSchema::lazy(text.to_owned()).map(|_| ()).map_err(|e| e.to_string());
            assert!(read.is_err(), "{text}");
            assert_eq!(lazy, read, "{text}");
        }
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(ToolSchema::read(deep.clone()).is_err());
        assert!(ToolSchema::lazy(deep).is_err());
        for text in ["true", "1.5e300", "-0", r#"{"a":{"b":[null,"\u00e9",18446744073709551615]}}"#] {
            let lazy = ToolSchema::lazy(text.to_owned()).unwrap();
            assert_eq!(*lazy, serde_json::from_str::<Value>(text).unwrap(), "{text}");
        }
    }

    #[test]
    fn a_schema_made_from_a_value_is_written_from_it() {
        let schema = ToolSchema::from(json!({"type": "string"}));
        assert!(schema.is_read());
        assert_eq!(schema.text(), r#"{"type":"string"}"#);
        let read: ToolSchema = serde_json::from_str(r#"{"type":"string"}"#).unwrap();
        assert_eq!(read, schema);
        assert_ne!(read, ToolSchema::from(json!({"type": "number"})));
    }
}
