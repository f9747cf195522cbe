//! Checking tool calls against the JSON Schemas of their tools.
//!
//! An agent's tools carry an `input` schema (what the arguments must look
//! like) and an `output` schema (what a result must look like). The engine
//! checks a model's raw argument text before a worker runs the tool
//! ([`check_arguments`], whose [`ToolInput`] becomes the `input` of
//! `tool.execute`), checks each result before it settles the call
//! ([`check_result`]), and checks the schemas themselves when an agent
//! config arrives ([`check_schema`]).
//!
//! # Choices
//!
//! - A declared tool with no `input` schema takes no arguments: `{}`, blank
//!   text and `null` pass (as `{}`), any other object is `invalid` with an
//!   error saying the tool takes none — the model reads it and can call
//!   again without them. A tool that is not declared at all (nothing to
//!   check against) accepts any object. An omitted `output` schema accepts
//!   any result.
//! - Empty (or all-whitespace) argument text is read as `{}`: some providers
//!   stream a tool call without arguments as an empty string.
//! - Drafts follow the schema's `$schema` (2020-12 when it has none); `format`
//!   is an annotation, as the draft says, not an assertion. References to
//!   other documents are not fetched: a schema must be self-contained.
//! - Error text names where each problem is (the instance path, `at /a/0`),
//!   what the schema said, and the schema keyword that said it; several
//!   problems are joined with `; `. The text goes back to the model, so it is
//!   kept short: at most [`MAX_REPORTED`] problems, each cut to a few hundred
//!   characters.
//!
//! Compiled validators are cached, because the same tool schemas are
//! checked on every call of every session: a tool's schema by the shared
//! allocation it lives in (every call of a session's tool holds the same
//! one), any schema by its value.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use jsonschema::{ValidationError, Validator};
use serde_json::Value;
use subs_protocol::wit::ByAddress;
use subs_protocol::{AgentTool, ToolInput, ToolSchema};

/// How many problems one error text lists; the rest are counted.
pub const MAX_REPORTED: usize = 8;

/// The longest one problem's description gets (in characters): a failing
/// value is quoted in the message, and values can be large.
const MAX_PROBLEM_CHARS: usize = 300;

/// How many compiled schemas the cache keeps. Tool schemas are few per
/// agent; the cap only bounds memory when many agents come and go.
const CACHE_CAPACITY: usize = 512;

/// Checks that `schema` is a usable JSON Schema: valid against its draft's
/// meta-schema, with every reference resolvable. The error says why not.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    compiled(schema).map(|_| ())
}

/// [`check_schema`] for a tool's shared schema, which later checks of the
/// same tool find again without reading the schema.
pub fn check_tool_schema(schema: &ToolSchema) -> Result<(), String> {
    compiled_shared(schema.shared()).map(|_| ())
}

/// Reads a tool call's raw argument text and checks it against the input
/// schema of `tool`, the declared tool called (`None`: no tool of that name
/// is declared, and any object passes).
///
/// - `malformed`: the text is not JSON, or is JSON but not an object; the
///   error is the parser's message or says what was found instead.
/// - `invalid`: an object that breaks the schema (or the schema itself is
///   unusable, so nothing can be vouched for), the error listing each
///   problem; or, for a declared tool without an input schema (which takes
///   no arguments), an object with any key.
/// - `valid`: an object that conforms; for a tool without an input schema,
///   `{}`, blank text or `null` (read as `{}`).
pub fn check_arguments(tool: Option<&AgentTool>, raw: &str) -> ToolInput {
    let value = if raw.trim().is_empty() {
        Value::Object(serde_json::Map::new())
    } else {
        match serde_json::from_str::<Value>(raw) {
            Ok(value) => value,
            Err(e) => return ToolInput::Malformed { error: format!("the arguments are not valid JSON: {e}") },
        }
    };
    if let Some(tool) = tool.filter(|t| t.input.is_none()) {
        return no_arguments(&tool.name, value);
    }
    if !value.is_object() {
        return ToolInput::Malformed {
            error: format!("the arguments must be a JSON object, not {}", subs_protocol::value_kind(&value)),
        };
    }
    let Some(schema) = tool.and_then(|t| t.input.as_ref()) else {
        return ToolInput::Valid { value };
    };
    match validate(compiled_shared(schema.shared()), &value) {
        Ok(()) => ToolInput::Valid { value },
        Err(Problem::Schema(e)) => {
            ToolInput::Invalid { value, error: format!("the tool's input schema is not usable: {e}") }
        }
        Err(Problem::Instance(error)) => ToolInput::Invalid { value, error },
    }
}

/// The check of `value`, the arguments of tool `name`, which declares no
/// input schema and so takes none: `{}` and `null` pass (as `{}`), another
/// object is invalid, naming its keys, anything else malformed.
fn no_arguments(name: &str, value: Value) -> ToolInput {
    match value {
        Value::Null => ToolInput::Valid { value: Value::Object(serde_json::Map::new()) },
        Value::Object(ref o) if o.is_empty() => ToolInput::Valid { value },
        Value::Object(ref o) => {
            let keys: Vec<String> = o.keys().take(MAX_REPORTED).map(|k| format!("`{k}`")).collect();
            let more = if o.len() > keys.len() { format!(" and {} more", o.len() - keys.len()) } else { String::new() };
            let error = shorten(
                format!(
                    "tool `{name}` takes no arguments (it declares no input schema), but the call gives {}{more}",
                    keys.join(", ")
                ),
                MAX_PROBLEM_CHARS,
            );
            ToolInput::Invalid { value, error }
        }
        other => ToolInput::Malformed {
            error: format!("the arguments must be a JSON object, not {}", subs_protocol::value_kind(&other)),
        },
    }
}

/// Checks a tool's result against its output schema (`None`: any result).
/// The error lists each problem, or says the schema itself is unusable.
pub fn check_result(schema: Option<&Arc<Value>>, result: &Value) -> Result<(), String> {
    let Some(schema) = schema else {
        return Ok(());
    };
    validate(compiled_shared(schema), result).map_err(|problem| match problem {
        Problem::Schema(e) => format!("the tool's output schema is not usable: {e}"),
        Problem::Instance(error) => error,
    })
}

/// Checks an interrupt's resume payload against the interrupt's
/// `resume_schema`. The error is the field at fault, as a client names it
/// (`payload`, `payload.approved`, `payload.items[0]`: the first problem's
/// place), and the list of problems.
pub fn check_resume_payload(schema: &Value, payload: &Value) -> Result<(), (String, String)> {
    let field = |pointer: &str| {
        let mut field = "payload".to_owned();
        for segment in pointer.split('/').skip(1) {
            if !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit()) {
                field.push_str(&format!("[{segment}]"));
            } else {
                field.push('.');
                field.push_str(&segment.replace("~1", "/").replace("~0", "~"));
            }
        }
        field
    };
    // The first problem's place, found apart from the list so that the
    // list keeps its one way of being written.
    let validator = compiled(schema);
    let first = validator.as_ref().ok().and_then(|validator| {
        catch_unwind(AssertUnwindSafe(|| {
            validator.iter_errors(payload).next().map(|e| field(e.instance_path().as_str()))
        }))
        .ok()
        .flatten()
    });
    validate(validator, payload).map_err(|problem| match problem {
        Problem::Schema(e) => ("payload".to_owned(), format!("the interrupt's resume_schema is not usable: {e}")),
        Problem::Instance(error) => (
            first.unwrap_or_else(|| "payload".to_owned()),
            format!("the payload does not satisfy the interrupt's resume_schema: {error}"),
        ),
    })
}

/// Why a value could not be vouched for.
enum Problem {
    /// The schema does not compile.
    Schema(String),
    /// The value breaks the schema: the joined problem list.
    Instance(String),
}

fn validate(validator: Compiled, instance: &Value) -> Result<(), Problem> {
    let validator = validator.map_err(Problem::Schema)?;
    // A validator bug must cost one call, not the engine.
    let problems = catch_unwind(AssertUnwindSafe(|| {
        let mut total = 0usize;
        let mut listed = Vec::new();
        for error in validator.iter_errors(instance) {
            total += 1;
            if listed.len() < MAX_REPORTED {
                listed.push(describe(&error));
            }
        }
        (total, listed)
    }));
    match problems {
        Ok((0, _)) => Ok(()),
        Ok((total, listed)) => {
            let mut text = listed.join("; ");
            if total > listed.len() {
                text.push_str(&format!("; and {} more", total - listed.len()));
            }
            Err(Problem::Instance(text))
        }
        Err(_) => Err(Problem::Schema("the validator failed on this value".to_owned())),
    }
}

/// One problem as the model and the developer read it:
/// `at /items/0: "x" is not of type "integer" (schema /properties/items/items/type)`.
fn describe(error: &ValidationError<'_>) -> String {
    let path = error.instance_path().as_str();
    let place = if path.is_empty() { "at the top level".to_owned() } else { format!("at {path}") };
    let text = format!("{place}: {error} (schema {})", error.schema_path().as_str());
    shorten(text, MAX_PROBLEM_CHARS)
}

fn shorten(mut text: String, max_chars: usize) -> String {
    if let Some((cut, _)) = text.char_indices().nth(max_chars) {
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// A compiled schema, or why it does not compile; failures are cached too,
/// so a broken schema is not recompiled on every call.
type Compiled = Result<Arc<Validator>, String>;

/// Keyed by the schema itself: hashing a `Value` walks it without
/// writing it out, which a key of its JSON text would on every lookup
/// (every tool of every model call is checked).
static CACHE: LazyLock<Mutex<HashMap<Value, Compiled>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn compiled(schema: &Value) -> Compiled {
    // A panic elsewhere while holding the lock leaves a map that is still
    // consistent (every insert is a single call), so poisoning is ignored.
    if let Some(hit) = CACHE.lock().unwrap_or_else(PoisonError::into_inner).get(schema) {
        return hit.clone();
    }
    // Compiled outside the lock: compiling can take a while, and two callers
    // compiling the same schema at once only waste a little work.
    let fresh = compile(schema);
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if cache.len() >= CACHE_CAPACITY
        && !cache.contains_key(schema)
        && let Some(evicted) = cache.keys().next().cloned()
    {
        cache.remove(&evicted);
    }
    cache.insert(schema.clone(), fresh.clone());
    fresh
}

/// How many tool schemas a thread finds by address ([`compiled_shared`]).
/// A session's tools are few; a node running many agents' sessions at
/// once falls back to [`CACHE`] for the rest.
const KEPT_BY_ADDRESS: usize = 64;

std::thread_local! {
    /// The validators of the tool schemas this thread checked last, found
    /// by the address of the schema's shared allocation: the lookup
    /// neither hashes nor compares the schema's value, as [`CACHE`] has
    /// to. Each entry holds its schema, so an address found is the same
    /// schema.
    static BY_ADDRESS: std::cell::RefCell<ByAddress<Value, Compiled>> =
        const { std::cell::RefCell::new(ByAddress::new(KEPT_BY_ADDRESS)) };
}

fn compiled_shared(schema: &Arc<Value>) -> Compiled {
    if let Some(hit) = BY_ADDRESS.with_borrow(|kept| kept.get(schema).cloned()) {
        return hit;
    }
    let fresh = compiled(schema);
    BY_ADDRESS.with_borrow_mut(|kept| kept.insert(schema, fresh.clone()));
    fresh
}

fn compile(schema: &Value) -> Compiled {
    match catch_unwind(AssertUnwindSafe(|| jsonschema::validator_for(schema))) {
        Ok(Ok(validator)) => Ok(Arc::new(validator)),
        Ok(Err(e)) => Err(describe_schema_error(&e)),
        Err(_) => Err("the schema validator failed on this schema".to_owned()),
    }
}

/// A schema error names the schema location at fault, when there is one.
fn describe_schema_error(error: &ValidationError<'_>) -> String {
    let path = error.instance_path().as_str();
    let text = if path.is_empty() { error.to_string() } else { format!("at {path}: {error}") };
    shorten(text, MAX_PROBLEM_CHARS)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A tool `t` declared with `schema`.
    fn declared(schema: Value) -> AgentTool {
        AgentTool::new("t").input(schema)
    }

    /// `add`, declared with [`add_schema`].
    fn add() -> AgentTool {
        AgentTool::new("add").input(add_schema())
    }

    fn add_schema() -> Value {
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer", "minimum": 0}},
            "required": ["a", "b"],
            "additionalProperties": false
        })
    }

    #[test]
    fn a_resume_payload_is_checked_and_the_first_problem_named_as_a_field() {
        let schema = json!({
            "type": "object",
            "properties": {"approved": {"type": "boolean"}, "items": {"type": "array", "items": {"type": "integer"}}},
            "required": ["approved"]
        });
        assert_eq!(check_resume_payload(&schema, &json!({"approved": true})), Ok(()));
        let (field, message) = check_resume_payload(&schema, &json!({"approved": "yes"})).unwrap_err();
        assert_eq!(field, "payload.approved");
        assert!(message.contains("\"yes\" is not of type \"boolean\""), "{message}");
        let (field, _) = check_resume_payload(&schema, &json!({"approved": true, "items": [1, "x"]})).unwrap_err();
        assert_eq!(field, "payload.items[1]");
        let (field, message) = check_resume_payload(&schema, &Value::Null).unwrap_err();
        assert_eq!(field, "payload");
        assert!(message.contains("at the top level"), "{message}");
        let (field, message) = check_resume_payload(&json!({"type": 5}), &json!({})).unwrap_err();
        assert_eq!(field, "payload");
        assert!(message.contains("resume_schema is not usable"), "{message}");
    }

    #[test]
    fn conforming_arguments_are_valid() {
        let input = check_arguments(Some(&add()), r#"{"a": 1, "b": 2}"#);
        assert_eq!(input, ToolInput::Valid { value: json!({"a": 1, "b": 2}) });
    }

    #[test]
    fn text_that_is_not_json_is_malformed_with_the_parser_message() {
        let ToolInput::Malformed { error } = check_arguments(Some(&add()), "{a: 1}") else {
            panic!("expected malformed");
        };
        assert!(error.contains("not valid JSON"), "{error}");
        assert!(error.contains("line 1 column 2"), "{error}");
    }

    #[test]
    fn json_that_is_not_an_object_is_malformed() {
        for (raw, kind) in [("[1, 2]", "an array"), ("42", "a number"), (r#""x""#, "a string"), ("null", "null")] {
            let ToolInput::Malformed { error } = check_arguments(None, raw) else {
                panic!("expected malformed for {raw}");
            };
            assert!(error.ends_with(kind), "{raw}: {error}");
        }
    }

    #[test]
    fn empty_text_reads_as_no_arguments() {
        assert_eq!(check_arguments(None, "  "), ToolInput::Valid { value: json!({}) });
        let ToolInput::Invalid { error, .. } = check_arguments(Some(&add()), "") else {
            panic!("expected invalid");
        };
        assert!(error.contains("\"a\" is a required property"), "{error}");
    }

    #[test]
    fn an_undeclared_tool_takes_any_object() {
        assert_eq!(check_arguments(None, r#"{"x": [1]}"#), ToolInput::Valid { value: json!({"x": [1]}) });
    }

    #[test]
    fn a_declared_tool_without_a_schema_takes_no_arguments() {
        let clock = AgentTool::new("clock");
        for raw in ["", "  ", "{}", " { } ", "null"] {
            assert_eq!(check_arguments(Some(&clock), raw), ToolInput::Valid { value: json!({}) }, "{raw:?}");
        }
        let ToolInput::Invalid { value, error } = check_arguments(Some(&clock), r#"{"x": 1, "y": 2}"#) else {
            panic!("expected invalid");
        };
        assert_eq!(value, json!({"x": 1, "y": 2}));
        assert_eq!(error, "tool `clock` takes no arguments (it declares no input schema), but the call gives `x`, `y`");
        assert!(matches!(check_arguments(Some(&clock), "[1]"), ToolInput::Malformed { .. }));
        assert!(matches!(check_arguments(Some(&clock), "{x"), ToolInput::Malformed { .. }));
        let many = format!("{{{}}}", (0..20).map(|i| format!("\"k{i}\": 1")).collect::<Vec<_>>().join(","));
        let ToolInput::Invalid { error, .. } = check_arguments(Some(&clock), &many) else { panic!("expected invalid") };
        assert!(error.ends_with(&format!("and {} more", 20 - MAX_REPORTED)), "{error}");
    }

    #[test]
    fn invalid_arguments_name_every_problem_with_its_place() {
        let input = check_arguments(Some(&add()), r#"{"a": "one", "b": -1, "c": true}"#);
        let ToolInput::Invalid { value, error } = input else {
            panic!("expected invalid, got {input:?}");
        };
        assert_eq!(value, json!({"a": "one", "b": -1, "c": true}));
        assert!(error.contains(r#"at /a: "one" is not of type "integer" (schema /properties/a/type)"#), "{error}");
        assert!(error.contains("at /b: -1 is less than the minimum of 0"), "{error}");
        assert!(error.contains("at the top level: Additional properties are not allowed ('c'"), "{error}");
        assert_eq!(error.matches("; ").count(), 2, "{error}");
    }

    #[test]
    fn long_problem_lists_are_capped() {
        let schema = Arc::new(json!({"type": "array", "items": {"type": "string"}}));
        let result = json!((0..20).collect::<Vec<_>>());
        let error = check_result(Some(&schema), &result).unwrap_err();
        assert_eq!(error.matches("is not of type").count(), MAX_REPORTED);
        assert!(error.ends_with(&format!("and {} more", 20 - MAX_REPORTED)), "{error}");
    }

    #[test]
    fn large_values_are_cut_in_messages() {
        let schema = json!({"type": "object", "properties": {"s": {"maxLength": 3}}});
        let long = "é".repeat(5000);
        let ToolInput::Invalid { error, .. } =
            check_arguments(Some(&declared(schema.clone())), &json!({ "s": long }).to_string())
        else {
            panic!("expected invalid");
        };
        assert!(error.chars().count() <= MAX_PROBLEM_CHARS + 1, "{} chars", error.chars().count());
        assert!(error.ends_with('…'));
    }

    #[test]
    fn results_are_checked_against_the_output_schema() {
        let schema = Arc::new(json!({"type": "object", "required": ["sum"]}));
        assert_eq!(check_result(Some(&schema), &json!({"sum": 3})), Ok(()));
        assert_eq!(check_result(None, &json!("anything")), Ok(()));
        let error = check_result(Some(&schema), &json!({"total": 3})).unwrap_err();
        assert!(error.starts_with(r#"at the top level: "sum" is a required property"#), "{error}");
    }

    #[test]
    fn a_schema_found_by_its_address_is_the_one_checked_against() {
        let sum = Arc::new(json!({"type": "object", "required": ["sum"]}));
        assert_eq!(check_result(Some(&sum), &json!({"sum": 3})), Ok(()));
        drop(sum);
        // Schemas of the same size, which an allocator would place where
        // the dropped one was were its allocation freed.
        for _ in 0..64 {
            let total = Arc::new(json!({"type": "object", "required": ["total"]}));
            assert!(check_result(Some(&total), &json!({"sum": 3})).is_err());
            assert_eq!(check_tool_schema(&total.clone().into()), Ok(()));
        }
        let broken = Arc::new(json!({"type": "integr"}));
        assert!(check_tool_schema(&broken.into()).unwrap_err().contains("integr"));
    }

    #[test]
    fn schemas_are_checked_against_their_meta_schema() {
        assert_eq!(check_schema(&add_schema()), Ok(()));
        assert_eq!(check_schema(&json!(true)), Ok(()));
        assert_eq!(check_schema(&json!({})), Ok(()));
        let error = check_schema(&json!({"type": "integr"})).unwrap_err();
        assert!(error.contains("integr"), "{error}");
        let error = check_schema(&json!({"properties": {"a": {"minimum": "five"}}})).unwrap_err();
        assert!(error.contains("/properties/a/minimum"), "{error}");
        assert!(check_schema(&json!(42)).is_err());
    }

    #[test]
    fn unresolvable_references_are_schema_errors_not_panics() {
        for schema in [
            json!({"$ref": "#/$defs/missing"}),
            json!({"$ref": "https://example.com/schema.json"}),
            json!({"$ref": "file:///etc/passwd"}),
            json!({"type": "string", "pattern": "(unclosed"}),
        ] {
            assert!(check_schema(&schema).is_err(), "{schema} should not compile");
            let input = check_arguments(Some(&declared(schema.clone())), "{}");
            let ToolInput::Invalid { error, .. } = input else {
                panic!("expected invalid for {schema}, got {input:?}");
            };
            assert!(error.starts_with("the tool's input schema is not usable: "), "{error}");
            let error = check_result(Some(&Arc::new(schema.clone())), &json!({})).unwrap_err();
            assert!(error.starts_with("the tool's output schema is not usable: "), "{error}");
        }
    }

    #[test]
    fn local_references_resolve() {
        let schema = json!({
            "$defs": {"n": {"type": "integer"}},
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/n"}}
        });
        assert_eq!(check_schema(&schema), Ok(()));
        assert!(matches!(check_arguments(Some(&declared(schema.clone())), r#"{"n": 1}"#), ToolInput::Valid { .. }));
        assert!(matches!(check_arguments(Some(&declared(schema.clone())), r#"{"n": "1"}"#), ToolInput::Invalid { .. }));
    }

    #[test]
    fn the_cache_stays_bounded() {
        for i in 0..CACHE_CAPACITY + 10 {
            let schema = json!({"type": "object", "properties": {format!("p{i}"): {"type": "integer"}}});
            assert!(matches!(check_arguments(Some(&declared(schema.clone())), "{}"), ToolInput::Valid { .. }));
        }
        assert!(CACHE.lock().unwrap().len() <= CACHE_CAPACITY);
        assert!(BY_ADDRESS.with_borrow(ByAddress::len) <= KEPT_BY_ADDRESS);
    }
}
