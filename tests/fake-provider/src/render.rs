//! A [`Reply`] in each wire format: the events of a stream, or one body.

use serde_json::{Value, json};

use crate::script::Reply;

/// The two wire formats the fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenAI Chat Completions.
    Openai,
    /// Anthropic Messages.
    Anthropic,
}

const CREATED: u64 = 1_700_000_000;

/// One SSE event's text, `\n\n` included.
fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn anthropic_event(data: Value) -> String {
    let name = data["type"].as_str().unwrap_or("message").to_owned();
    sse(Some(&name), &data)
}

/// The stream events of `reply`, the terminal one last.
pub fn stream_events(format: Format, reply: &Reply, model: &str, include_usage: bool) -> Vec<String> {
    match format {
        Format::Openai => openai_events(reply, model, include_usage),
        Format::Anthropic => anthropic_events(reply, model),
    }
}

fn openai_events(reply: &Reply, model: &str, include_usage: bool) -> Vec<String> {
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    let key = reply.reasoning_key.as_deref().unwrap_or("reasoning_content");
    events.extend(reply.reasoning.iter().map(|piece| chunk(json!({ key: piece }), Value::Null)));
    events.extend(reply.text.iter().map(|piece| chunk(json!({"content": piece}), Value::Null)));
    if let Some(refusal) = &reply.refusal {
        events.push(chunk(json!({"refusal": refusal}), Value::Null));
    }
    if !reply.images.is_empty() {
        events.push(chunk(json!({"images": openai_images(reply)}), Value::Null));
    }
    for (index, call) in reply.tool_calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in &call.pieces {
            events
                .push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), Value::Null));
        }
    }
    events.push(chunk(json!({}), json!(openai_finish(reply))));
    if include_usage {
        events.push(sse(
            None,
            &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [], "usage": openai_usage(reply)}),
        ));
    }
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// The images as OpenRouter sends them.
fn openai_images(reply: &Reply) -> Value {
    reply.images.iter().map(|url| json!({"type": "image_url", "image_url": {"url": url}})).collect()
}

/// An Anthropic `image` block for `url`.
fn anthropic_image(url: &str) -> Value {
    let source = match url.strip_prefix("data:").and_then(|rest| rest.split_once(";base64,")) {
        Some((media_type, data)) => json!({"type": "base64", "media_type": media_type, "data": data}),
        None => json!({"type": "url", "url": url}),
    };
    json!({"type": "image", "source": source})
}

fn openai_finish(reply: &Reply) -> String {
    reply
        .finish_reason
        .clone()
        .unwrap_or_else(|| if reply.tool_calls.is_empty() { "stop" } else { "tool_calls" }.into())
}

fn openai_usage(reply: &Reply) -> Value {
    json!({"prompt_tokens": reply.usage.input, "completion_tokens": reply.usage.output,
        "total_tokens": reply.usage.input + reply.usage.output})
}

fn anthropic_stop(reply: &Reply) -> String {
    if let Some(reason) = &reply.finish_reason {
        return reason.clone();
    }
    if reply.refusal.is_some() {
        "refusal"
    } else if reply.tool_calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
    .to_owned()
}

fn anthropic_events(reply: &Reply, model: &str) -> Vec<String> {
    let mut events = vec![
        anthropic_event(json!({"type": "message_start", "message": {
            "id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": reply.usage.input, "output_tokens": 1}}})),
        anthropic_event(json!({"type": "ping"})),
    ];
    let mut index = 0;
    if !reply.reasoning.is_empty() {
        events.push(anthropic_event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "thinking", "thinking": ""}})));
        for piece in &reply.reasoning {
            events.push(anthropic_event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "thinking_delta", "thinking": piece}})));
        }
        events.push(anthropic_event(json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "signature_delta", "signature": "c2lnbmF0dXJl"}})));
        events.push(anthropic_event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    if !reply.text.is_empty() {
        events.push(anthropic_event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "text", "text": ""}})));
        for piece in &reply.text {
            events.push(anthropic_event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "text_delta", "text": piece}})));
        }
        events.push(anthropic_event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for url in &reply.images {
        events.push(anthropic_event(json!({"type": "content_block_start", "index": index,
            "content_block": anthropic_image(url)})));
        events.push(anthropic_event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for call in &reply.tool_calls {
        events.push(anthropic_event(json!({"type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}})));
        for piece in &call.pieces {
            events.push(anthropic_event(json!({"type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece}})));
        }
        events.push(anthropic_event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    events.push(anthropic_event(json!({"type": "message_delta",
        "delta": {"stop_reason": anthropic_stop(reply), "stop_sequence": null},
        "usage": {"output_tokens": reply.usage.output}})));
    events.push(anthropic_event(json!({"type": "message_stop"})));
    events
}

/// The mid-stream error event of `format`.
pub fn error_event(format: Format) -> String {
    match format {
        Format::Openai => sse(
            None,
            &json!({"error": {"message": "The server had an error while processing your request.",
                "type": "server_error", "code": null}}),
        ),
        Format::Anthropic => {
            anthropic_event(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
        }
    }
}

/// An event whose data is not JSON.
pub fn malformed_event(format: Format) -> String {
    match format {
        Format::Openai => "data: {\"choices\": [{\"delta\": {\"content\": \"oops\n\n".to_owned(),
        Format::Anthropic => {
            "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", \"ind\n\n".to_owned()
        }
    }
}

/// The non-streamed response body of `reply`.
pub fn body(format: Format, reply: &Reply, model: &str) -> Value {
    match format {
        Format::Openai => {
            let tool_calls: Vec<Value> = reply
                .tool_calls
                .iter()
                .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments()}}))
                .collect();
            let mut message = json!({"role": "assistant",
                "content": if reply.text.is_empty() { Value::Null } else { json!(reply.full_text()) },
                "refusal": reply.refusal});
            if !reply.reasoning.is_empty() {
                let key = reply.reasoning_key.as_deref().unwrap_or("reasoning_content");
                message[key] = json!(reply.reasoning.concat());
            }
            if !tool_calls.is_empty() {
                message["tool_calls"] = json!(tool_calls);
            }
            if !reply.images.is_empty() {
                message["images"] = openai_images(reply);
            }
            json!({"id": "chatcmpl-fake", "object": "chat.completion", "created": CREATED, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": openai_finish(reply)}],
                "usage": openai_usage(reply)})
        }
        Format::Anthropic => {
            let mut content = Vec::new();
            if !reply.reasoning.is_empty() {
                content.push(json!({"type": "thinking", "thinking": reply.reasoning.concat(), "signature": "c2ln"}));
            }
            if !reply.text.is_empty() {
                content.push(json!({"type": "text", "text": reply.full_text()}));
            }
            content.extend(reply.images.iter().map(|url| anthropic_image(url)));
            for c in &reply.tool_calls {
                let input: Value = serde_json::from_str(&c.arguments()).unwrap_or_else(|_| json!({}));
                content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": anthropic_stop(reply), "stop_sequence": null,
                "usage": {"input_tokens": reply.usage.input, "output_tokens": reply.usage.output}})
        }
    }
}
