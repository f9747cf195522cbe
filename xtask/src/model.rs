//! The schema document read into the few shapes the wire types have, for
//! the SDK generators: string enums, structs, unions tagged by a field,
//! and aliases of a choice of types (`Content`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A field's or an alias's type, `null` aside (see [`Field::nullable`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// A string.
    Str,
    /// An integer (unsigned 32-bit on this wire).
    Int,
    /// A float.
    Num,
    /// A boolean.
    Bool,
    /// Any JSON value.
    Json,
    /// A type of the document, by name.
    Ref(String),
    /// A list.
    Array(Box<Ty>),
    /// An object with string keys.
    Map(Box<Ty>),
    /// One of several types.
    AnyOf(Vec<Ty>),
}

/// A field of a struct or of a union's variant.
#[derive(Debug, Clone)]
pub struct Field {
    /// The JSON name.
    pub name: String,
    /// Its type.
    pub ty: Ty,
    /// Whether `null` is a value of it.
    pub nullable: bool,
    /// Whether it is always present.
    pub required: bool,
    /// Its description.
    pub doc: Option<String>,
}

/// How a union's variant holds its fields.
#[derive(Debug, Clone)]
pub enum Payload {
    /// A struct of the document, which only this variant uses: the
    /// struct is the variant (its tag is written in it).
    Own(String),
    /// A struct of the document that several variants share (`CallError`
    /// for `tool.error` and `llm.error`).
    Shared(String),
    /// Fields written in the variant itself.
    Inline(Vec<Field>),
}

/// One variant of a tagged union.
#[derive(Debug, Clone)]
pub struct Variant {
    /// The tag's value.
    pub tag: String,
    /// The type name the SDKs give it: the struct's for [`Payload::Own`],
    /// else the variant's `title`, else the tag in PascalCase with the
    /// union's last word (`text` of `ContentPart`: `TextPart`), or the tag
    /// alone for a shared struct (`tool.error`: `ToolError`).
    pub name: String,
    /// Its fields.
    pub payload: Payload,
    /// Its description.
    pub doc: Option<String>,
}

/// A type of the document.
#[derive(Debug, Clone)]
pub enum Def {
    /// One of a few strings.
    StrEnum {
        /// The strings, each with its description.
        values: Vec<(String, Option<String>)>,
    },
    /// An object with named fields.
    Struct {
        /// The fields, in the order the Rust type writes them.
        fields: Vec<Field>,
        /// Whether fields not named are refused.
        closed: bool,
    },
    /// A union tagged by a field.
    Union {
        /// The tag field (`type`, `status`).
        tag_field: String,
        /// The variants, in declaration order.
        variants: Vec<Variant>,
    },
    /// One of several types (`Content`: a string or a list of parts).
    Alias(Ty),
}

/// The whole document: every type with its description, by name.
#[derive(Debug, Clone)]
pub struct Model {
    /// The types, sorted by name.
    pub defs: BTreeMap<String, (Def, Option<String>)>,
    /// For each struct that is one union's variant: (union, tag field, tag).
    pub owner: BTreeMap<String, (String, String, String)>,
}

impl Model {
    /// Reads the document's `$defs`.
    ///
    /// # Errors
    /// A schema shape none of the wire types has, named with its type.
    pub fn read(document: &Value) -> Result<Self, String> {
        let defs = document.get("$defs").and_then(Value::as_object).ok_or("the schema has no `$defs`")?;
        // How many variants refer to each struct: a struct named by one is
        // that variant; one named by several is a shared shape.
        let mut refs: BTreeMap<String, usize> = BTreeMap::new();
        for schema in defs.values() {
            for variant in schema.get("oneOf").and_then(Value::as_array).into_iter().flatten() {
                if let Some(name) = variant.get("$ref").and_then(Value::as_str).map(ref_name) {
                    *refs.entry(name.to_owned()).or_default() += 1;
                }
            }
        }
        let mut model = Model { defs: BTreeMap::new(), owner: BTreeMap::new() };
        for (name, schema) in defs {
            let def = read_def(name, schema, &refs).map_err(|e| format!("$defs/{name}: {e}"))?;
            if let Def::Union { tag_field, variants } = &def {
                for v in variants {
                    if let Payload::Own(payload) = &v.payload {
                        model.owner.insert(payload.clone(), (name.clone(), tag_field.clone(), v.tag.clone()));
                    }
                }
            }
            model.defs.insert(name.clone(), (def, doc(schema)));
        }
        Ok(model)
    }
}

fn ref_name(reference: &str) -> &str {
    reference.rsplit('/').next().unwrap_or(reference)
}

fn doc(schema: &Value) -> Option<String> {
    schema.get("description").and_then(Value::as_str).map(str::to_owned)
}

fn read_def(name: &str, schema: &Value, refs: &BTreeMap<String, usize>) -> Result<Def, String> {
    if let Some(variants) = schema.get("oneOf").and_then(Value::as_array) {
        if variants.iter().all(|v| v.get("type") == Some(&Value::from("string"))) {
            let values = variants
                .iter()
                .map(|v| {
                    let value = v.get("const").and_then(Value::as_str).ok_or("a string variant without `const`")?;
                    Ok((value.to_owned(), doc(v)))
                })
                .collect::<Result<_, String>>()?;
            return Ok(Def::StrEnum { values });
        }
        return read_union(name, variants, refs);
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        let values = values
            .iter()
            .map(|v| v.as_str().map(|s| (s.to_owned(), None)).ok_or("an enum value that is not a string"))
            .collect::<Result<_, _>>()?;
        return Ok(Def::StrEnum { values });
    }
    if schema.get("anyOf").is_some() {
        return Ok(Def::Alias(ty(schema)?.0));
    }
    if schema.get("type") == Some(&Value::from("object")) {
        let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
        return Ok(Def::Struct { fields: fields(schema, None)?, closed });
    }
    Err("not a string enum, a struct, a tagged union or a choice of types".into())
}

fn read_union(name: &str, variants: &[Value], refs: &BTreeMap<String, usize>) -> Result<Def, String> {
    let mut tag_field = None;
    let mut out = Vec::new();
    for v in variants {
        let props = v.get("properties").and_then(Value::as_object).ok_or("a variant without properties")?;
        // The tag is the one property holding a constant.
        let (field, tag) = props
            .iter()
            .find_map(|(k, p)| p.get("const").and_then(Value::as_str).map(|c| (k.clone(), c.to_owned())))
            .ok_or("a variant without a constant tag")?;
        if tag_field.get_or_insert_with(|| field.clone()) != &field {
            return Err(format!("variants tagged by both `{}` and `{field}`", tag_field.unwrap_or_default()));
        }
        let payload = match v.get("$ref").and_then(Value::as_str).map(ref_name) {
            Some(payload) if refs.get(payload).copied().unwrap_or(0) > 1 => Payload::Shared(payload.to_owned()),
            Some(payload) => Payload::Own(payload.to_owned()),
            None => Payload::Inline(fields(v, Some(&field))?),
        };
        let variant_name = match (&payload, v.get("title").and_then(Value::as_str)) {
            (Payload::Own(payload), _) => payload.clone(),
            (_, Some(title)) => title.to_owned(),
            (Payload::Shared(_), None) => pascal(&tag),
            (Payload::Inline(_), None) => pascal(&tag) + last_word(name),
        };
        out.push(Variant { tag, name: variant_name, payload, doc: doc(v) });
    }
    Ok(Def::Union { tag_field: tag_field.ok_or("a union without variants")?, variants: out })
}

pub use subs_protocol::schema::pascal;

/// `ContentPart` → `Part`.
fn last_word(name: &str) -> &str {
    let start = name.rfind(|c: char| c.is_ascii_uppercase()).unwrap_or(0);
    &name[start..]
}

fn fields(schema: &Value, skip: Option<&str>) -> Result<Vec<Field>, String> {
    let empty = Map::new();
    let props = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    props
        .iter()
        .filter(|(name, _)| Some(name.as_str()) != skip)
        .map(|(name, p)| {
            let (ty, nullable) = ty(p).map_err(|e| format!("{name}: {e}"))?;
            Ok(Field { name: name.clone(), ty, nullable, required: required.contains(&name.as_str()), doc: doc(p) })
        })
        .collect()
}

/// A property's type and whether it may be `null`.
fn ty(schema: &Value) -> Result<(Ty, bool), String> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        return Ok((Ty::Ref(ref_name(reference).to_owned()), false));
    }
    if let Some(choices) = schema.get("anyOf").and_then(Value::as_array) {
        let mut nullable = false;
        let mut tys = Vec::new();
        for choice in choices {
            if choice.get("type") == Some(&Value::from("null")) {
                nullable = true;
            } else {
                let (t, n) = ty(choice)?;
                nullable |= n;
                tys.push(t);
            }
        }
        return Ok((if tys.len() == 1 { tys.remove(0) } else { Ty::AnyOf(tys) }, nullable));
    }
    let (kind, nullable) = match schema.get("type") {
        None => return Ok((Ty::Json, false)),
        Some(Value::String(kind)) => (kind.as_str(), false),
        Some(Value::Array(kinds)) => {
            let named: Vec<&str> = kinds.iter().filter_map(Value::as_str).filter(|k| *k != "null").collect();
            match named.as_slice() {
                [kind] => (*kind, named.len() < kinds.len()),
                _ => return Err(format!("a choice of types {kinds:?}")),
            }
        }
        Some(other) => return Err(format!("a `type` of {other}")),
    };
    let t = match kind {
        "string" => Ty::Str,
        "integer" => Ty::Int,
        "number" => Ty::Num,
        "boolean" => Ty::Bool,
        "array" => Ty::Array(Box::new(schema.get("items").map(ty).transpose()?.map_or(Ty::Json, |(t, _)| t))),
        "object" => Ty::Map(Box::new(match schema.get("additionalProperties") {
            Some(items @ Value::Object(_)) => ty(items)?.0,
            _ => Ty::Json,
        })),
        other => return Err(format!("the type `{other}`")),
    };
    Ok((t, nullable))
}
