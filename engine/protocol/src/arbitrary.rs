//! Proptest strategies for every protocol type, for property tests in any
//! crate (enable the `proptest` feature).
//!
//! The values are built so that a JSON or WIT round trip can be exact:
//!
//! - an optional `unknown` field is never `Some(Value::Null)`, because on
//!   the wire `null` and an omitted field both read back as `None`
//!   (required `unknown` fields such as `state` or `arguments` may be
//!   `null`);
//! - every `f64` is finite, since JSON has no form for the others;
//! - optional lists are `None`, `Some(vec![])` or non-empty, the three
//!   shapes a reader must keep apart.
//!
//! Sizes stay small (a few list elements, short strings, JSON a few levels
//! deep) so that a case of the largest type, [`decision_request`], is cheap.
//!
//! ```
//! use proptest::prelude::*;
//! use subs_protocol::arbitrary;
//!
//! proptest!(|(action in arbitrary::action())| {
//!     let json = subs_protocol::to_json(&action);
//!     prop_assert_eq!(subs_protocol::from_json::<subs_protocol::Action>(&json).unwrap(), action);
//! });
//! ```

use std::sync::Arc;

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Map, Value};

use crate::action::{
    self, Done, Interrupt, LlmCall, LlmError, LlmResult, MessageSend, SubAgentSpawn, ToolError, ToolResult,
};
use crate::client::{self, InterruptResume};
use crate::decision::{CallKind, CallStatus};
use crate::llm::ToolCallDelta;
use crate::trigger::{self, InterruptResumed, LlmExecute, LlmFinished, SubAgentFinished, ToolExecute, ToolFinished};
use crate::{
    Action, AgentConfig, AgentTool, AudioData, Call, ClientContext, ClientInput, Content, ContentPart, DecisionRequest,
    DecisionResponse, DraftMessage, ErrorCode, FileData, FunctionCall, Handler, LlmFormat, LlmHandler, LlmRequest,
    LlmResponse, LlmTool, McpServerUse, Message, MessageTree, ReasoningConfig, ReasoningEffort, RequestTree,
    RetryPolicy, Role, SharedMessage, StreamDelta, SubAgent, ToolCall, ToolHandler, ToolInput, ToolSchema, TreeNode,
    Trigger, UrlRef, WorkerIdentity,
};

// ---- building blocks ---------------------------------------------------

/// Short text: mostly ASCII words, sometimes empty, sometimes arbitrary
/// unicode (control characters, combining marks, emoji, newlines).
pub fn text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => "[a-zA-Z][a-zA-Z0-9 _.,!?-]{0,15}",
        1 => Just(String::new()),
        1 => "[a-zà-ÿ日本語中文🌦️👋 ]{1,8}",
        2 => "(?s).{0,8}",
    ]
    .boxed()
}

/// An identifier-like string (`call_x7Kq2`), sometimes with unicode, since
/// nothing on the wire restricts ids.
pub fn id() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "(call|msg|sess|dec|turn|int)_[A-Za-z0-9]{3,10}",
        1 => "[a-z0-9-]{1,12}",
        1 => "(?s).{0,6}",
    ]
    .boxed()
}

/// A name as a tool, model or agent id might be written.
fn name() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "[a-z][a-z0-9_]{0,11}",
        1 => "[a-z]{2,8}/[a-z0-9.-]{1,12}",
        1 => "(?s).{0,6}",
    ]
    .boxed()
}

/// An RFC 3339 timestamp (or, rarely, any string: the wire type is a
/// plain string).
pub fn timestamp() -> BoxedStrategy<String> {
    prop_oneof![
        6 => "20[2-3][0-9]-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{3})?(Z|[+-]0[0-9]:00)",
        1 => text(),
    ]
    .boxed()
}

/// A `u32` that is usually small (an attempt or a count) and sometimes any
/// value, edges included.
fn small_u32() -> BoxedStrategy<u32> {
    prop_oneof![
        6 => 0u32..=5,
        1 => Just(u32::MAX),
        2 => any::<u32>(),
    ]
    .boxed()
}

/// Any finite `f64`: whole numbers, fractions, huge and tiny magnitudes,
/// negative zero.
pub fn finite_f64() -> BoxedStrategy<f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    prop_oneof![
        3 => (-1000i32..=1000).prop_map(f64::from),
        3 => (-4000i32..=4000).prop_map(|n| f64::from(n) / 8.0),
        2 => -1000.0f64..1000.0,
        2 => POSITIVE | NEGATIVE | NORMAL | SUBNORMAL | ZERO,
        1 => Just(9_007_199_254_740_994.0f64),
        1 => Just(1e300f64),
    ]
    .boxed()
}

/// Seconds, as retry policies hold them: whole numbers like `30`, fractions
/// like `0.25`, occasionally any finite number.
fn seconds() -> BoxedStrategy<f64> {
    prop_oneof![
        4 => (0u32..=3600).prop_map(f64::from),
        3 => (0u32..=4000).prop_map(|n| f64::from(n) / 4.0),
        2 => 0.0f64..600.0,
        1 => finite_f64(),
    ]
    .boxed()
}

/// A sampling temperature: usually in `0..=2`, whole or fractional.
fn temperature() -> BoxedStrategy<f64> {
    prop_oneof![
        2 => (0u8..=2).prop_map(f64::from),
        3 => (0u8..=20).prop_map(|n| f64::from(n) / 10.0),
        2 => 0.0f64..2.0,
        1 => finite_f64(),
    ]
    .boxed()
}

/// `None`, `Some(vec![])` or a non-empty list of up to `max` elements: the
/// three shapes an optional list must keep apart.
pub fn opt_vec<T: std::fmt::Debug + Clone + 'static>(
    element: impl Strategy<Value = T> + 'static,
    max: usize,
) -> BoxedStrategy<Option<Vec<T>>> {
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Vec::new())),
        3 => vec(element, 1..=max.max(1)).prop_map(Some),
    ]
    .boxed()
}

fn json_string() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "[a-zA-Z0-9 _.-]{0,12}",
        2 => "(?s).{0,8}",
        1 => "[\"\\\\/\\x00-\\x1f\\x7f\\x{2028}\\x{2029}é😀]{0,4}",
    ]
    .boxed()
}

/// Any JSON value: `null`, booleans, `i64` and `u64` integers, finite
/// floats, strings of any unicode, arrays and objects, nested a few levels
/// with a few elements each.
pub fn json_value() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        2 => (-100i64..=100).prop_map(Value::from),
        2 => finite_f64().prop_map(Value::from),
        3 => json_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..=4).prop_map(Value::Array),
            // A list of pairs rather than a map keeps the generated key order
            // arbitrary (the crate preserves key order); a repeated key keeps
            // its first position and its last value.
            vec((json_string(), inner), 0..=4)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
    .boxed()
}

/// Any JSON value but `null`, for optional `unknown` fields, where `null`
/// reads back as omitted.
pub fn json_value_not_null() -> BoxedStrategy<Value> {
    json_value().prop_filter("null reads back as omitted", |v| !v.is_null()).boxed()
}

/// An optional `unknown` field: `None` or a non-null value.
pub fn opt_json() -> BoxedStrategy<Option<Value>> {
    option::of(json_value_not_null()).boxed()
}

/// JSON text as a model writes tool-call arguments: usually valid JSON,
/// sometimes not.
fn json_text() -> BoxedStrategy<String> {
    prop_oneof![
        3 => json_value().prop_map(|v| crate::to_json(&v)),
        1 => text(),
    ]
    .boxed()
}

// ---- enums -------------------------------------------------------------

/// Any [`Role`].
pub fn role() -> BoxedStrategy<Role> {
    prop_oneof![Just(Role::System), Just(Role::User), Just(Role::Assistant), Just(Role::Tool)].boxed()
}

/// Any [`Handler`].
pub fn handler() -> BoxedStrategy<Handler> {
    prop_oneof![Just(Handler::Server), Just(Handler::Worker), Just(Handler::Client)].boxed()
}

/// Any [`LlmHandler`].
pub fn llm_handler() -> BoxedStrategy<LlmHandler> {
    prop_oneof![Just(LlmHandler::Server), Just(LlmHandler::Worker)].boxed()
}

/// Any [`ToolHandler`].
pub fn tool_handler() -> BoxedStrategy<ToolHandler> {
    prop_oneof![Just(ToolHandler::Worker), Just(ToolHandler::Client)].boxed()
}

/// Any [`LlmFormat`].
pub fn llm_format() -> BoxedStrategy<LlmFormat> {
    prop_oneof![Just(LlmFormat::Openai), Just(LlmFormat::Anthropic)].boxed()
}

/// Any [`ReasoningEffort`].
pub fn reasoning_effort() -> BoxedStrategy<ReasoningEffort> {
    prop_oneof![
        Just(ReasoningEffort::Xhigh),
        Just(ReasoningEffort::High),
        Just(ReasoningEffort::Medium),
        Just(ReasoningEffort::Low),
        Just(ReasoningEffort::Minimal),
        Just(ReasoningEffort::None),
    ]
    .boxed()
}

/// Any [`ErrorCode`].
pub fn error_code() -> BoxedStrategy<ErrorCode> {
    prop_oneof![
        Just(ErrorCode::ProviderError),
        Just(ErrorCode::RateLimited),
        Just(ErrorCode::Refused),
        Just(ErrorCode::BudgetExceeded),
        Just(ErrorCode::DeadlineExceeded),
    ]
    .boxed()
}

/// Any [`CallKind`].
pub fn call_kind() -> BoxedStrategy<CallKind> {
    prop_oneof![Just(CallKind::ToolCall), Just(CallKind::LlmCall), Just(CallKind::SubAgent)].boxed()
}

/// Any [`CallStatus`].
pub fn call_status() -> BoxedStrategy<CallStatus> {
    prop_oneof![
        Just(CallStatus::Pending),
        Just(CallStatus::Completed),
        Just(CallStatus::Failed),
        Just(CallStatus::RetryScheduled),
        Just(CallStatus::Queued),
    ]
    .boxed()
}

// ---- messages ----------------------------------------------------------

fn url() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "https://[a-z]{3,10}\\.(com|org|dev)/[a-z0-9/_-]{0,16}\\.(png|jpg|mp4|webm)",
        1 => "data:image/png;base64,[A-Za-z0-9+/]{4,16}={0,2}",
        1 => text(),
    ]
    .boxed()
}

fn url_ref() -> BoxedStrategy<UrlRef> {
    url().prop_map(|url| UrlRef { url }).boxed()
}

/// Any [`ContentPart`]: text, image, file, audio or video.
pub fn content_part() -> BoxedStrategy<ContentPart> {
    prop_oneof![
        text().prop_map(|text| ContentPart::Text { text }),
        url_ref().prop_map(|image_url| ContentPart::ImageUrl { image_url }),
        ("[a-z_]{1,10}\\.(pdf|txt|csv)|(?s).{0,6}", "[A-Za-z0-9+/]{0,16}={0,2}")
            .prop_map(|(filename, file_data)| ContentPart::File { file: FileData { filename, file_data } }),
        ("[A-Za-z0-9+/]{0,16}={0,2}", "wav|mp3|flac|[a-z]{0,4}")
            .prop_map(|(data, format)| ContentPart::InputAudio { input_audio: AudioData { data, format } }),
        url_ref().prop_map(|video_url| ContentPart::VideoUrl { video_url }),
    ]
    .boxed()
}

/// Any [`Content`]: a string, or a list of parts (possibly empty).
pub fn content() -> BoxedStrategy<Content> {
    prop_oneof![text().prop_map(Content::Text), vec(content_part(), 0..=3).prop_map(Content::Parts),].boxed()
}

/// Any [`ToolCall`] a model writes on an assistant message.
pub fn tool_call() -> BoxedStrategy<ToolCall> {
    (id(), prop_oneof![4 => Just("function".to_owned()), 1 => text()], name(), json_text())
        .prop_map(|(id, kind, name, arguments)| ToolCall { id, kind, function: FunctionCall { name, arguments } })
        .boxed()
}

/// Any [`Message`].
pub fn message() -> BoxedStrategy<Message> {
    (id(), role(), option::of(content()), opt_vec(tool_call(), 3), option::of(id()), option::of(name()))
        .prop_map(|(id, role, content, tool_calls, tool_call_id, name)| Message {
            id,
            role,
            content,
            tool_calls,
            tool_call_id,
            name,
        })
        .boxed()
}

/// Any [`DraftMessage`].
pub fn draft_message() -> BoxedStrategy<DraftMessage> {
    (option::of(id()), role(), option::of(content()), opt_vec(tool_call(), 3), option::of(id()), option::of(name()))
        .prop_map(|(id, role, content, tool_calls, tool_call_id, name)| DraftMessage {
            id,
            role,
            content,
            tool_calls,
            tool_call_id,
            name,
        })
        .boxed()
}

/// Any [`MessageTree`]. Mostly a real tree (each node's parent an earlier
/// node, so branches fork, and the head one of the nodes); sometimes
/// dangling parents or head, which the wire type allows.
pub fn message_tree() -> BoxedStrategy<MessageTree> {
    let tree = (vec((message(), any::<Index>(), any::<bool>()), 0..=5), any::<Index>()).prop_map(|(nodes, head)| {
        let ids: Vec<String> = nodes.iter().map(|(m, _, _)| m.id.clone()).collect();
        let head_id = (!ids.is_empty()).then(|| head.get(&ids).clone());
        let nodes = nodes
            .into_iter()
            .enumerate()
            .map(|(i, (message, parent, root))| TreeNode {
                message,
                parent_id: (i > 0 && !root).then(|| parent.get(&ids[..i]).clone()),
            })
            .collect();
        MessageTree { nodes, head_id }
    });
    let loose =
        (vec((message(), option::of(id())), 0..=3), option::of(id())).prop_map(|(nodes, head_id)| MessageTree {
            nodes: nodes.into_iter().map(|(message, parent_id)| TreeNode { message, parent_id }).collect(),
            head_id,
        });
    prop_oneof![3 => tree, 1 => loose].boxed()
}

// ---- config ------------------------------------------------------------

/// Any [`RetryPolicy`]: `timeout_secs` absent or set, whole and fractional
/// seconds.
pub fn retry_policy() -> BoxedStrategy<RetryPolicy> {
    (option::of(seconds()), small_u32(), seconds(), seconds())
        .prop_map(|(timeout_secs, max_retries, backoff_base_secs, backoff_max_secs)| RetryPolicy {
            timeout_secs,
            max_retries,
            backoff_base_secs,
            backoff_max_secs,
        })
        .boxed()
}

/// Any [`AgentTool`].
pub fn agent_tool() -> BoxedStrategy<AgentTool> {
    (name(), option::of(text()), opt_json(), opt_json(), option::of(tool_handler()))
        .prop_map(|(name, description, input, output, handler)| AgentTool {
            name,
            description,
            input: input.map(ToolSchema::new),
            output: output.map(ToolSchema::new),
            handler,
        })
        .boxed()
}

/// Any [`SubAgent`].
pub fn sub_agent() -> BoxedStrategy<SubAgent> {
    (name(), option::of(text())).prop_map(|(id, description)| SubAgent { id, description }).boxed()
}

/// Any [`AgentConfig`].
pub fn agent_config() -> BoxedStrategy<AgentConfig> {
    (
        name(),
        option::of(text()),
        option::of(any::<bool>()),
        option::of(llm_handler()),
        option::of(llm_format()),
        option::of(retry_policy()),
        opt_vec(agent_tool(), 3),
        opt_vec(sub_agent(), 3),
        opt_vec(mcp_server_use(), 2),
    )
        .prop_map(|(model, system, stream, handler, format, retry, tools, sub_agents, mcp)| AgentConfig {
            model,
            system,
            stream,
            handler,
            format,
            retry,
            tools,
            sub_agents,
            mcp,
        })
        .boxed()
}

/// Any [`McpServerUse`].
pub fn mcp_server_use() -> BoxedStrategy<McpServerUse> {
    (name(), opt_vec(name(), 3)).prop_map(|(server, tools)| McpServerUse { server, tools }).boxed()
}

// ---- llm ---------------------------------------------------------------

/// Any [`LlmTool`].
pub fn llm_tool() -> BoxedStrategy<LlmTool> {
    (name(), text(), opt_json(), opt_json())
        .prop_map(|(name, description, input, output)| LlmTool {
            name,
            description,
            input: input.map(ToolSchema::new),
            output: output.map(ToolSchema::new),
        })
        .boxed()
}

/// Any [`ReasoningConfig`].
pub fn reasoning_config() -> BoxedStrategy<ReasoningConfig> {
    (option::of(reasoning_effort()), option::of(small_u32()), option::of(any::<bool>()), option::of(any::<bool>()))
        .prop_map(|(effort, max_tokens, exclude, enabled)| ReasoningConfig { effort, max_tokens, exclude, enabled })
        .boxed()
}

/// Any [`LlmRequest`].
pub fn llm_request() -> BoxedStrategy<LlmRequest> {
    (
        name(),
        vec(draft_message(), 0..=3),
        opt_vec(llm_tool(), 3),
        option::of(temperature()),
        option::of(small_u32()),
        option::of(reasoning_config()),
    )
        .prop_map(|(model, messages, tools, temperature, max_completion_tokens, reasoning)| LlmRequest {
            model,
            messages: messages.into(),
            tools,
            temperature,
            max_completion_tokens,
            reasoning,
        })
        .boxed()
}

fn cost() -> BoxedStrategy<String> {
    prop_oneof![
        3 => "0\\.[0-9]{1,6}",
        1 => "[1-9][0-9]{0,2}\\.[0-9]{2}",
        1 => text(),
    ]
    .boxed()
}

fn finish_reason() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop_oneof![Just("stop"), Just("tool_calls"), Just("length"), Just("content_filter")]
            .prop_map(str::to_owned),
        1 => text(),
    ]
    .boxed()
}

/// Any [`LlmResponse`].
pub fn llm_response() -> BoxedStrategy<LlmResponse> {
    (
        name(),
        option::of(text()),
        opt_vec(tool_call(), 3),
        option::of(finish_reason()),
        opt_json(),
        option::of(cost()),
        opt_vec(url_ref(), 3),
    )
        .prop_map(|(model, content, tool_calls, finish_reason, usage, cost, images)| LlmResponse {
            model,
            content,
            tool_calls,
            finish_reason,
            usage,
            cost,
            images,
        })
        .boxed()
}

/// Any [`ToolCallDelta`].
pub fn tool_call_delta() -> BoxedStrategy<ToolCallDelta> {
    (id(), option::of(name()), option::of(text()))
        .prop_map(|(id, name, arguments)| ToolCallDelta { id, name, arguments })
        .boxed()
}

/// Any [`StreamDelta`].
pub fn stream_delta() -> BoxedStrategy<StreamDelta> {
    (option::of(text()), option::of(text()), opt_vec(tool_call_delta(), 3), option::of(finish_reason()))
        .prop_map(|(text, reasoning, tool_calls, finish_reason)| StreamDelta {
            text,
            reasoning,
            tool_calls,
            finish_reason,
        })
        .boxed()
}

/// A value for `llm.execute`'s `request` or `llm.result`'s `response`:
/// half the time the typed form as JSON, half the time anything (a
/// provider-native body).
fn llm_body<T: serde::Serialize + std::fmt::Debug + 'static>(typed: BoxedStrategy<T>) -> BoxedStrategy<Value> {
    prop_oneof![typed.prop_map(|t| crate::to_value(&t)), json_value(),].boxed()
}

// ---- triggers ----------------------------------------------------------

/// Any [`ToolInput`]: valid, invalid or malformed arguments.
pub fn tool_input() -> BoxedStrategy<ToolInput> {
    prop_oneof![
        json_value().prop_map(|value| ToolInput::Valid { value }),
        (json_value(), text()).prop_map(|(value, error)| ToolInput::Invalid { value, error }),
        text().prop_map(|error| ToolInput::Malformed { error }),
    ]
    .boxed()
}

/// Any [`ClientContext`].
pub fn client_context() -> BoxedStrategy<ClientContext> {
    (opt_vec(agent_tool(), 3), opt_vec(json_value(), 3), opt_json(), opt_json())
        .prop_map(|(tools, context, state, forwarded_props)| ClientContext { tools, context, state, forwarded_props })
        .boxed()
}

/// Any [`Trigger`], all nine variants.
pub fn trigger() -> BoxedStrategy<Trigger> {
    let client_messages =
        (vec(draft_message(), 0..=3), small_u32(), client_context()).prop_map(|(messages, new_from, client)| {
            Trigger::ClientMessages(trigger::ClientMessages { messages: messages.into(), new_from, client })
        });
    let client_action =
        (name(), opt_json()).prop_map(|(name, args)| Trigger::ClientAction(trigger::ClientAction { name, args }));
    let tool_execute = (id(), name(), json_text(), tool_input(), small_u32(), option::of(timestamp())).prop_map(
        |(id, name, arguments, input, attempt, deadline)| {
            Trigger::ToolExecute(ToolExecute { id, name, arguments, input, attempt, deadline })
        },
    );
    let tool_finished = (id(), any::<bool>(), name(), option::of(json_text()), option::of(text()))
        .prop_map(|(id, ok, name, result, error)| Trigger::ToolFinished(ToolFinished { id, ok, name, result, error }));
    let llm_execute =
        (id(), llm_body(llm_request()), option::of(llm_format()), any::<bool>(), small_u32(), option::of(timestamp()))
            .prop_map(|(id, request, format, stream, attempt, deadline)| {
                Trigger::LlmExecute(LlmExecute { id, request, format, stream, attempt, deadline })
            });
    let llm_finished = (
        id(),
        any::<bool>(),
        option::of(draft_message()),
        any::<bool>(),
        opt_json(),
        option::of(cost()),
        option::of(text()),
        option::of(error_code()),
        opt_json(),
    )
        .prop_map(|(id, ok, message, truncated, usage, cost, error, code, detail)| {
            Trigger::LlmFinished(LlmFinished { id, ok, message, truncated, usage, cost, error, code, detail })
        });
    let sub_agent_finished = (id(), any::<bool>(), id(), name(), option::of(text()), option::of(text())).prop_map(
        |(id, ok, session_id, agent_id, result, error)| {
            Trigger::SubAgentFinished(SubAgentFinished { id, ok, session_id, agent_id, result, error })
        },
    );
    let interrupt_resumed = (id(), opt_json())
        .prop_map(|(interrupt_id, payload)| Trigger::InterruptResumed(InterruptResumed { interrupt_id, payload }));
    prop_oneof![
        Just(Trigger::SessionStart),
        client_messages,
        client_action,
        tool_execute,
        tool_finished,
        llm_execute,
        llm_finished,
        sub_agent_finished,
        interrupt_resumed,
    ]
    .boxed()
}

// ---- actions -----------------------------------------------------------

/// Any `llm.call` payload.
fn llm_call() -> BoxedStrategy<LlmCall> {
    (
        (option::of(id()), option::of(name()), opt_vec(draft_message(), 3), opt_vec(llm_tool(), 3)),
        (
            option::of(temperature()),
            option::of(small_u32()),
            option::of(reasoning_config()),
            option::of(any::<bool>()),
            option::of(retry_policy()),
            option::of(llm_handler()),
        ),
    )
        .prop_map(
            |(
                (id, model, messages, tools),
                (temperature, max_completion_tokens, reasoning, stream, retry, handler),
            )| {
                LlmCall {
                    id,
                    model,
                    messages,
                    tools,
                    temperature,
                    max_completion_tokens,
                    reasoning,
                    stream,
                    retry,
                    handler,
                }
            },
        )
        .boxed()
}

/// Any [`Action`], all ten variants.
pub fn action() -> BoxedStrategy<Action> {
    let tool_call = (option::of(id()), name(), json_value(), option::of(tool_handler()), option::of(retry_policy()))
        .prop_map(|(id, name, arguments, handler, retry)| {
            Action::ToolCall(action::ToolCall { id, name, arguments, handler, retry })
        });
    let tool_result = (option::of(id()), option::of(small_u32()), json_value())
        .prop_map(|(id, attempt, result)| Action::ToolResult(ToolResult { id, attempt, result }));
    let tool_error = (
        option::of(id()),
        option::of(small_u32()),
        text(),
        option::of(any::<bool>()),
        option::of(error_code()),
        opt_json(),
    )
        .prop_map(|(id, attempt, error, retryable, code, detail)| {
            Action::ToolError(ToolError { id, attempt, error, retryable, code, detail })
        });
    let llm_result = (option::of(id()), option::of(small_u32()), llm_body(llm_response()))
        .prop_map(|(id, attempt, response)| Action::LlmResult(LlmResult { id, attempt, response }));
    let llm_error = (
        option::of(id()),
        option::of(small_u32()),
        text(),
        option::of(any::<bool>()),
        option::of(error_code()),
        opt_json(),
    )
        .prop_map(|(id, attempt, error, retryable, code, detail)| {
            Action::LlmError(LlmError { id, attempt, error, retryable, code, detail })
        });
    let sub_agent_spawn =
        (id(), name(), id(), option::of(retry_policy())).prop_map(|(session_id, agent_id, tool_call_id, retry)| {
            Action::SubAgentSpawn(SubAgentSpawn { session_id, agent_id, tool_call_id, retry })
        });
    let message_send = (id(), draft_message())
        .prop_map(|(session_id, message)| Action::MessageSend(MessageSend { session_id, message }));
    let interrupt = (option::of(id()), text(), opt_json(), opt_json()).prop_map(
        |(interrupt_id, reason, payload, resume_schema)| {
            Action::Interrupt(Interrupt { interrupt_id, reason, payload, resume_schema })
        },
    );
    let done = opt_json().prop_map(|data| Action::Done(Done { data }));
    prop_oneof![
        llm_call().prop_map(Action::LlmCall),
        tool_call,
        tool_result,
        tool_error,
        llm_result,
        llm_error,
        sub_agent_spawn,
        message_send,
        interrupt,
        done,
    ]
    .boxed()
}

// ---- decisions ---------------------------------------------------------

/// Any [`WorkerIdentity`]: `metadata` absent, empty or with a few labels.
pub fn worker_identity() -> BoxedStrategy<WorkerIdentity> {
    (option::of(id()), option::of(btree_map(name(), text(), 0..=3)))
        .prop_map(|(id, metadata)| WorkerIdentity { id, metadata })
        .boxed()
}

/// Any [`Call`].
pub fn call() -> BoxedStrategy<Call> {
    (
        (id(), call_kind(), call_status(), small_u32(), option::of(timestamp()), option::of(id())),
        (
            option::of(name()),
            option::of(json_text()),
            option::of(handler()),
            option::of(any::<bool>()),
            option::of(name()),
            option::of(id()),
        ),
    )
        .prop_map(
            |(
                (id, kind, status, attempt, deadline, anchor),
                (name, arguments, handler, stream, agent_id, session_id),
            )| {
                Call {
                    id,
                    kind,
                    status,
                    attempt,
                    deadline,
                    anchor,
                    name,
                    arguments,
                    handler,
                    stream,
                    agent_id,
                    session_id,
                }
            },
        )
        .boxed()
}

/// Any [`DecisionResponse`]: `state`, when present, is never `null`
/// (`null` reads back as omitted).
pub fn decision_response() -> BoxedStrategy<DecisionResponse> {
    (opt_vec(draft_message(), 3), opt_vec(action(), 4), opt_json(), option::of(agent_config()))
        .prop_map(|(messages, actions, state, agent)| DecisionResponse { messages, actions, state, agent })
        .boxed()
}

/// Any [`DecisionRequest`].
pub fn decision_request() -> BoxedStrategy<DecisionRequest> {
    (
        (
            id(),
            id(),
            name(),
            worker_identity(),
            trigger(),
            decision_response(),
            json_value(),
            option::of(agent_config()),
        ),
        (
            vec(call(), 0..=3),
            small_u32(),
            vec(message(), 0..=3),
            message_tree(),
            vec(id(), 0..=3),
            small_u32(),
            option::of(timestamp()),
            option::of(id()),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (session_id, decision_id, agent_id, identity, trigger, proposed, state, agent),
                (calls, pending_calls, messages, message_tree, ancestry, attempts, deadline, turn_id, from_tree),
            )| {
                // An engine's `messages` are the tree's active path, which the
                // WIT form sends once; half the requests have that shape.
                let messages: Vec<SharedMessage> =
                    if from_tree { active_path(&message_tree) } else { messages }.into_iter().map(Into::into).collect();
                // Held as reading its JSON would hold it.
                let message_tree = RequestTree::new(message_tree, &messages);
                DecisionRequest {
                    session_id,
                    decision_id,
                    agent_id,
                    identity,
                    trigger,
                    proposed,
                    state,
                    agent: agent.map(std::sync::Arc::new),
                    calls,
                    pending_calls,
                    messages: crate::Messages::new(messages, message_tree),
                    ancestry,
                    attempts,
                    deadline,
                    turn_id,
                }
            },
        )
        .boxed()
}

/// Any [`MessageTree`] with a path to hold it against: its active path
/// (as an engine sends a request), or unrelated messages.
pub fn tree_and_path() -> BoxedStrategy<(MessageTree, Vec<SharedMessage>)> {
    (message_tree(), vec(message(), 0..=3), any::<bool>())
        .prop_map(|(tree, other, active)| {
            let path = if active { active_path(&tree) } else { other };
            // Half of them shared, as the engine shares them.
            let path = path
                .into_iter()
                .enumerate()
                .map(|(i, m)| if i % 2 == 0 { SharedMessage::from(m) } else { SharedMessage::Shared(Arc::new(m)) })
                .collect();
            (tree, path)
        })
        .boxed()
}

/// The messages from a root to `tree`'s head, as an engine sends them
/// (a dangling or cyclic parent ends the walk).
fn active_path(tree: &MessageTree) -> Vec<Message> {
    let mut path: Vec<Message> = Vec::new();
    let mut cursor = tree.head_id.as_deref();
    while let Some(id) = cursor {
        let Some(node) = tree.nodes.iter().find(|n| n.message.id == id) else { break };
        if path.iter().any(|m| m.id == id) {
            break;
        }
        path.push(node.message.clone());
        cursor = node.parent_id.as_deref();
    }
    path.reverse();
    path
}

// ---- client inputs -----------------------------------------------------

/// Any [`ClientInput`], all six variants.
pub fn client_input() -> BoxedStrategy<ClientInput> {
    let client_message = (name(), option::of(id()), draft_message(), option::of(any::<bool>())).prop_map(
        |(agent_id, turn_id, message, stream)| {
            ClientInput::ClientMessage(client::ClientMessage { agent_id, turn_id, message, stream })
        },
    );
    let client_messages = (
        name(),
        option::of(id()),
        vec(draft_message(), 0..=3),
        option::of(any::<bool>()),
        option::of(client_context()),
    )
        .prop_map(|(agent_id, turn_id, messages, stream, client)| {
            ClientInput::ClientMessages(client::ClientMessages { agent_id, turn_id, messages, stream, client })
        });
    let client_action = (name(), option::of(id()), name(), opt_json()).prop_map(|(agent_id, turn_id, name, args)| {
        ClientInput::ClientAction(client::ClientAction { agent_id, turn_id, name, args })
    });
    let interrupt_resume = (id(), opt_json())
        .prop_map(|(interrupt_id, payload)| ClientInput::InterruptResume(InterruptResume { interrupt_id, payload }));
    let tool_result = (id(), option::of(small_u32()), opt_json())
        .prop_map(|(id, attempt, result)| ClientInput::ToolResult(client::ToolResult { id, attempt, result }));
    let tool_error =
        (id(), text(), any::<bool>(), option::of(small_u32())).prop_map(|(id, error, retryable, attempt)| {
            ClientInput::ToolError(client::ToolError { id, error, retryable, attempt })
        });
    prop_oneof![client_message, client_messages, client_action, interrupt_resume, tool_result, tool_error,].boxed()
}

/// Any [`PostedInput`](crate::PostedInput): any input, with an identity
/// when it is one that may carry one.
pub fn posted_input() -> BoxedStrategy<crate::PostedInput> {
    (client_input(), option::of(worker_identity()))
        .prop_map(|(input, identity)| {
            let identity = identity.filter(|_| crate::PostedInput::takes_identity(&input));
            crate::PostedInput { input, identity }
        })
        .boxed()
}

// ---- session events ----------------------------------------------------

/// Any [`SessionEvent`](crate::SessionEvent), all nine kinds. Optional
/// `unknown` payload fields (`payload`, `data`) are never `Some(null)`,
/// which reads back as `None`.
pub fn session_event() -> BoxedStrategy<crate::SessionEvent> {
    use crate::SessionEvent;
    use crate::event::{
        ClientToolCall, InterruptAnswered, InterruptRaised, MessageRecorded, Resumer, StateChanged, TokenDelta,
        TurnDone, TurnFailed, TurnStarted,
    };

    prop_oneof![
        id().prop_map(|turn_id| SessionEvent::TurnStarted(TurnStarted { turn_id })),
        (message(), option::of(id()), option::of(id())).prop_map(|(message, parent_id, agent_version)| {
            SessionEvent::Message(MessageRecorded { message, parent_id, agent_version })
        }),
        (stream_delta(), id()).prop_map(|(delta, call_id)| SessionEvent::TokenDelta(TokenDelta { delta, call_id })),
        (id(), name(), json_text(), small_u32()).prop_map(|(id, name, arguments, attempt)| {
            SessionEvent::ToolCall(ClientToolCall { id, name, arguments, attempt })
        }),
        (id(), text(), opt_json(), opt_json()).prop_map(|(interrupt_id, reason, payload, resume_schema)| {
            SessionEvent::Interrupt(InterruptRaised { interrupt_id, reason, payload, resume_schema })
        }),
        (id(), opt_json(), option::of(worker_identity()), any::<bool>()).prop_map(
            |(interrupt_id, payload, identity, end_user)| {
                let resumed_by = match identity {
                    Some(identity) if end_user => Resumer::EndUser { identity },
                    identity => Resumer::Tenant { key: None, identity },
                };
                SessionEvent::InterruptResumed(InterruptAnswered { interrupt_id, payload, resumed_by })
            },
        ),
        (id(), opt_json()).prop_map(|(turn_id, data)| SessionEvent::TurnDone(TurnDone { turn_id, data })),
        (id(), text(), name()).prop_map(|(turn_id, error, code)| SessionEvent::TurnFailed(TurnFailed {
            turn_id,
            error,
            code
        })),
        json_value().prop_map(|state| SessionEvent::State(StateChanged { state })),
    ]
    .boxed()
}
