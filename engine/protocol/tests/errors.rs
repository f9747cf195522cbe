//! Bad input: every malformed or wrongly-typed value is a [`ProtocolError`]
//! that names the field and says what is wrong, never a panic; unknown
//! fields and `null` optionals are accepted.

use std::fmt::Debug;
use std::fs;
use std::path::Path;

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use subs_protocol::{
    Action, AgentConfig, ClientInput, Content, DecisionRequest, DecisionResponse, DraftMessage, ProtocolError, Trigger,
    from_json, from_json_slice, from_value, to_json, to_value,
};

/// Parses `text` as a `T`, which must fail.
#[track_caller]
fn error<T: DeserializeOwned + Debug>(text: &str) -> ProtocolError {
    match from_json::<T>(text) {
        Ok(value) => panic!("accepted {text}\n  as {value:?}"),
        Err(e) => e,
    }
}

/// Asserts that `text` fails at `field` with a message containing each of
/// `words`.
#[track_caller]
fn assert_error<T: DeserializeOwned + Debug>(text: &str, field: Option<&str>, words: &[&str]) {
    let e = error::<T>(text);
    assert_eq!(e.field(), field, "field of `{e}` for {text}");
    for word in words {
        assert!(e.message().contains(word), "message `{}` lacks `{word}` for {text}", e.message());
    }
    // Display puts the path first, so a log line alone locates the mistake.
    match field {
        Some(field) => assert_eq!(e.to_string(), format!("{field}: {}", e.message())),
        None => assert_eq!(e.to_string(), e.message()),
    }
}

/// A valid request for `trigger`, as JSON, for tests to break.
fn request_with(trigger: Value) -> Value {
    let mut request = to_value(&DecisionRequest::for_trigger(Trigger::SessionStart));
    request["trigger"] = trigger;
    request
}

fn fixture(path: &str) -> String {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/protocol").join(path);
    fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
}

// ---- missing and wrongly-typed fields ---------------------------------

#[test]
fn missing_field_in_a_tagged_variant_names_the_variant() {
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.call","arguments":{}}]}"#,
        Some("actions[0]"),
        &["missing field", "`name`"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"done"},{"type":"sub_agent.spawn","session_id":"s","agent_id":"a"}]}"#,
        Some("actions[1]"),
        &["missing field `tool_call_id`"],
    );
    // A required `unknown` field may be `null`, but not absent.
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.result"}]}"#,
        Some("actions[0]"),
        &["missing field `result`"],
    );
}

#[test]
fn wrong_type_inside_a_tagged_variant_names_the_field() {
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.call","name":5,"arguments":{}}]}"#,
        Some("actions[0].name"),
        &["invalid type", "integer `5`", "expected a string"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.error","error":"x","retryable":"yes"}]}"#,
        Some("actions[0].retryable"),
        &["invalid type", "expected a boolean"],
    );
    assert_error::<Trigger>(
        r#"{"type":"tool.finished","id":"c","ok":"yes","name":"n"}"#,
        Some("ok"),
        &["expected a boolean"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.call","name":"a","arguments":{},"retry":{"timeout_secs":"30","max_retries":1,"backoff_base_secs":1,"backoff_max_secs":1}}]}"#,
        Some("actions[0].retry.timeout_secs"),
        &["invalid type", "string \"30\""],
    );
}

#[test]
fn unknown_tag_lists_the_expected_tags() {
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.cal","name":"x","arguments":{}}]}"#,
        Some("actions[0].type"),
        &["unknown variant `tool.cal`", "`tool.call`", "`llm.call`", "`sub_agent.spawn`", "`done`"],
    );
    assert_error::<ClientInput>(
        r#"{"type":"client.mesage","agent_id":"a"}"#,
        Some("type"),
        &["unknown variant `client.mesage`", "`client.message`", "`interrupt.resume`"],
    );
    let request = request_with(json!({"type": "tool.executed"}));
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("trigger.type"),
        &["unknown variant `tool.executed`", "`tool.execute`", "`interrupt.resumed`"],
    );
    assert_error::<DecisionResponse>(
        r#"{"messages":[{"role":"user","content":[{"type":"audio","data":"x"}]}]}"#,
        Some("messages[0].content[0].type"),
        &["unknown variant `audio`", "`input_audio`"],
    );
    assert_error::<Trigger>(
        r#"{"type":"tool.execute","id":"c","name":"n","arguments":"{}","input":{"status":"ok","value":{}},"attempt":1}"#,
        Some("input.status"),
        &["unknown variant `ok`", "`valid`", "`invalid`", "`malformed`"],
    );
}

#[test]
fn missing_or_mistyped_tag_is_reported() {
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"name":"x","arguments":{}}]}"#,
        Some("actions[0]"),
        &["missing field `type`"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":7}]}"#,
        Some("actions[0].type"),
        &["a number", "expected a string"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":null}]}"#,
        Some("actions[0].type"),
        &["null", "expected a string"],
    );
    assert_error::<Trigger>(r#"{"status":"valid"}"#, None, &["missing field `type`"]);
    // ToolInput is tagged by `status`, not `type`.
    assert_error::<Trigger>(
        r#"{"type":"tool.execute","id":"c","name":"n","arguments":"{}","input":{"type":"valid","value":{}},"attempt":1}"#,
        Some("input"),
        &["missing field `status`"],
    );
}

#[test]
fn deep_paths_run_through_unions_lists_and_content() {
    let request = request_with(json!({
        "type": "client.messages",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "image_url", "image_url": {"uri": "https://x.test/a.png"}}]},
        ],
        "new_from": 1,
        "client": {},
    }));
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("trigger.messages[1].content[0].image_url"),
        &["missing field `url`"],
    );

    let request = request_with(json!({
        "type": "client.messages",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": "https://x.test/a.png"}]},
        ],
        "new_from": 1,
        "client": {},
    }));
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("trigger.messages[1].content[1].image_url"),
        &["invalid type", "string", "UrlRef"],
    );

    // A union inside a union inside a list: message.send → message → content.
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"done"},{"type":"message.send","session_id":"s","message":{"role":"user","content":[{"type":"file","file":{"filename":"a.pdf"}}]}}]}"#,
        Some("actions[1].message.content[0].file"),
        &["missing field `file_data`"],
    );

    let mut request = request_with(json!({"type": "session.start"}));
    request["message_tree"] = json!({"nodes": [{"message": {"id": "m", "role": "assistant", "tool_calls": [
        {"id": "t", "type": "function", "function": {"name": "add", "arguments": {"a": 1}}}
    ]}}]});
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("message_tree.nodes[0].message.tool_calls[0].function.arguments"),
        &["invalid type", "expected a string"],
    );

    let mut request = request_with(json!({"type": "session.start"}));
    request["proposed"] =
        json!({"agent": {"model": "m", "tools": [{"name": "a"}, {"name": "b", "handler": "server"}]}});
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("proposed.agent.tools[1].handler"),
        &["unknown variant `server`", "`worker`", "`client`"],
    );

    let mut request = request_with(json!({"type": "session.start"}));
    request["identity"] = json!({"metadata": {"team": "a", "x-tier": 5}});
    assert_error::<DecisionRequest>(&request.to_string(), Some("identity.metadata.x-tier"), &["expected a string"]);

    let request = request_with(json!({
        "type": "llm.finished", "id": "c", "ok": true, "truncated": false,
        "message": {"role": "assistant", "content": [{"type": "text", "text": 1}]},
    }));
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("trigger.message.content[0].text"),
        &["expected a string"],
    );
}

#[test]
fn wrong_enum_values_list_the_allowed_ones() {
    assert_error::<DecisionResponse>(
        r#"{"messages":[{"role":"robot"}]}"#,
        Some("messages[0].role"),
        &["unknown variant `robot`", "`system`", "`user`", "`assistant`", "`tool`"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"done"},{"type":"message.send","session_id":"s","message":{"role":"robot"}}]}"#,
        Some("actions[1].message.role"),
        &["unknown variant `robot`"],
    );
    assert_error::<Trigger>(
        r#"{"type":"llm.finished","id":"c","ok":false,"truncated":false,"code":"timeout"}"#,
        Some("code"),
        &["unknown variant `timeout`", "`deadline_exceeded`"],
    );
    let mut request = request_with(json!({"type": "session.start"}));
    request["calls"] = json!([{"id": "c", "kind": "tool_call", "status": "running", "attempt": 1}]);
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("calls[0].status"),
        &["unknown variant `running`", "`retry_scheduled`"],
    );
    assert_error::<AgentConfig>(
        r#"{"model":"m","format":"gemini"}"#,
        Some("format"),
        &["unknown variant `gemini`", "`openai`", "`anthropic`"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"llm.call","reasoning":{"effort":"extreme"}}]}"#,
        Some("actions[0].reasoning.effort"),
        &["unknown variant `extreme`", "`xhigh`"],
    );
}

#[test]
fn integers_must_be_whole_and_in_range() {
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.result","attempt":1.5,"result":1}]}"#,
        Some("actions[0].attempt"),
        &["floating point `1.5`", "u32"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.result","attempt":-1,"result":1}]}"#,
        Some("actions[0].attempt"),
        &["`-1`", "u32"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.result","attempt":4294967296,"result":1}]}"#,
        Some("actions[0].attempt"),
        &["`4294967296`", "u32"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.result","attempt":"1","result":1}]}"#,
        Some("actions[0].attempt"),
        &["string \"1\"", "u32"],
    );
    let mut request = request_with(json!({"type": "session.start"}));
    request["attempts"] = json!(2.5);
    assert_error::<DecisionRequest>(&request.to_string(), Some("attempts"), &["floating point `2.5`"]);
    // A float field takes integers as well as fractions.
    let config: AgentConfig = from_json(
        r#"{"model":"m","retry":{"timeout_secs":30,"max_retries":0,"backoff_base_secs":0.5,"backoff_max_secs":1e1}}"#,
    )
    .unwrap();
    assert_eq!(config.retry.as_ref().map(|r| (r.timeout_secs, r.backoff_max_secs)), Some((Some(30.0), 10.0)));
}

#[test]
fn non_objects_where_objects_are_expected() {
    // Scalars, at the top and nested, plain structs and unions alike.
    assert_error::<DecisionResponse>(r#""x""#, None, &["invalid type", "string \"x\"", "DecisionResponse"]);
    assert_error::<DecisionResponse>("null", None, &["invalid type", "null"]);
    assert_error::<DecisionResponse>(r#"{"agent":"openai/gpt-4o"}"#, Some("agent"), &["invalid type", "AgentConfig"]);
    assert_error::<DecisionResponse>(
        r#"{"actions":["done"]}"#,
        Some("actions[0]"),
        &["a string", "an object with a `type` field"],
    );
    assert_error::<DecisionResponse>(
        r#"{"actions":{"type":"done"}}"#,
        Some("actions"),
        &["invalid type: map", "sequence"],
    );
    assert_error::<Action>("42", None, &["a number", "an object with a `type` field"]);
    let mut request = request_with(json!({"type": "session.start"}));
    request["identity"] = json!(true);
    assert_error::<DecisionRequest>(
        &request.to_string(),
        Some("identity"),
        &["invalid type: boolean", "WorkerIdentity"],
    );
    assert_error::<DecisionRequest>(
        &request_with(json!("session.start")).to_string(),
        Some("trigger"),
        &["a string", "`type`"],
    );
    assert_error::<DecisionResponse>(
        r#"{"messages":[{"role":"user","content":{"text":"hi"}}]}"#,
        Some("messages[0].content"),
        &["invalid type: map", "a string or an array of content parts"],
    );
    assert_error::<Content>("7", None, &["a string or an array of content parts"]);
}

/// serde's derived structs also read a JSON array of their fields by
/// position; the protocol's objects must not.
#[test]
fn arrays_are_not_objects() {
    assert_error::<DecisionResponse>("[]", None, &["invalid type: sequence", "DecisionResponse"]);
    assert_error::<DecisionResponse>(r#"[null,[{"type":"done"}]]"#, None, &["invalid type: sequence"]);
    assert_error::<DecisionResponse>(
        r#"{"agent":["openai/gpt-4o","be nice"]}"#,
        Some("agent"),
        &["invalid type: sequence", "AgentConfig"],
    );
    // Inside a tagged variant (read from a buffered value) too.
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"message.send","session_id":"s","message":[null,"user","hi"]}]}"#,
        Some("actions[0].message"),
        &["invalid type: sequence", "DraftMessage"],
    );
    let mut request = request_with(json!({"type": "session.start"}));
    request["message_tree"] = json!([[]]);
    assert_error::<DecisionRequest>(&request.to_string(), Some("message_tree"), &["invalid type: sequence"]);
    assert!(from_value::<AgentConfig>(json!(["m"])).is_err());
    // Through a typed accessor as well.
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.state = json!([3]);
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Counter {
        turns: u32,
    }
    let err = request.state_as::<Counter>().unwrap_err();
    assert_eq!(err.field(), Some("state"), "{err}");
}

/// A posted input's `identity` is read with the input: its errors name
/// `identity.…`, and an input that creates no session takes none.
#[test]
fn a_posted_inputs_identity_is_checked_with_the_input() {
    use subs_protocol::PostedInput;
    let message = r#""type":"client.message","agent_id":"a","message":{"role":"user","content":"hi"}"#;
    let posted: PostedInput =
        from_json(&format!(r#"{{{message},"identity":{{"id":"u1","metadata":{{"plan":"pro"}}}}}}"#)).unwrap();
    assert_eq!(posted.identity.as_ref().and_then(|i| i.id.as_deref()), Some("u1"));
    assert!(matches!(posted.input, ClientInput::ClientMessage(_)));
    let bare: PostedInput = from_json(&format!(r#"{{{message},"identity":null}}"#)).unwrap();
    assert_eq!(bare.identity, None);
    assert_error::<PostedInput>(
        &format!(r#"{{{message},"identity":{{"id":5}}}}"#),
        Some("identity.id"),
        &["invalid type"],
    );
    assert_error::<PostedInput>(
        &format!(r#"{{{message},"identity":{{"metadata":{{"k":1}}}}}}"#),
        Some("identity.metadata.k"),
        &["invalid type"],
    );
    assert_error::<PostedInput>(&format!(r#"{{{message},"identity":[]}}"#), Some("identity"), &["invalid type"]);
    assert_error::<PostedInput>(
        r#"{"type":"tool.error","id":"c","error":"no","retryable":false,"identity":{"id":"u1"}}"#,
        Some("identity"),
        &["tool.error", "takes no identity"],
    );
    assert_error::<PostedInput>(
        r#"{"type":"client.message","agent_id":"a","identity":{}}"#,
        None,
        &["missing field `message`"],
    );
}

// ---- bad JSON -----------------------------------------------------------

#[test]
fn invalid_json_syntax_is_an_error_with_a_location() {
    assert_error::<DecisionResponse>(r#"{"actions":[{"type":"done"},]}"#, Some("actions"), &["trailing comma"]);
    assert_error::<DecisionResponse>(r#"{"actions":[{"type":"done"}"#, Some("actions"), &["EOF while parsing a list"]);
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"done","data":{"a":}}]}"#,
        Some("actions[0].data.a"),
        &["expected value"],
    );
    // An unreadable key blames the object that holds it.
    assert_error::<DecisionResponse>(r#"{'actions':[]}"#, None, &["key must be a string"]);
    assert_error::<DecisionResponse>(r#"{"agent":{"model":"m",'x':1}}"#, Some("agent"), &["key must be a string"]);
    assert_error::<DecisionResponse>(r#"{"messages":[{"role":"user",}]}"#, Some("messages[0]"), &["trailing comma"]);
    assert_error::<DecisionResponse>(r#"{"actions":[{"type":"done","data":{"a":1,"#, Some("actions[0].data"), &["EOF"]);
    assert_error::<DecisionResponse>("", None, &["EOF while parsing a value"]);
    assert_error::<DecisionResponse>("  \n ", None, &["EOF while parsing a value"]);
    assert_error::<DecisionResponse>(r#"{"state":NaN}"#, Some("state"), &["expected value"]);
    assert_error::<DecisionResponse>(r#"{"state":1e400}"#, Some("state"), &["number out of range"]);
    assert_error::<DecisionResponse>(
        r#"{"actions":[{"type":"tool.call","name":"\ud800","arguments":{}}]}"#,
        Some("actions[0].name"),
        &[],
    );
    // The field path replaces serde_json's position suffix.
    let e = error::<DecisionResponse>(r#"{"actions":[{"type":"tool.call","name":5,"arguments":{}}]}"#);
    assert!(!e.message().contains(" at line "), "{e}");
}

#[test]
fn trailing_characters_are_an_error() {
    assert_error::<DecisionResponse>("{} {}", None, &["trailing characters"]);
    assert_error::<DecisionResponse>(r#"{"actions":[]}x"#, None, &["trailing characters"]);
    assert_error::<Action>(r#"{"type":"done"}]"#, None, &["trailing characters"]);
    // Whitespace after the value is fine.
    assert!(from_json::<Action>("{\"type\":\"done\"} \n\t").is_ok());
}

#[test]
fn bytes_that_are_not_utf8_are_an_error() {
    let e = from_json_slice::<DecisionResponse>(b"{\"state\":\"\xff\"}").unwrap_err();
    assert!(e.message().contains("UTF-8"), "{e}");
    assert!(from_json_slice::<DecisionResponse>(br#"{"actions":[{"type":"done"}]}"#).is_ok());
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let deep = format!(r#"{{"actions":[{{"type":"done","data":{}1{}}}]}}"#, "[".repeat(100_000), "]".repeat(100_000));
    let e = error::<DecisionResponse>(&deep);
    assert!(e.message().contains("recursion limit"), "{e}");
    assert!(e.field().is_some_and(|f| f.starts_with("actions[0].data")), "{e}");
}

// ---- forward compatibility ------------------------------------------------

const EXTRA: &str = "x_future_field";

/// Adds an unknown field to every object in `value` but the string maps
/// (`identity.metadata`), whose every key is data.
fn with_extra_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if key != "metadata" {
                    with_extra_fields(value);
                }
            }
            map.insert(EXTRA.to_owned(), json!({"added_in": "v2", "list": [1, 2.5, null, "ü"]}));
        }
        Value::Array(items) => items.iter_mut().for_each(with_extra_fields),
        _ => {}
    }
}

/// Removes what [`with_extra_fields`] added.
fn without_extra_fields(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.shift_remove(EXTRA);
            map.values_mut().for_each(without_extra_fields);
        }
        Value::Array(items) => items.iter_mut().for_each(without_extra_fields),
        _ => {}
    }
}

/// Every fixture of `dir`, with an unknown field added to every object,
/// still parses, and its typed parts are the fixture's. (`unknown` values
/// keep the added fields: they are carried verbatim.)
fn unknown_fields_are_ignored_in<T: DeserializeOwned + serde::Serialize + Debug>(dir: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/protocol").join(dir);
    let mut seen = 0;
    for file in fs::read_dir(&root).unwrap_or_else(|e| panic!("reading {}: {e}", root.display())) {
        let path = file.expect("directory entry").path();
        let name = path.display().to_string();
        let original: Value = serde_json::from_str(&fs::read_to_string(&path).expect("readable")).expect("JSON");
        let mut extended = original.clone();
        with_extra_fields(&mut extended);
        let parsed: T = from_json(&extended.to_string()).unwrap_or_else(|e| panic!("{name} with extra fields: {e}"));
        let mut written = to_value(&parsed);
        without_extra_fields(&mut written);
        assert_eq!(written, original, "{name}");
        seen += 1;
    }
    assert!(seen > 0, "no fixtures in {dir}");
}

#[test]
fn unknown_fields_are_ignored_everywhere() {
    unknown_fields_are_ignored_in::<DecisionRequest>("decision_request");
    unknown_fields_are_ignored_in::<DecisionResponse>("decision_response");
    unknown_fields_are_ignored_in::<Action>("action");
    unknown_fields_are_ignored_in::<Trigger>("trigger");
}

/// A client input refuses a field it does not know at its top level (a
/// typo there changes what the input does), naming it; the objects inside
/// it (messages, content, client context) are as lenient as everywhere.
#[test]
fn a_client_input_refuses_unknown_fields_of_its_own() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/protocol/client_input");
    let mut seen = 0;
    for file in fs::read_dir(&root).unwrap_or_else(|e| panic!("reading {}: {e}", root.display())) {
        let path = file.expect("directory entry").path();
        let name = path.display().to_string();
        let original: Value = serde_json::from_str(&fs::read_to_string(&path).expect("readable")).expect("JSON");
        let mut nested = original.clone();
        for value in nested.as_object_mut().expect("an input is an object").values_mut() {
            with_extra_fields(value);
        }
        let parsed: ClientInput = from_json(&nested.to_string()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut written = to_value(&parsed);
        without_extra_fields(&mut written);
        assert_eq!(written, original, "{name}");

        let mut top = original.clone();
        top.as_object_mut().expect("an object").insert(EXTRA.to_owned(), json!(1));
        let error = from_json::<ClientInput>(&top.to_string()).expect_err(&name);
        assert!(error.message().contains(&format!("unknown field `{EXTRA}`")), "{name}: {error}");
        seen += 1;
    }
    assert!(seen > 0, "no client input fixtures");
}

#[test]
fn unknown_fields_are_not_kept() {
    let action: Action = from_json(r#"{"type":"tool.call","name":"add","arguments":{"a":1},"priority":9}"#).unwrap();
    assert_eq!(to_json(&action), r#"{"type":"tool.call","name":"add","arguments":{"a":1}}"#);
}

#[test]
fn null_optional_fields_read_as_omitted() {
    let with_nulls: DecisionResponse = from_json(
        r#"{
            "messages": [{"id": null, "role": "user", "content": null, "tool_calls": null, "tool_call_id": null, "name": null}],
            "actions": [
                {"type": "llm.call", "id": null, "model": null, "messages": null, "tools": null, "temperature": null,
                 "max_completion_tokens": null, "reasoning": null, "stream": null, "retry": null, "handler": null},
                {"type": "tool.call", "id": null, "name": "add", "arguments": {}, "handler": null, "retry": null},
                {"type": "tool.error", "id": null, "attempt": null, "error": "e", "retryable": null, "code": null, "detail": null},
                {"type": "interrupt", "interrupt_id": null, "reason": "r", "payload": null},
                {"type": "done", "data": null}
            ],
            "state": null,
            "agent": {"model": "m", "system": null, "stream": null, "handler": null, "format": null, "retry": null,
                      "tools": [{"name": "t", "description": null, "input": null, "output": null, "handler": null}],
                      "sub_agents": null}
        }"#,
    )
    .unwrap();
    let without: DecisionResponse = from_json(
        r#"{
            "messages": [{"role": "user"}],
            "actions": [
                {"type": "llm.call"},
                {"type": "tool.call", "name": "add", "arguments": {}},
                {"type": "tool.error", "error": "e"},
                {"type": "interrupt", "reason": "r"},
                {"type": "done"}
            ],
            "agent": {"model": "m", "tools": [{"name": "t"}]}
        }"#,
    )
    .unwrap();
    assert_eq!(with_nulls, without);
    assert_eq!(to_json(&with_nulls), to_json(&without));

    let input: ClientInput = from_json(r#"{"type":"tool.result","id":"c","attempt":null,"result":null}"#).unwrap();
    assert_eq!(to_json(&input), r#"{"type":"tool.result","id":"c"}"#);
    let draft: DraftMessage = from_json(r#"{"role":"assistant","content":null,"tool_calls":null}"#).unwrap();
    assert_eq!(draft.content, None);
}

#[test]
fn null_is_kept_where_the_type_allows_it() {
    // Required `unknown` fields hold `null` as a value.
    let action: Action = from_json(r#"{"type":"tool.result","result":null}"#).unwrap();
    assert_eq!(to_json(&action), r#"{"type":"tool.result","result":null}"#);
    let action: Action = from_json(r#"{"type":"tool.call","name":"now","arguments":null}"#).unwrap();
    assert_eq!(to_json(&action), r#"{"type":"tool.call","name":"now","arguments":null}"#);
    // `| null` fields are written as `null`, never omitted.
    let request = to_json(&DecisionRequest::for_trigger(Trigger::SessionStart));
    for field in [r#""agent":null"#, r#""deadline":null"#, r#""turn_id":null"#, r#""state":null"#] {
        assert!(request.contains(field), "{field} missing from {request}");
    }
    let config: AgentConfig = from_json(
        r#"{"model":"m","retry":{"timeout_secs":null,"max_retries":1,"backoff_base_secs":1,"backoff_max_secs":2}}"#,
    )
    .unwrap();
    assert!(to_json(&config).contains(r#""timeout_secs":null"#));
}

// ---- never a panic ------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any text at all: an error or a value, never a panic.
    #[test]
    fn arbitrary_text_never_panics(text in "(?s).{0,64}") {
        let _ = from_json::<DecisionRequest>(&text);
        let _ = from_json::<DecisionResponse>(&text);
        let _ = from_json::<ClientInput>(&text);
    }

    /// Near-valid input: a fixture truncated, or with one byte replaced, is
    /// an error naming a real place or parses; never a panic.
    #[test]
    fn damaged_fixtures_never_panic(
        which in 0usize..4,
        cut in any::<prop::sample::Index>(),
        byte in prop::sample::select(&b"{}[]\":,0n-. x"[..]),
    ) {
        let path = ["decision_request/llm.finished.json", "decision_request/client.messages.json",
            "action/llm.call.json", "client_input/client.messages.json"][which];
        let text = fixture(path);
        let at = cut.index(text.len());

        let truncated = &text[..text.floor_char_boundary(at)];
        if truncated.trim_end() != text.trim_end() {
            let e = from_json::<Value>(truncated).unwrap_err();
            prop_assert!(!e.message().is_empty());
            prop_assert!(from_json::<DecisionRequest>(truncated).is_err());
        }

        let mut bytes = text.clone().into_bytes();
        bytes[at] = byte;
        match from_json_slice::<DecisionRequest>(&bytes) {
            Ok(_) => {}
            Err(e) => prop_assert!(!e.message().is_empty(), "empty message for {}", path),
        }
        let _ = from_json_slice::<Action>(&bytes);
        let _ = from_json_slice::<ClientInput>(&bytes);
    }

    /// Any JSON value in place of any field of a valid request: an error
    /// that names a field inside the request, or a value; never a panic.
    #[test]
    fn any_value_in_any_field_never_panics(
        field in prop::sample::select(vec![
            "session_id", "identity", "trigger", "proposed", "state", "agent", "calls", "pending_calls",
            "messages", "message_tree", "ancestry", "attempts", "deadline", "turn_id",
        ]),
        replacement in prop_oneof![
            Just(json!(null)), Just(json!(1.5)), Just(json!(-1)), Just(json!("x")), Just(json!([])),
            Just(json!({})), Just(json!([{}])), Just(json!({"type": "done"})), Just(json!([{"type": 1}])),
        ],
    ) {
        let mut request: Value = serde_json::from_str(&fixture("decision_request/tool.execute.json")).unwrap();
        request[field] = replacement;
        if let Err(e) = from_json::<DecisionRequest>(&request.to_string()) {
            let at = e.field().unwrap_or_default();
            prop_assert!(at.is_empty() || at.starts_with(field), "error at `{}` for a bad `{}`: {}", at, field, e);
        }
    }
}

/// A request built by hand whose tree points past its messages is an error
/// when written out or copied, never a panic.
#[test]
fn a_request_tree_index_that_points_nowhere_is_an_error() {
    use subs_protocol::{NodeMessage, NodeParent, RequestNode};
    let mut request = DecisionRequest::for_trigger(Trigger::SessionStart);
    request.messages.tree_mut().nodes.push(RequestNode { message: NodeMessage::Active(3), parent: NodeParent::Root });
    let err = serde_json::to_string(&request).unwrap_err().to_string();
    assert!(err.contains("message_tree.nodes[0].message") && err.contains("message 3, which does not exist"), "{err}");
    let err = request.full_tree().unwrap_err();
    assert_eq!(err.field(), Some("message_tree.nodes[0].message"));
    let err = request.tree_nodes().next().unwrap().unwrap_err();
    assert_eq!(err.field(), Some("message_tree.nodes[0].message"));

    request.messages.tree_mut().nodes[0] = RequestNode {
        message: NodeMessage::Other(subs_protocol::from_value(json!({"id": "m", "role": "user"})).unwrap()),
        parent: NodeParent::Node(0),
    };
    let err = request.full_tree().unwrap_err();
    assert_eq!(err.field(), Some("message_tree.nodes[0].parent"));
}
