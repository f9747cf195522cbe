//! Golden fixtures: every file under `tests/fixtures/protocol/<type>/`
//! parses as its type and is written back as the same JSON (compared after
//! sorting object keys, so only the fixture's key order may differ).
//!
//! A fixture that fails to match is either a wire-format regression or a
//! fixture written non-canonically (a `null` where the field should be
//! omitted, `30.0` for a whole number): both are worth failing on.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use subs_protocol::event::ToolProgress;
use subs_protocol::{
    Action, AgentConfig, AgentTool, Call, ClientContext, ClientInput, Content, ContentPart, DecisionRequest,
    DecisionResponse, DraftMessage, ErrorCode, Handler, LlmRequest, LlmResponse, LlmTool, Message, MessageTree,
    ReasoningConfig, RetryPolicy, Role, StreamDelta, SubAgent, ToolCall, ToolInput, Trigger, WorkerIdentity, from_json,
    to_json,
};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/protocol")
}

/// Recursively sorts object keys and prints compactly, so two texts compare
/// equal exactly when they hold the same JSON.
fn canonical(text: &str) -> Result<String, String> {
    fn sort(value: Value) -> Value {
        match value {
            Value::Object(map) => {
                let sorted: BTreeMap<String, Value> = map.into_iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().collect())
            }
            Value::Array(items) => Value::Array(items.into_iter().map(sort).collect()),
            other => other,
        }
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(serde_json::to_string(&sort(value)).expect("a JSON value serializes"))
}

fn round_trip<T: Serialize + DeserializeOwned>(text: &str) -> Result<(), String> {
    let value: T = from_json(text).map_err(|e| format!("does not parse: {e}"))?;
    let written = to_json(&value);
    let (expected, actual) = (canonical(text)?, canonical(&written)?);
    if expected == actual {
        Ok(())
    } else {
        Err(format!("written back differently\n  fixture: {expected}\n  written: {actual}"))
    }
}

/// The Rust type of each fixture directory. A directory missing here fails
/// the test rather than being skipped.
fn check(type_dir: &str, text: &str) -> Result<(), String> {
    match type_dir {
        "decision_request" => round_trip::<DecisionRequest>(text),
        "worker_identity" => round_trip::<WorkerIdentity>(text),
        "call" => round_trip::<Call>(text),
        "decision_response" => round_trip::<DecisionResponse>(text),
        "trigger" => round_trip::<Trigger>(text),
        "tool_input" => round_trip::<ToolInput>(text),
        "error_code" => round_trip::<ErrorCode>(text),
        "client_context" => round_trip::<ClientContext>(text),
        "action" => round_trip::<Action>(text),
        "agent_config" => round_trip::<AgentConfig>(text),
        "agent_tool" => round_trip::<AgentTool>(text),
        "sub_agent" => round_trip::<SubAgent>(text),
        "retry_policy" => round_trip::<RetryPolicy>(text),
        "content" => round_trip::<Content>(text),
        "content_part" => round_trip::<ContentPart>(text),
        "tool_call" => round_trip::<ToolCall>(text),
        "message" => round_trip::<Message>(text),
        "draft_message" => round_trip::<DraftMessage>(text),
        "message_tree" => round_trip::<MessageTree>(text),
        "llm_request" => round_trip::<LlmRequest>(text),
        "llm_tool" => round_trip::<LlmTool>(text),
        "reasoning_config" => round_trip::<ReasoningConfig>(text),
        "llm_response" => round_trip::<LlmResponse>(text),
        "client_input" => round_trip::<ClientInput>(text),
        "stream_delta" => round_trip::<StreamDelta>(text),
        "role" => round_trip::<Role>(text),
        "handler" => round_trip::<Handler>(text),
        "tool_progress" => round_trip::<ToolProgress>(text),
        other => Err(format!("no Rust type is mapped to the fixture directory `{other}`")),
    }
}

/// The fixture files, by type directory, sorted for a stable report.
fn fixtures() -> BTreeMap<String, Vec<PathBuf>> {
    let root = fixtures_dir();
    let mut by_type = BTreeMap::new();
    for dir in fs::read_dir(&root).unwrap_or_else(|e| panic!("reading {}: {e}", root.display())) {
        let dir = dir.expect("directory entry").path();
        let type_dir = dir.file_name().and_then(|n| n.to_str()).expect("UTF-8 name").to_owned();
        assert!(dir.is_dir(), "{}: expected only type directories at the top", dir.display());
        let mut files: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|f| f.expect("directory entry").path())
            .collect();
        files.sort();
        by_type.insert(type_dir, files);
    }
    by_type
}

#[test]
fn every_fixture_round_trips() {
    let mut failures = Vec::new();
    let mut checked = 0;
    for (type_dir, files) in fixtures() {
        for file in files {
            let name = format!("{type_dir}/{}", file.file_name().unwrap_or_default().to_string_lossy());
            if file.extension().and_then(|e| e.to_str()) != Some("json") {
                failures.push(format!("{name}: not a .json file"));
                continue;
            }
            let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {name}: {e}"));
            match check(&type_dir, &text) {
                Ok(()) => checked += 1,
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "{} fixture(s) failed:\n{}", failures.len(), failures.join("\n"));
    assert!(checked > 0, "no fixtures found under {}", fixtures_dir().display());
}

fn names(type_dir: &str) -> Vec<String> {
    fixtures()
        .get(type_dir)
        .unwrap_or_else(|| panic!("no fixture directory `{type_dir}`"))
        .iter()
        .map(|f| f.file_stem().unwrap_or_default().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_union_variant_has_a_fixture() {
    for (type_dir, count) in
        [("trigger", 9), ("action", 10), ("client_input", 6), ("content_part", 5), ("decision_request", 9)]
    {
        assert_eq!(names(type_dir).len(), count, "{type_dir}: fixture count");
    }
    let expect = |type_dir: &str, tags: &[&str]| {
        let mut want: Vec<String> = tags.iter().map(|t| (*t).to_owned()).collect();
        want.sort();
        assert_eq!(names(type_dir), want, "{type_dir}: one fixture per variant");
    };
    let triggers = [
        "session.start",
        "client.messages",
        "client.action",
        "tool.execute",
        "tool.finished",
        "llm.execute",
        "llm.finished",
        "sub_agent.finished",
        "interrupt.resumed",
    ];
    expect("trigger", &triggers);
    expect("decision_request", &triggers);
    expect(
        "action",
        &[
            "llm.call",
            "tool.call",
            "tool.result",
            "tool.error",
            "llm.result",
            "llm.error",
            "sub_agent.spawn",
            "message.send",
            "interrupt",
            "done",
        ],
    );
    expect(
        "client_input",
        &["client.message", "client.messages", "client.action", "interrupt.resume", "tool.result", "tool.error"],
    );
    expect("content_part", &["text", "image_url", "file", "input_audio", "video_url"]);
    expect("tool_input", &["valid", "invalid", "malformed"]);
    expect("error_code", &["provider_error", "rate_limited", "refused", "budget_exceeded", "deadline_exceeded"]);
    expect("role", &["system", "user", "assistant", "tool"]);
    expect("handler", &["server", "worker", "client"]);
}

/// Each fixture's name is its variant's tag, so a file placed under the
/// wrong name cannot stand in for the variant it claims to cover.
#[test]
fn fixture_names_match_their_tags() {
    let root = fixtures_dir();
    for (type_dir, tag_of) in [
        ("trigger", (|v: &Value| v["type"].as_str().map(str::to_owned)) as fn(&Value) -> Option<String>),
        ("action", |v| v["type"].as_str().map(str::to_owned)),
        ("client_input", |v| v["type"].as_str().map(str::to_owned)),
        ("content_part", |v| v["type"].as_str().map(str::to_owned)),
        ("tool_input", |v| v["status"].as_str().map(str::to_owned)),
        ("decision_request", |v| v["trigger"]["type"].as_str().map(str::to_owned)),
        ("error_code", |v| v.as_str().map(str::to_owned)),
        ("role", |v| v.as_str().map(str::to_owned)),
        ("handler", |v| v.as_str().map(str::to_owned)),
    ] {
        for name in names(type_dir) {
            let path = root.join(type_dir).join(format!("{name}.json"));
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{type_dir}/{name}.json: {e}"));
            assert_eq!(
                tag_of(&value).as_deref(),
                Some(name.as_str()),
                "{type_dir}/{name}.json: tag does not match the file name"
            );
        }
    }
}

/// The decision-request fixtures feed tests that push each request through
/// a component and back, so together they must exercise every part of the
/// protocol a request can carry.
#[test]
fn decision_requests_cover_the_protocol() {
    let root = fixtures_dir().join("decision_request");
    let requests: Vec<(String, DecisionRequest)> = names("decision_request")
        .into_iter()
        .map(|name| {
            let text = fs::read_to_string(root.join(format!("{name}.json"))).expect("fixture readable");
            let request = from_json(&text).unwrap_or_else(|e| panic!("decision_request/{name}.json: {e}"));
            (name, request)
        })
        .collect();
    assert_eq!(requests.len(), 9);
    let all = || requests.iter().map(|(_, r)| r);

    // Every action type, each optional field set somewhere.
    let actions: Vec<&Action> = all().flat_map(|r| r.proposed.actions()).collect();
    let mut kinds: Vec<&str> = actions.iter().map(|a| a.kind()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(kinds.len(), 10, "action types in `proposed`: {kinds:?}");
    let action_fields: Vec<String> = actions
        .iter()
        .flat_map(|a| {
            let value = subs_protocol::to_value(*a);
            let kind = a.kind();
            value.as_object().into_iter().flat_map(|o| o.keys().map(move |k| format!("{kind}.{k}"))).collect::<Vec<_>>()
        })
        .collect();
    for field in [
        "llm.call.id",
        "llm.call.model",
        "llm.call.messages",
        "llm.call.tools",
        "llm.call.temperature",
        "llm.call.max_completion_tokens",
        "llm.call.reasoning",
        "llm.call.stream",
        "llm.call.retry",
        "llm.call.handler",
        "tool.call.id",
        "tool.call.handler",
        "tool.call.retry",
        "tool.result.id",
        "tool.result.attempt",
        "tool.error.id",
        "tool.error.attempt",
        "tool.error.retryable",
        "tool.error.code",
        "tool.error.detail",
        "llm.result.id",
        "llm.result.attempt",
        "llm.error.id",
        "llm.error.attempt",
        "llm.error.retryable",
        "llm.error.code",
        "llm.error.detail",
        "sub_agent.spawn.retry",
        "interrupt.interrupt_id",
        "interrupt.payload",
        "done.data",
    ] {
        assert!(action_fields.iter().any(|f| f == field), "no proposed action sets `{field}`");
    }

    // Messages: plain text and all five part types.
    let contents: Vec<&Content> = all().flat_map(|r| &r.messages).filter_map(|m| m.content.as_ref()).collect();
    assert!(contents.iter().any(|c| matches!(c, Content::Text(_))), "no plain-string content");
    let parts: Vec<&str> = contents
        .iter()
        .filter_map(|c| match c {
            Content::Parts(parts) => Some(parts),
            Content::Text(_) => None,
        })
        .flatten()
        .map(|p| match p {
            ContentPart::Text { .. } => "text",
            ContentPart::ImageUrl { .. } => "image_url",
            ContentPart::File { .. } => "file",
            ContentPart::InputAudio { .. } => "input_audio",
            ContentPart::VideoUrl { .. } => "video_url",
        })
        .collect();
    for part in ["text", "image_url", "file", "input_audio", "video_url"] {
        assert!(parts.contains(&part), "no message has a `{part}` part");
    }
    assert!(all().flat_map(|r| &r.messages).any(|m| m.tool_calls.is_some()), "no tool calls");
    assert!(all().flat_map(|r| &r.messages).any(|m| m.tool_call_id.is_some()), "no tool message");
    assert!(all().flat_map(|r| &r.messages).any(|m| m.name.is_some()), "no named message");

    // A tree that branches: some parent has two children.
    assert!(
        all().any(|r| {
            let mut children: BTreeMap<&str, usize> = BTreeMap::new();
            for node in r.tree_nodes() {
                if let (_, Some(parent)) = node.expect("the tree's indices point somewhere") {
                    *children.entry(parent).or_default() += 1;
                }
            }
            children.values().any(|&n| n > 1)
        }),
        "no message tree branches"
    );

    // Calls: every kind and status, every optional field.
    let calls: Vec<Value> = all().flat_map(|r| &r.calls).map(subs_protocol::to_value).collect();
    for (field, values) in [
        ("kind", &["tool_call", "llm_call", "sub_agent"][..]),
        ("status", &["pending", "completed", "failed", "retry_scheduled", "queued"][..]),
    ] {
        for value in values {
            assert!(calls.iter().any(|c| c[field] == *value), "no call with {field} `{value}`");
        }
    }
    for field in ["deadline", "anchor", "name", "arguments", "handler", "stream", "agent_id", "session_id"] {
        assert!(calls.iter().any(|c| c.get(field).is_some()), "no call sets `{field}`");
    }

    // The rest of the request, in both of its shapes.
    assert!(all().any(|r| r.identity.metadata.as_ref().is_some_and(|m| !m.is_empty())), "no identity metadata");
    let full_agent = |a: &AgentConfig| {
        a.system.is_some()
            && a.stream.is_some()
            && a.handler.is_some()
            && a.retry.is_some()
            && a.tools.is_some()
            && a.sub_agents.is_some()
    };
    assert!(all().any(|r| r.agent.as_deref().is_some_and(full_agent)), "no full agent config");
    assert!(all().any(|r| r.agent.as_deref().is_some_and(|a| a.format.is_some())), "no agent with a format");
    assert!(all().any(|r| r.agent.is_none()), "no request with `agent: null`");
    assert!(all().any(|r| r.state.is_object()), "no object state");
    assert!(all().any(|r| r.state.is_null()), "no null state");
    assert!(all().any(|r| !r.ancestry.is_empty()), "no ancestry");
    assert!(all().any(|r| r.deadline.is_some()) && all().any(|r| r.deadline.is_none()), "deadline: set and null");
    assert!(all().any(|r| r.turn_id.is_some()) && all().any(|r| r.turn_id.is_none()), "turn_id: set and null");
    assert!(all().any(|r| r.pending_calls > 0) && all().any(|r| r.attempts > 1), "pending calls and redelivery");
}
