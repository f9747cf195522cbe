//! Reading and writing protocol values as JSON, with errors that name the
//! field.
//!
//! Two wire rules need more than serde's derives:
//!
//! - Unions are tagged by a field (`"type"`, or `"status"` for
//!   [`ToolInput`](crate::ToolInput)). serde's internally tagged enums buffer
//!   the value and lose the field path of any error inside a variant, so an
//!   error would read `actions[0]: invalid type` instead of
//!   `actions[0].arguments: invalid type`. [`tagged`] reads the tag itself and
//!   keeps the path.
//! - Numbers are JavaScript numbers. A float field holding a whole number is
//!   written without a fraction (`30`, not `30.0`), as `JSON.stringify` does,
//!   so values written by a TypeScript or Python worker survive a round trip
//!   through the engine byte for byte.
//! - Objects are objects. serde's derived structs also accept a JSON array
//!   of their fields in declaration order, so `{"agent": ["m", "be nice"]}`
//!   would read as a config with a system prompt and a worker's `[]` as an
//!   empty decision. [`Objects`] makes every struct insist on an object.

use serde::de::{
    DeserializeOwned, DeserializeSeed, EnumAccess, Error as _, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ProtocolError;

/// Parses a protocol value from JSON text. On error, the result names the
/// offending field (`actions[0].name`).
///
/// ```
/// use subs_protocol::{from_json, DecisionResponse};
///
/// let err = from_json::<DecisionResponse>(r#"{"actions":[{"type":"tool.call","name":5}]}"#)
///     .unwrap_err();
/// assert_eq!(err.field(), Some("actions[0].name"));
/// ```
pub fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, ProtocolError> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = serde_path_to_error::deserialize(Objects(&mut de))
        .map_err(|e| ProtocolError::from_serde(&e.path().to_string(), &strip_position(e.inner())))?;
    de.end().map_err(|e| ProtocolError::new(e.to_string()))?;
    Ok(value)
}

/// Parses a protocol value from JSON bytes; see [`from_json`].
pub fn from_json_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ProtocolError> {
    let text = std::str::from_utf8(bytes).map_err(|e| ProtocolError::new(format!("body is not UTF-8: {e}")))?;
    from_json(text)
}

/// Converts an already-parsed JSON value into a protocol value; errors name
/// the field like [`from_json`].
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, ProtocolError> {
    serde_path_to_error::deserialize(Objects(value))
        .map_err(|e| ProtocolError::from_serde(&e.path().to_string(), &strip_position(e.inner())))
}

/// Writes a protocol value as compact JSON text.
pub fn to_json<T: Serialize>(value: &T) -> String {
    // Protocol types serialize infallibly: maps have string keys and the
    // number serializers reject nothing serde_json cannot write.
    serde_json::to_string(value).unwrap_or_else(|e| unreachable_serialize(e))
}

/// Converts a protocol value into a JSON value.
pub fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| unreachable_serialize(e))
}

#[cold]
fn unreachable_serialize(e: serde_json::Error) -> ! {
    // Every protocol type is a tree of strings, numbers, bools, lists,
    // string-keyed maps and `serde_json::Value`s, which serde_json always
    // writes. Reaching this is a bug in this crate, not bad input.
    panic!("protocol value failed to serialize: {e}")
}

/// serde_json appends ` at line L column C` to its messages; the field path
/// says more than the position, so drop it.
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&suffix) {
        Some(stripped) if e.line() != 0 => stripped.to_owned(),
        _ => text,
    }
}

/// Reads a union tagged by `tag_field`: returns the tag and the whole value
/// (tag included, ignored by the variant's own fields).
///
/// Errors for a missing tag, a tag that is not a string, or a tag not in
/// `tags` name the tag field.
pub(crate) fn tagged<'de, D: Deserializer<'de>>(
    deserializer: D,
    tag_field: &'static str,
    tags: &'static [&'static str],
) -> Result<(String, Value), D::Error> {
    let value = Value::deserialize(deserializer)?;
    let Value::Object(map) = &value else {
        return Err(D::Error::custom(format_args!(
            "invalid type: {}, expected an object with a `{tag_field}` field",
            value_kind(&value)
        )));
    };
    let tag = match map.get(tag_field) {
        Some(Value::String(tag)) => tag.clone(),
        Some(other) => {
            return Err(D::Error::custom(format_args!(
                "{tag_field}: invalid type: {}, expected a string",
                value_kind(other)
            )));
        }
        None => return Err(D::Error::custom(format_args!("missing field `{tag_field}`"))),
    };
    if !tags.contains(&tag.as_str()) {
        return Err(D::Error::custom(format_args!(
            "{tag_field}: unknown variant `{tag}`, expected one of {}",
            tags.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok((tag, value))
}

/// Reads the fields of one union variant from its value, reporting errors
/// as `inner.path: message` so the outer reader can join the paths.
pub(crate) fn variant<'de, T: DeserializeOwned, D: Deserializer<'de>>(value: Value) -> Result<T, D::Error> {
    serde_path_to_error::deserialize(Objects(value)).map_err(|e| {
        let err = ProtocolError::from_serde(&e.path().to_string(), &e.into_inner().to_string());
        D::Error::custom(err)
    })
}

/// What kind of JSON value this is, as an error message puts it
/// (`an object`, `a string`, `null`).
pub fn value_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Declares a union tagged by a field, each tag written once: the enum
/// (serde's `Serialize` and, with feature `schema`, schemars' `JsonSchema`,
/// from the tag as each variant's `rename`), its `Deserialize`, and
/// `kind()`, the variant's tag.
///
/// ```text
/// tagged_union! {
///     /// Docs.
///     #[derive(Debug, Clone, PartialEq)]
///     pub enum Trigger in "type" {
///         /// A unit variant.
///         "session.start" => SessionStart,
///         /// A variant holding a struct.
///         "tool.execute" => ToolExecute(ToolExecute),
///         /// A variant with fields.
///         "text" => Text { /** The text. */ text: String },
///     }
/// }
/// ```
///
/// The reader takes the tag out before a variant's fields are read, so a
/// payload that refuses unknown fields (client inputs) still reads, and
/// errors keep the path into the variant ([`tagged`], [`variant`]).
macro_rules! tagged_union {
    (
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident in $tag_field:literal {
            $(
                $(#[$vmeta:meta])*
                $tag:literal => $variant:ident
                    $( ( $payload:ty ) )?
                    $( { $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)? } )?
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(::serde::Serialize)]
        #[cfg_attr(feature = "schema", derive(::schemars::JsonSchema))]
        #[serde(tag = $tag_field)]
        $vis enum $ty {
            $(
                $(#[$vmeta])*
                #[serde(rename = $tag)]
                $variant $( ($payload) )? $( { $( $(#[$fmeta])* $field: $fty ),* } )?,
            )+
        }

        impl $ty {
            /// The variant's tag as it is on the wire, for logs, metrics
            /// and errors.
            pub fn kind(&self) -> &'static str {
                match self {
                    $( Self::$variant { .. } => $tag, )+
                }
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                const TAGS: &[&str] = &[$($tag),+];
                let (tag, mut value) = $crate::json::tagged(deserializer, $tag_field, TAGS)?;
                if let ::serde_json::Value::Object(fields) = &mut value {
                    fields.remove($tag_field);
                }
                #[allow(unused_variables)]
                let value = value;
                Ok(match tag.as_str() {
                    $(
                        $tag => $crate::json::tagged_union!(
                            @arm $variant, value, D;
                            $( ($payload) )?;
                            $( { $( $field : $fty ),* } )?
                        ),
                    )+
                    _ => unreachable!("tag checked against TAGS"),
                })
            }
        }
    };
    (@arm $variant:ident, $value:ident, $d:ident; ;) => { Self::$variant };
    (@arm $variant:ident, $value:ident, $d:ident; ($payload:ty);) => {
        Self::$variant($crate::json::variant::<$payload, $d>($value)?)
    };
    (@arm $variant:ident, $value:ident, $d:ident; ; { $( $field:ident : $fty:ty ),* }) => {{
        #[derive(::serde::Deserialize)]
        struct Fields {
            $( $field: $fty ),*
        }
        let fields = $crate::json::variant::<Fields, $d>($value)?;
        Self::$variant { $( $field: fields.$field ),* }
    }};
}
pub(crate) use tagged_union;

/// Serializes an `f64` the way JavaScript prints numbers: whole numbers
/// without a fraction. Non-finite numbers have no JSON form and are refused.
pub(crate) fn number<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;
    if !value.is_finite() {
        return Err(serde::ser::Error::custom(format_args!("{value} is not a JSON number")));
    }
    if value.fract() == 0.0 && value.abs() <= MAX_SAFE_INTEGER && !(*value == 0.0 && value.is_sign_negative()) {
        #[allow(clippy::cast_possible_truncation)]
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

/// [`number`] for optional fields.
#[allow(clippy::ref_option)]
pub(crate) fn opt_number<S: Serializer>(value: &Option<f64>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(v) => number(v, serializer),
        None => serializer.serialize_none(),
    }
}

/// A deserializer that reads structs only from JSON objects: it turns
/// `deserialize_struct` into `deserialize_map`, which both serde_json
/// deserializers answer only for `{…}`, and wraps everything it hands on
/// (visitors, seeds, nested accessors) so the rule holds at every depth.
/// Everything else passes through unchanged.
pub(crate) struct Objects<T>(pub(crate) T);

macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*)),+ $(,)?) => {
        $(fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, Self::Error> {
            self.0.$method($($arg,)* Objects(visitor))
        })+
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Objects<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.deserialize_map(Objects(visitor))
    }

    forward_deserialize!(
        deserialize_any(),
        deserialize_bool(),
        deserialize_i8(),
        deserialize_i16(),
        deserialize_i32(),
        deserialize_i64(),
        deserialize_i128(),
        deserialize_u8(),
        deserialize_u16(),
        deserialize_u32(),
        deserialize_u64(),
        deserialize_u128(),
        deserialize_f32(),
        deserialize_f64(),
        deserialize_char(),
        deserialize_str(),
        deserialize_string(),
        deserialize_bytes(),
        deserialize_byte_buf(),
        deserialize_option(),
        deserialize_unit(),
        deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str),
        deserialize_seq(),
        deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_map(),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_identifier(),
        deserialize_ignored_any(),
    );

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),+ $(,)?) => {
        $(fn $method<E: serde::de::Error>(self, v: $ty) -> Result<Self::Value, E> {
            self.0.$method(v)
        })+
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Objects<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.expecting(f)
    }

    forward_visit!(
        visit_bool(bool),
        visit_i8(i8),
        visit_i16(i16),
        visit_i32(i32),
        visit_i64(i64),
        visit_i128(i128),
        visit_u8(u8),
        visit_u16(u16),
        visit_u32(u32),
        visit_u64(u64),
        visit_u128(u128),
        visit_f32(f32),
        visit_f64(f64),
        visit_char(char),
        visit_str(&str),
        visit_borrowed_str(&'de str),
        visit_string(String),
        visit_bytes(&[u8]),
        visit_borrowed_bytes(&'de [u8]),
        visit_byte_buf(Vec<u8>),
    );

    fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.visit_some(Objects(deserializer))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.visit_newtype_struct(Objects(deserializer))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(Objects(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.0.visit_map(Objects(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.0.visit_enum(Objects(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Objects<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(Objects(deserializer))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Objects<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Self::Error> {
        self.0.next_element_seed(Objects(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Objects<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Self::Error> {
        self.0.next_key_seed(Objects(seed))
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Self::Error> {
        self.0.next_value_seed(Objects(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Objects<A> {
    type Error = A::Error;
    type Variant = Objects<A::Variant>;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self::Variant), Self::Error> {
        let (value, variant) = self.0.variant_seed(Objects(seed))?;
        Ok((value, Objects(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Objects<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), Self::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Self::Error> {
        self.0.newtype_variant_seed(Objects(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, Self::Error> {
        self.0.tuple_variant(len, Objects(visitor))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.struct_variant(fields, Objects(visitor))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct N {
        #[serde(serialize_with = "number")]
        n: f64,
    }

    #[test]
    fn whole_floats_print_like_javascript() {
        assert_eq!(to_json(&N { n: 30.0 }), r#"{"n":30}"#);
        assert_eq!(to_json(&N { n: 0.25 }), r#"{"n":0.25}"#);
        assert_eq!(to_json(&N { n: -2.0 }), r#"{"n":-2}"#);
        assert_eq!(to_json(&N { n: 1e300 }), r#"{"n":1e+300}"#);
    }

    #[test]
    fn structs_are_objects_not_arrays() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct S {
            a: Option<u32>,
        }
        let err = from_json::<S>("[7]").unwrap_err();
        assert!(err.message().contains("invalid type: sequence"), "{err}");
        let err = from_json::<Vec<S>>(r#"[{"a":1},[2]]"#).unwrap_err();
        assert_eq!(err.field(), Some("[1]"), "{err}");
        let err = from_value::<S>(serde_json::json!([1])).unwrap_err();
        assert!(err.message().contains("invalid type: sequence"), "{err}");
        assert_eq!(from_json::<S>(r#"{"a":1}"#).unwrap().a, Some(1));
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        let err = from_json::<Value>("{} x").unwrap_err();
        assert!(err.message().contains("trailing characters"), "{err}");
    }
}
