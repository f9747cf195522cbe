//! The OpenAPI 3.1 document, generated from the handlers: each route is
//! registered together with its description in the route table
//! ([`crate::router`]); this module holds what the document says beside
//! them (title, licence, the bearer and operator security schemes, the
//! `servers` entry), the operation ids, and the wire types' schemas.
//!
//! The protocol's types (`ClientInput`, `AgentConfig`, `Message`, `Call`,
//! …) are described once, by the JSON Schema generated from their Rust
//! types (`engine/protocol/schema/protocol.schema.json`, written by
//! `cargo xtask codegen`): [`document`] copies its `$defs` into
//! `components.schemas` and points the server's own schemas at them, so
//! the API's description and the SDKs' types come from the same source.

use serde_json::{Value, json};
use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "subs",
        description = "The subs agent engine's HTTP API. The protocol's types (ClientInput, Message, AgentConfig, Call, …) are the JSON Schemas generated from the engine's Rust types; docs/protocol.md explains them.",
        license(name = "Apache-2.0")
    ),
    components(schemas(crate::error::ErrorBody)),
    security(("bearer" = [])),
    modifiers(&Bearer)
)]
struct Doc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        // The admin routes take the operator key, never a tenant's.
        components.add_security_scheme(
            "operator",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("The operator key (`[admin]` in the config file, or SUBS_ADMIN_KEY)"))
                    .build(),
            ),
        );
    }
}

/// The document's own part: its title, licence and security schemes. The
/// routes' descriptions are added as [`crate::router::api`] registers them.
pub fn base() -> utoipa::openapi::OpenApi {
    Doc::openapi()
}

/// The OpenAPI document: the routes' descriptions, completed by
/// [`complete`].
pub fn document() -> Value {
    let (_, described) = crate::router::api().split_for_parts();
    let mut document = serde_json::to_value(described).expect("the OpenAPI document is JSON");
    complete(&mut document);
    document
}

/// The protocol's JSON Schema, as `cargo xtask codegen` writes it (CI
/// checks that it matches the Rust types).
const PROTOCOL_SCHEMA: &str = include_str!("../../protocol/schema/protocol.schema.json");

/// Each operation's id, by method and path: the names generated clients
/// give their calls. An operation missing here keeps the id its
/// `#[utoipa::path]` gives (`operation_id = "…"`); the tests require every
/// id to be unique and in lowerCamelCase.
const OPERATION_IDS: &[(&str, &str, &str)] = &[
    ("get", "/healthz", "getHealth"),
    ("get", "/metrics", "getMetrics"),
    ("get", "/v1/sessions", "listSessions"),
    ("get", "/v1/sessions/{session_id}", "getSession"),
    ("post", "/v1/sessions/{session_id}/input", "sendInput"),
    ("post", "/v1/sessions/{session_id}/cancel", "cancelSession"),
    ("get", "/v1/sessions/{session_id}/decisions", "listDecisions"),
    ("put", "/v1/sessions/{session_id}/budget", "setSessionBudget"),
    ("get", "/v1/sessions/{session_id}/events", "followSessionEvents"),
    ("get", "/v1/usage", "getUsage"),
    ("get", "/v1/agents", "listAgents"),
    ("get", "/v1/agents/{agent_id}", "getAgent"),
    ("put", "/v1/agents/{agent_id}", "uploadAgent"),
    ("delete", "/v1/agents/{agent_id}", "deleteAgent"),
    ("put", "/v1/agents/{agent_id}/current", "activateAgentVersion"),
    ("delete", "/v1/agents/{agent_id}/versions/{version}", "deleteAgentVersion"),
    ("post", "/v1/agents/{agent_id}/replay", "replayAgent"),
    ("post", "/v1/agents/{agent_id}/ag-ui", "runAgUi"),
    ("post", "/v1/agents/{agent_id}/ai-sdk", "chatAiSdk"),
    ("get", "/v1/agents/{agent_id}/ai-sdk/{chat_id}/stream", "reconnectAiSdk"),
    ("post", "/v1/agents/{agent_id}/mcp", "postMcp"),
    ("get", "/v1/agents/{agent_id}/mcp", "getMcp"),
    ("delete", "/v1/agents/{agent_id}/mcp", "deleteMcp"),
    ("get", "/v1/mcp-servers", "listMcpServers"),
    ("get", "/v1/mcp-servers/{name}", "getMcpServer"),
    ("put", "/v1/mcp-servers/{name}", "putMcpServer"),
    ("delete", "/v1/mcp-servers/{name}", "deleteMcpServer"),
    ("get", "/v1/agents/{agent_id}/versions/{version}", "downloadAgentVersion"),
    ("get", "/v1/mcp-servers", "listMcpServers"),
    ("get", "/v1/mcp-servers/{name}", "getMcpServer"),
    ("put", "/v1/mcp-servers/{name}", "putMcpServer"),
    ("delete", "/v1/mcp-servers/{name}", "deleteMcpServer"),
    ("post", "/v1/tokens", "createToken"),
    ("get", "/v1/admin/tenants", "listTenants"),
    ("get", "/v1/admin/tenants/{tenant}", "getTenant"),
    ("put", "/v1/admin/tenants/{tenant}", "putTenant"),
    ("delete", "/v1/admin/tenants/{tenant}", "deleteTenant"),
    ("get", "/v1/admin/tenants/{tenant}/limits", "getTenantLimits"),
    ("put", "/v1/admin/tenants/{tenant}/limits", "putTenantLimits"),
    ("get", "/v1/admin/keys", "listKeys"),
    ("post", "/v1/admin/keys", "createKey"),
    ("delete", "/v1/admin/keys/{key}", "revokeKey"),
];

/// The routes that take no key at all: probes and scrapes.
const OPEN_ROUTES: &[&str] = &["/healthz", "/metrics"];

/// What a response of each status means when its route says nothing more
/// particular.
fn status_description(status: &str) -> &'static str {
    match status {
        "200" => "Done",
        "201" => "Created",
        "202" => "Accepted",
        "204" => "Nothing to answer",
        "400" => "A malformed request; `field` names what is wrong",
        "401" => "No key, or a key the server does not know",
        "403" => "The key may not do this",
        "404" => "Not found",
        "409" => "The request conflicts with what is stored",
        "413" => "The body is larger than the tenant's `max_body_bytes`",
        "415" => "A content type the route does not take",
        "422" => "The body is well-formed but cannot be used",
        "429" => "One of the tenant's limits is reached; `Retry-After` says when to try again",
        "503" => "The server cannot serve the request now",
        _ => "See the operation's description",
    }
}

/// Fills in what the handlers' annotations leave out: a description for
/// every response, the operation ids, `security: []` on the open routes,
/// the `servers` entry, the protocol's schemas, and the real schemas of
/// the bodies and fields the annotations could only call objects.
pub fn complete(document: &mut Value) {
    document["servers"] = json!([{
        "url": "/",
        "description": "The server that serves this document (`GET /v1/openapi.json`)"
    }]);
    let paths = document["paths"].as_object_mut().expect("the document has paths");
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, operation) in item.iter_mut() {
            if let Some((_, _, id)) = OPERATION_IDS.iter().find(|(m, p, _)| m == method && p == path) {
                operation["operationId"] = json!(id);
            }
            if OPEN_ROUTES.contains(&path.as_str()) {
                operation["security"] = json!([]);
            }
            // A parameter is absent or has a value: it is never `null`.
            for parameter in operation.get_mut("parameters").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(Value::Array(types)) = parameter.pointer_mut("/schema/type") {
                    types.retain(|t| t != "null");
                    if let [only] = types.as_slice() {
                        parameter["schema"]["type"] = only.clone();
                    }
                }
            }
            if let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) {
                for (status, response) in responses.iter_mut() {
                    if response.get("description").is_none() {
                        response["description"] = json!(status_description(status));
                    }
                    binary_bodies(response);
                }
            }
            if let Some(body) = operation.get_mut("requestBody") {
                binary_bodies(body);
            }
        }
    }
    let schemas = document
        .pointer_mut("/components/schemas")
        .and_then(Value::as_object_mut)
        .expect("the document has component schemas");
    for (name, schema) in protocol_schemas() {
        let clash = schemas.insert(name.clone(), schema);
        assert!(clash.is_none(), "the protocol's `{name}` and the server's schema of that name clash");
    }
    for (name, schema) in own_schemas() {
        schemas.insert(name.to_owned(), schema);
    }
    for (schema, property, replacement) in fields() {
        let place = schemas
            .get_mut(schema)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(property))
            .unwrap_or_else(|| panic!("the OpenAPI document has no `{schema}.{property}` to describe"));
        let description = place.get("description").cloned();
        *place = replacement;
        if let (Some(description), Some(place)) = (description, place.as_object_mut()) {
            place.entry("description").or_insert(description);
        }
    }
    // An upload's JSON body registers an HTTP worker or names a component
    // to pull (each annotation names one schema per media type).
    let uploads: Vec<Value> =
        ["HttpAgent", "OciAgent"].into_iter().filter(|name| schemas.contains_key(*name)).map(schema_ref).collect();
    let mut bodies = request_bodies();
    bodies.push(("put", "/v1/agents/{agent_id}", "application/json", json!({"oneOf": uploads})));
    for (method, path, media, schema) in bodies {
        let place = document
            .pointer_mut(&format!("/paths/{}/{method}/requestBody/content/{}", pointer(path), pointer(media)))
            .unwrap_or_else(|| panic!("the OpenAPI document has no {media} body on {method} {path}"));
        place["schema"] = schema;
    }
}

/// Describes a component body (`application/wasm`) as bytes: the
/// annotations' `Vec<u8>` reads as an array of integers.
fn binary_bodies(body: &mut Value) {
    if let Some(wasm) = body.pointer_mut("/content/application~1wasm") {
        wasm["schema"] = json!({"type": "string", "format": "binary", "contentMediaType": "application/wasm"});
    }
}

/// A `oneOf` of string constants (the protocol's enums, each value with
/// its own description) as one string `enum`, the values' descriptions
/// listed in its own: generators make an enum type of it, where a union
/// of constants becomes a union of one-value types some of them cannot
/// parse (openapi-python-client tries the first only).
fn string_enum(schema: &mut serde_json::Map<String, Value>) {
    let Some(Value::Array(variants)) = schema.get("oneOf") else { return };
    let constants: Option<Vec<(&str, Option<&str>)>> = variants
        .iter()
        .map(|v| {
            let text = (v.get("type")? == "string").then(|| v.get("const")?.as_str()).flatten()?;
            Some((text, v.get("description").and_then(Value::as_str)))
        })
        .collect();
    let Some(constants) = constants else { return };
    let mut description = schema.get("description").and_then(Value::as_str).unwrap_or_default().to_owned();
    for (value, meaning) in constants.iter().filter_map(|(v, m)| Some((v, (*m)?))) {
        description.push_str(&format!("\n- `{value}`: {meaning}"));
    }
    let values: Vec<Value> = constants.iter().map(|(v, _)| json!(v)).collect();
    schema.remove("oneOf");
    schema.insert("type".into(), json!("string"));
    schema.insert("enum".into(), Value::Array(values));
    schema.insert("description".into(), json!(description.trim_start()));
}

/// `text` as one JSON pointer token.
fn pointer(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

/// `#/components/schemas/{name}`.
fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// `name` or `null`.
fn nullable_ref(name: &str) -> Value {
    json!({"anyOf": [schema_ref(name), {"type": "null"}]})
}

/// The protocol's `$defs`, their references pointed at the document's
/// `components.schemas`; and `PostedInput`, the body of `…/input`: a
/// `ClientInput` whose session-creating kinds may carry the session's
/// `identity`.
fn protocol_schemas() -> Vec<(String, Value)> {
    let mut protocol: Value = serde_json::from_str(PROTOCOL_SCHEMA).expect("the protocol's schema is JSON");
    rewrite_refs(&mut protocol);
    let Some(Value::Object(defs)) = protocol.get_mut("$defs").map(Value::take) else {
        panic!("the protocol's schema has no $defs");
    };
    let mut posted = defs.get("ClientInput").cloned().expect("the protocol's schema has ClientInput");
    for variant in posted["oneOf"].as_array_mut().expect("ClientInput is a oneOf").iter_mut() {
        let kind = variant.pointer("/properties/type/const").and_then(Value::as_str).unwrap_or_default();
        if ["client.message", "client.messages", "client.action"].contains(&kind) {
            variant["properties"]["identity"] = json!({
                "anyOf": [schema_ref("WorkerIdentity"), {"type": "null"}],
                "description": "The owner of the session this input creates; refused (409) for an existing session \
                                owned by another identity. An end-user token's identity replaces it."
            });
        }
    }
    posted["description"] = json!(
        "The body of `POST /v1/sessions/{session_id}/input`: a `ClientInput`, whose kinds \
                                   that create a session may name the session's `identity`."
    );
    let mut out: Vec<(String, Value)> = defs.into_iter().collect();
    out.push(("PostedInput".into(), posted));
    out
}

/// Points every `#/$defs/X` reference at `#/components/schemas/X`, and
/// writes the schema `true` (anything) of an array's items or of a
/// property as `{}`: JSON Schema allows both, and some OpenAPI tools
/// (openapi-python-client) read only the object.
fn rewrite_refs(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::String(reference)) = map.get_mut("$ref")
                && let Some(name) = reference.strip_prefix("#/$defs/")
            {
                *reference = format!("#/components/schemas/{name}");
            }
            if let Some(items) = map.get_mut("items")
                && *items == Value::Bool(true)
            {
                *items = json!({});
            }
            if let Some(Value::Object(properties)) = map.get_mut("properties") {
                for property in properties.values_mut().filter(|p| **p == Value::Bool(true)) {
                    *property = json!({});
                }
            }
            string_enum(map);
            map.values_mut().for_each(rewrite_refs);
        }
        Value::Array(items) => items.iter_mut().for_each(rewrite_refs),
        _ => {}
    }
}

/// Schemas of what the server sends or takes beside the protocol's types:
/// the frontends' request bodies, as the fields the server reads (both
/// frontends' objects are open: clients add fields of their own, which
/// are ignored), and the snapshot's open interrupts.
fn own_schemas() -> Vec<(&'static str, Value)> {
    let any = json!({});
    vec![
        (
            "OpenInterrupt",
            json!({
                "type": "object",
                "description": "An interrupt waiting for `interrupt.resume`.",
                "properties": {
                    "interrupt_id": {"type": "string", "description": "Its id."},
                    "reason": {"type": "string", "description": "Why it was raised."},
                    "payload": {"description": "What the resumer needs; `null` when nothing."},
                    "resume_schema": {"description": "The JSON Schema a resume payload must satisfy; omitted: any payload."}
                },
                "required": ["interrupt_id", "reason", "payload"]
            }),
        ),
        (
            "RunAgentInput",
            json!({
                "type": "object",
                "description": "AG-UI's `RunAgentInput`, as the fields subs reads: `threadId` is the session, `runId` the turn.",
                "properties": {
                    "threadId": {"type": "string", "description": "The session."},
                    "runId": {"type": "string", "description": "The turn's id."},
                    "state": {"description": "The frontend's state (handed to the agent as the client's state)."},
                    "messages": {
                        "type": "array",
                        "description": "AG-UI messages (`user`, `assistant`, `tool`, `system`, `developer`), oldest first.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "role": {"type": "string", "enum": ["user", "assistant", "tool", "system", "developer"]},
                                "content": any,
                                "name": {"type": ["string", "null"]},
                                "toolCalls": {"type": ["array", "null"], "items": {"$ref": "#/components/schemas/AgUiToolCall"}},
                                "toolCallId": {"type": "string"},
                                "error": {"type": ["string", "null"]}
                            },
                            "required": ["id", "role"]
                        }
                    },
                    "tools": {
                        "type": "array",
                        "description": "Tools the frontend runs.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "description": {"type": ["string", "null"]},
                                "parameters": {"description": "The tool's parameters, a JSON Schema."}
                            },
                            "required": ["name"]
                        }
                    },
                    "context": {
                        "type": "array",
                        "description": "Ambient information for the run.",
                        "items": {
                            "type": "object",
                            "properties": {"description": {"type": "string"}, "value": {"type": "string"}},
                            "required": ["description", "value"]
                        }
                    },
                    "forwardedProps": {"description": "Anything the frontend forwards."},
                    "resume": {
                        "type": ["array", "null"],
                        "description": "Answers to open interrupts instead of new messages.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "interruptId": {"type": "string"},
                                "status": {"type": "string", "enum": ["resolved", "cancelled"]},
                                "payload": any
                            },
                            "required": ["interruptId", "status"]
                        }
                    }
                },
                "required": ["threadId", "runId", "messages"]
            }),
        ),
        (
            "AgUiToolCall",
            json!({
                "type": "object",
                "description": "A tool call on an AG-UI `assistant` message.",
                "properties": {
                    "id": {"type": "string"},
                    "type": {"type": "string", "const": "function"},
                    "function": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
                        "required": ["name", "arguments"]
                    }
                },
                "required": ["id", "function"]
            }),
        ),
        (
            "AiSdkChatRequest",
            json!({
                "type": "object",
                "description": "What the AI SDK's `DefaultChatTransport` posts, with the extra `body` fields subs reads.",
                "properties": {
                    "id": {"type": "string", "description": "The chat's id: the session."},
                    "messages": {
                        "type": "array",
                        "description": "The chat's UI messages (`UIMessage`: `id`, `role`, `parts`), oldest first.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "id": {"type": "string"},
                                "role": {"type": "string", "enum": ["user", "assistant", "system"]},
                                "parts": {"type": "array", "items": {"type": "object"}},
                                "metadata": any
                            },
                            "required": ["role", "parts"]
                        }
                    },
                    "trigger": {
                        "anyOf": [{"type": "string", "enum": ["submit-message", "regenerate-message"]}, {"type": "null"}],
                        "description": "`submit-message` (default) or `regenerate-message`."
                    },
                    "messageId": {"type": ["string", "null"], "description": "The message the trigger concerns."},
                    "tools": {
                        "type": ["array", "null"],
                        "items": schema_ref("AgentTool"),
                        "description": "Client tools for the turn (handler `client` unless they say otherwise)."
                    },
                    "context": {"type": ["array", "null"], "items": any, "description": "Extra context items for the agent."},
                    "resume": {
                        "type": ["object", "null"],
                        "description": "Answers an interrupt instead of sending messages.",
                        "properties": {"interrupt_id": {"type": "string"}, "payload": any},
                        "required": ["interrupt_id"],
                        "additionalProperties": false
                    },
                    "identity": {
                        "anyOf": [schema_ref("WorkerIdentity"), {"type": "null"}],
                        "description": "The owner of a session this request creates, as on `…/input`."
                    }
                },
                "required": ["id", "messages"]
            }),
        ),
    ]
}

/// The server's own schemas' fields that hold protocol types (or any JSON
/// value): what each really is.
fn fields() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("SessionView", "agent", nullable_ref("AgentConfig")),
        (
            "SessionView",
            "state",
            json!({"description": "The agent's state: any JSON value; `null` until it sets one."}),
        ),
        ("SessionView", "messages", json!({"type": "array", "items": schema_ref("Message")})),
        ("SessionView", "message_tree", schema_ref("MessageTree")),
        ("SessionView", "calls", json!({"type": "array", "items": schema_ref("Call")})),
        ("SessionView", "interrupts", json!({"type": "array", "items": schema_ref("OpenInterrupt")})),
        ("SessionView", "identity", schema_ref("WorkerIdentity")),
        ("SessionSummary", "identity", schema_ref("WorkerIdentity")),
        ("DecisionView", "decision", nullable_ref("DecisionResponse")),
        ("TokenRequest", "identity", nullable_ref("WorkerIdentity")),
        ("Token", "identity", nullable_ref("WorkerIdentity")),
    ]
}

/// Request bodies the annotations could only call objects or bytes.
fn request_bodies() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    vec![
        ("post", "/v1/sessions/{session_id}/input", "application/json", schema_ref("PostedInput")),
        ("post", "/v1/agents/{agent_id}/ag-ui", "application/json", schema_ref("RunAgentInput")),
        ("post", "/v1/agents/{agent_id}/ai-sdk", "application/json", schema_ref("AiSdkChatRequest")),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn operation_ids_are_unique_and_camel_case() {
        let document = document();
        let mut seen = HashSet::new();
        for (path, item) in document["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let id = operation["operationId"].as_str().unwrap_or_default();
                assert!(
                    id.starts_with(|c: char| c.is_ascii_lowercase())
                        && id.chars().all(|c| c.is_ascii_alphanumeric())
                        && id.chars().any(|c| c.is_ascii_uppercase()),
                    "{method} {path}: operation id `{id}` is no lowerCamelCase name of two words or more; name it in \
                     OPERATION_IDS"
                );
                assert!(seen.insert(id.to_owned()), "{method} {path}: operation id `{id}` is used twice");
                for (status, response) in operation["responses"].as_object().unwrap() {
                    assert!(response["description"].is_string(), "{method} {path} {status} has no description");
                }
            }
        }
    }

    #[test]
    fn every_reference_resolves() {
        fn refs<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
            match value {
                Value::Object(map) => {
                    if let Some(Value::String(r)) = map.get("$ref") {
                        out.push(r);
                    }
                    map.values().for_each(|v| refs(v, out));
                }
                Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
                _ => {}
            }
        }
        let document = document();
        let mut found = Vec::new();
        refs(&document, &mut found);
        for reference in found {
            let name = reference.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{reference}"));
            assert!(document["components"]["schemas"][name].is_object(), "{reference} does not resolve");
        }
    }
}
