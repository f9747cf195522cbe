//! The built-in offline model, `subs/offline`: a deterministic stand-in for
//! an LLM, for demos and tests. It needs no key and no network, answers the
//! same request with the same reply (tool call ids included), and can be
//! told to call tools, so a whole chat-and-tools turn runs without a real
//! provider. It is the engine's default model. It understands nothing; it
//! follows the rules below.
//!
//! # What it answers
//!
//! It looks at the request's messages (the active conversation, system
//! prompt first) and its `tools`:
//!
//! 1. **The last message is a `user` message asking for tools** with the
//!    phrase `use tool <name> with <json object>`: one tool call per
//!    occurrence, in order (two phrases, two parallel calls), no text,
//!    `finish_reason: "tool_calls"`. A named tool that is not among
//!    `request.tools` is not called; the reply then says so plainly (as its
//!    whole answer, `finish_reason: "stop"`, when no named tool is
//!    available; as a lead-in before the calls otherwise).
//! 2. **The conversation ends with `tool` messages** (answering an
//!    assistant message's `tool_calls`): one sentence per result, in call
//!    order, `<tool name> returned <tool message content>.` (for example
//!    `add returned {"sum":3}.`), `finish_reason: "stop"`.
//! 3. **Otherwise** it echoes the last user message: `You said: <text>`,
//!    `finish_reason: "stop"`; with no user message at all, a fixed
//!    greeting ([`GREETING`]).
//!
//! # The tool phrase
//!
//! `use tool <name>`, optionally followed by `with <arguments>`, anywhere in
//! the text, any number of times:
//!
//! - `use tool` is matched case-insensitively, as whole words (any
//!   whitespace between and after them; `reuse tool` and `use tools` do not
//!   count).
//! - `<name>` is a run of letters, digits, `_` and `-` (with `.` or `:`
//!   allowed inside, as in `fs.read`), or any text in backticks or double
//!   quotes (`` use tool `get weather` ``). It is matched exactly against
//!   the tools' names.
//! - `with` (any case) starts the arguments. When they start with `{` they
//!   run to the matching `}`, counting nested braces and skipping braces
//!   inside JSON strings, so `with {"q": "a } b", "n": {"m": 1}}` is read
//!   whole. Arguments that do not start with `{` run to the end of the line.
//!   Without `with` (or with nothing after it) the arguments are `{}`.
//! - Arguments that parse as a JSON object are passed compacted
//!   (`{"a":1}`); anything else (`{a: 1}`, `[1, 2]`, a `{` never closed,
//!   which then runs to the end of the text) is passed as the raw text, so
//!   the engine's argument check reports it as `malformed`: that is how a
//!   test provokes a malformed tool call.
//!
//! Examples, with an `add` tool offered:
//!
//! ```text
//! use tool add with {"a": 1, "b": 2}          → add({"a":1,"b":2})
//! Use tool add with {"a":1} and use tool add with {"a":2}
//!                                             → two parallel add calls
//! please use tool clock                       → clock({}), if clock is offered
//! use tool add with {a: 1}                    → add("{a: 1}"), malformed
//! use tool nope with {}                       → The tool "nope" is not available. …
//! ```
//!
//! # Ids, streaming, usage
//!
//! - Tool call ids are `call_<16 hex digits>`, a stable hash (FNV-1a, then a
//!   mixing step; the same in every process and release) of the request's
//!   conversation and the call's index: the same request gets the same ids,
//!   and every call of a session gets a different one because each request
//!   carries a longer conversation. A recorded message's id names the path
//!   before it, so the conversation is hashed from its last message with an
//!   id on, with the number of messages before it: the hash costs the same
//!   however long the session is.
//! - With a delta sink, the reply streams: the text a word at a time (long
//!   words in pieces), then each tool call as a delta with its id and name
//!   followed by deltas with pieces of its arguments, then one delta with
//!   the `finish_reason`. The model yields to the runtime between deltas,
//!   so consumers see them before the call settles.
//! - `usage` counts tokens as UTF-8 bytes / 4, rounded up ([`token_count`];
//!   bytes, as byte-level tokenizers read text, and each message's are
//!   known without reading it):
//!   the prompt is the messages' text, tool calls (names and arguments) and
//!   the offered tools (names, descriptions, schemas as JSON text); the
//!   completion is the reply text and its tool calls. `cost` is `"0"`.
//! - `max_completion_tokens` cuts the reply text to that many tokens
//!   (4 bytes each, at the last character that fits) with
//!   `finish_reason: "length"`; tool calls that would follow a cut text
//!   are dropped, but tool calls themselves are never cut (half a call
//!   cannot be run).
//! - The provider serves one model, `offline`; any other name is a
//!   not-retryable `provider_error`. `temperature` and `reasoning` are
//!   ignored.

use std::collections::HashMap;

use serde_json::{Value, json};
use subs_protocol::{LlmMessage, LlmMessages, LlmRequest, LlmResponse, Role, StreamDelta, ToolCall, ToolCallDelta};

use super::{Completion, ModelError, OFFLINE_MODEL, Provider};
use crate::worker::{BoxFuture, DeltaSink};

/// The model name the offline provider serves (without its `subs/` prefix).
pub const MODEL_NAME: &str = "offline";

/// The reply to a conversation that has no user message.
pub const GREETING: &str = "Hello! I am subs/offline, the built-in offline model. \
    I repeat what you say; write `use tool <name> with {...}` to have me call a tool.";

/// UTF-8 bytes per token in the offline model's rough token count.
const BYTES_PER_TOKEN: usize = 4;

/// Longest text piece one delta carries; longer words are split.
const MAX_TEXT_PIECE: usize = 16;

/// Argument characters per tool-call delta.
const ARGUMENT_PIECE: usize = 8;

/// The built-in offline provider (registered as `subs`; see the module
/// docs for what it answers).
#[derive(Debug, Clone, Copy, Default)]
pub struct OfflineProvider;

impl OfflineProvider {
    /// The provider.
    pub fn new() -> Self {
        Self
    }

    /// The reply to `request`, computed at once without streaming: what
    /// [`Provider::complete`] resolves to. `request.model` must be
    /// [`MODEL_NAME`].
    pub fn answer(&self, request: &LlmRequest) -> Result<LlmResponse, ModelError> {
        if request.model != MODEL_NAME {
            return Err(ModelError::invalid_request(format!(
                "model `{}` is not served by the offline provider: its only model is `{OFFLINE_MODEL}`",
                request.model
            )));
        }
        let Reply { mut content, calls, mut finish_reason } = reply(request);
        let messages = if calls.is_empty() { FNV_OFFSET } else { messages_hash(request) };
        let mut tool_calls: Vec<ToolCall> = calls
            .into_iter()
            .enumerate()
            .map(|(index, (name, arguments))| ToolCall::function(call_id(messages, index), name, arguments))
            .collect();
        if let (Some(max), Some(text)) = (request.max_completion_tokens, content.as_mut()) {
            let max_bytes = usize::try_from(max).unwrap_or(usize::MAX).saturating_mul(BYTES_PER_TOKEN);
            if text.len() > max_bytes {
                text.truncate(text.floor_char_boundary(max_bytes));
                tool_calls.clear();
                finish_reason = "length";
            }
        }
        let completion = content.as_deref().map_or(0, str::len)
            + tool_calls.iter().map(|c| c.function.name.len() + c.function.arguments.len()).sum::<usize>();
        let prompt_tokens = token_count(prompt_bytes(request));
        let completion_tokens = token_count(completion);
        Ok(LlmResponse {
            model: OFFLINE_MODEL.to_owned(),
            content,
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
            finish_reason: Some(finish_reason.to_owned()),
            usage: Some(json!({
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            })),
            cost: Some("0".to_owned()),
            images: None,
        })
    }
}

impl Provider for OfflineProvider {
    fn complete(
        &self,
        request: LlmRequest,
        deltas: Option<DeltaSink>,
    ) -> BoxFuture<'_, Result<Completion, ModelError>> {
        Box::pin(async move {
            let response = self.answer(&request)?;
            if let Some(sink) = deltas {
                stream(&response, &sink).await;
            }
            // The offline model keeps no record of its replies: it has no
            // id to give one.
            Ok(Completion::from(response))
        })
    }
}

/// The offline model's token count for `bytes` bytes of UTF-8: a quarter,
/// rounded up.
pub fn token_count(bytes: usize) -> usize {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// What the model decided to say, before ids and limits.
struct Reply {
    content: Option<String>,
    /// `(name, arguments)` of each tool call, in order.
    calls: Vec<(String, String)>,
    finish_reason: &'static str,
}

impl Reply {
    fn text(text: String) -> Self {
        Self { content: Some(text), calls: Vec::new(), finish_reason: "stop" }
    }
}

fn reply(request: &LlmRequest) -> Reply {
    let messages = &request.messages;
    match messages.last() {
        Some(last) if last.role() == Role::Tool => Reply::text(report_results(messages)),
        Some(last) if last.role() == Role::User => {
            let text = last.text();
            let wanted = tool_requests(&text);
            if wanted.is_empty() { Reply::text(echo(&text)) } else { call_tools(request, wanted) }
        }
        _ => match messages.iter().rev().find(|m| m.role() == Role::User) {
            Some(user) => Reply::text(echo(&user.text())),
            None => Reply::text(GREETING.to_owned()),
        },
    }
}

fn echo(text: &str) -> String {
    if text.is_empty() { "You said nothing I can read.".to_owned() } else { format!("You said: {text}") }
}

fn call_tools(request: &LlmRequest, wanted: Vec<ToolRequest>) -> Reply {
    let offered: Vec<&str> = request.tools.iter().flatten().map(|t| t.name.as_str()).collect();
    let mut calls = Vec::new();
    let mut missing: Vec<String> = Vec::new();
    for ToolRequest { name, arguments } in wanted {
        if offered.contains(&name.as_str()) {
            calls.push((name, arguments));
        } else if !missing.contains(&name) {
            missing.push(name);
        }
    }
    let notice = (!missing.is_empty()).then(|| {
        let quoted: Vec<String> = missing.iter().map(|n| format!("\"{n}\"")).collect();
        if let [one] = quoted.as_slice() {
            format!("The tool {one} is not available.")
        } else {
            format!("The tools {} are not available.", quoted.join(", "))
        }
    });
    if calls.is_empty() {
        let available = if offered.is_empty() {
            "No tools are available.".to_owned()
        } else {
            format!("Available tools: {}.", offered.join(", "))
        };
        let notice = notice.unwrap_or_default();
        return Reply::text(format!("{notice} {available}"));
    }
    Reply { content: notice, calls, finish_reason: "tool_calls" }
}

/// One sentence per result of the trailing `tool` messages, in the order of
/// the calls they answer.
fn report_results(messages: &LlmMessages) -> String {
    // The trailing tool messages, walked back to the message before them.
    let mut results: Vec<LlmMessage<'_>> = messages.iter().rev().take_while(|m| m.role() == Role::Tool).collect();
    results.reverse();
    let calls: &[ToolCall] = match messages.len().checked_sub(results.len() + 1).and_then(|i| messages.get(i)) {
        Some(m) if m.role() == Role::Assistant => m.tool_calls().unwrap_or_default(),
        _ => &[],
    };
    let by_id: HashMap<&str, LlmMessage<'_>> = results.iter().filter_map(|m| Some((m.tool_call_id()?, *m))).collect();
    let mut sentences: Vec<String> = calls
        .iter()
        .filter_map(|call| by_id.get(call.id.as_str()).map(|m| sentence(&call.function.name, &m.text())))
        .collect();
    // Results answering no call of that assistant message still get reported,
    // so nothing the tools said is silently lost.
    for m in &results {
        let answered = m.tool_call_id().is_some_and(|id| calls.iter().any(|c| c.id == id));
        if !answered {
            let who = match m.tool_call_id() {
                Some(id) => format!("The tool call {id}"),
                None => "A tool".to_owned(),
            };
            sentences.push(sentence(&who, &m.text()));
        }
    }
    sentences.join(" ")
}

fn sentence(who: &str, result: &str) -> String {
    let result = result.trim_end();
    if result.is_empty() {
        format!("{who} returned nothing.")
    } else if result.ends_with(['.', '!', '?']) {
        format!("{who} returned {result}")
    } else {
        format!("{who} returned {result}.")
    }
}

/// A tool the user asked for: its name and the argument text to send.
#[derive(Debug, PartialEq)]
struct ToolRequest {
    name: String,
    arguments: String,
}

/// Every `use tool <name> [with <arguments>]` in `text`, in order (grammar
/// in the module docs).
fn tool_requests(text: &str) -> Vec<ToolRequest> {
    let mut found = Vec::new();
    let mut pos = 0;
    while let Some(start) = find_words(text, pos, &["use", "tool"]) {
        let after_phrase = start.1;
        let name_start = skip_space(text, after_phrase);
        let Some((name, after_name)) = (name_start > after_phrase).then(|| tool_name(text, name_start)).flatten()
        else {
            pos = after_phrase;
            continue;
        };
        let (arguments, next) = arguments_after(text, after_name);
        found.push(ToolRequest { name, arguments });
        pos = next;
    }
    found
}

/// The next place at or after `from` where `words` appear in sequence, as
/// whole words in any case, separated by whitespace: `(start, end)`.
fn find_words(text: &str, from: usize, words: &[&str]) -> Option<(usize, usize)> {
    let first = words.first()?;
    let mut pos = from;
    while let Some(offset) = find_ignore_case(&text[pos..], first) {
        let start = pos + offset;
        pos = start + first.len();
        if text[..start].chars().next_back().is_some_and(is_word_char) {
            continue;
        }
        let mut end = pos;
        let mut matched = true;
        for word in &words[1..] {
            let next = skip_space(text, end);
            if next == end || !starts_with_ignore_case(&text[next..], word) {
                matched = false;
                break;
            }
            end = next + word.len();
        }
        if matched && !text[end..].chars().next().is_some_and(is_word_char) {
            return Some((start, end));
        }
    }
    None
}

/// Byte offset of `needle` (ASCII) in `haystack`, ignoring ASCII case.
fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack.char_indices().map(|(i, _)| i).find(|&i| starts_with_ignore_case(&haystack[i..], needle))
}

fn starts_with_ignore_case(text: &str, prefix: &str) -> bool {
    text.as_bytes().get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn skip_space(text: &str, from: usize) -> usize {
    text[from..].find(|c: char| !c.is_whitespace()).map_or(text.len(), |i| from + i)
}

/// The tool name at `start`: quoted in backticks or double quotes, or a run
/// of name characters. Returns it with the offset after it.
fn tool_name(text: &str, start: usize) -> Option<(String, usize)> {
    let rest = &text[start..];
    let first = rest.chars().next()?;
    if first == '`' || first == '"' {
        let line = rest[1..].split('\n').next().unwrap_or_default();
        let len = line.find(first)?;
        let name = line[..len].trim();
        return (!name.is_empty()).then(|| (name.to_owned(), start + 1 + len + 1));
    }
    let is_name = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    let mut end = 0;
    let mut chars = rest.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let inner_separator = matches!(c, '.' | ':') && end > 0 && chars.peek().is_some_and(|&(_, n)| is_name(n));
        if !(is_name(c) || inner_separator) {
            break;
        }
        end = i + c.len_utf8();
    }
    (end > 0).then(|| (rest[..end].to_owned(), start + end))
}

/// The arguments following a tool name at `from`, and where scanning goes
/// on: `{}` without `with`; a balanced `{…}`; else the rest of the line.
fn arguments_after(text: &str, from: usize) -> (String, usize) {
    let no_arguments = || ("{}".to_owned(), from);
    let with_at = skip_space(text, from);
    let after_with = with_at + "with".len();
    if !starts_with_ignore_case(&text[with_at..], "with") || text[after_with..].chars().next().is_some_and(is_word_char)
    {
        return no_arguments();
    }
    let start = skip_space(text, after_with);
    let (raw, next) = if text[start..].starts_with('{') {
        match matching_brace(&text[start..]) {
            Some(len) => (&text[start..start + len], start + len),
            None => (text[start..].trim_end(), text.len()),
        }
    } else {
        let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        (text[start..end].trim_end(), end)
    };
    if raw.is_empty() {
        return ("{}".to_owned(), next);
    }
    let arguments = match serde_json::from_str::<Value>(raw) {
        Ok(object @ Value::Object(_)) => object.to_string(),
        _ => raw.to_owned(),
    };
    (arguments, next)
}

/// The length of the `{…}` that `text` starts with, braces inside JSON
/// strings skipped; `None` when it never closes.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The FNV-1a hash of the request's conversation, hashed as it is written
/// rather than written out first: the reply's calls share it.
///
/// A recorded message's id names the whole path before it within its
/// session, so the hash covers the conversation from the last message with
/// an id on (the count of messages before it, then those messages as a JSON
/// array): the same conversation hashes the same, two points of one session
/// differ, and hashing costs the same at the thousandth turn as at the
/// first. A conversation without ids is hashed whole, as a JSON array.
fn messages_hash(request: &LlmRequest) -> u64 {
    /// Hashes what is written to it.
    struct Fnv(u64);
    impl std::io::Write for Fnv {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = fnv1a(self.0, bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let messages = &request.messages;
    let mut hash = Fnv(FNV_OFFSET);
    let from = messages.iter().rposition(|m| m.id().is_some());
    if let Some(from) = from {
        hash.0 = fnv1a(hash.0, &(from as u64).to_le_bytes());
    }
    // Serializing messages cannot fail (string keys, plain values); were it
    // to stop half way, the ids would still be stable and index-distinct.
    let tail: Vec<LlmMessage<'_>> = (from.unwrap_or(0)..messages.len()).filter_map(|i| messages.get(i)).collect();
    let _ = serde_json::to_writer(&mut hash, &tail);
    hash.0
}

/// `call_<16 hex>`: a hash of the request's messages (`messages`, from
/// [`messages_hash`]) and the call's index.
fn call_id(messages: u64, index: usize) -> String {
    let hash = fnv1a(messages, &(index as u64).to_le_bytes());
    format!("call_{:016x}", mix(hash))
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a: fixed constants, so the same bytes hash the same in every process
/// and Rust release (unlike `std`'s `DefaultHasher`).
fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// MurmurHash3's finalizer: spreads FNV's weakly mixed last bytes (the call
/// index) over every digit of the id.
fn mix(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The bytes of `content`'s text (see [`subs_protocol::Content::text`]: its
/// text parts joined by newlines), counted without joining them.
fn text_bytes(content: Option<&subs_protocol::Content>) -> usize {
    match content {
        None => 0,
        Some(subs_protocol::Content::Text(text)) => text.len(),
        Some(subs_protocol::Content::Parts(parts)) => {
            let texts = parts.iter().filter_map(|p| match p {
                subs_protocol::ContentPart::Text { text } => Some(text.len()),
                _ => None,
            });
            let (bytes, count) = texts.fold((0_usize, 0_usize), |(bytes, count), n| (bytes + n, count + 1));
            bytes + count.saturating_sub(1)
        }
    }
}

/// The prompt's bytes: each message's text and tool calls, then the
/// offered tools. A message's count is its strings' lengths, read without
/// reading the strings.
fn prompt_bytes(request: &LlmRequest) -> usize {
    let messages: usize = request
        .messages
        .iter()
        .map(|m| {
            text_bytes(m.content())
                + m.tool_calls()
                    .into_iter()
                    .flatten()
                    .map(|c| c.function.name.len() + c.function.arguments.len())
                    .sum::<usize>()
        })
        .sum();
    let schema_bytes = |schema: &Option<subs_protocol::ToolSchema>| {
        schema.as_deref().map_or(0, |s| crate::json::json_bytes(s) as usize)
    };
    let tools: usize = request
        .tools
        .iter()
        .flatten()
        .map(|t| t.name.len() + t.description.len() + schema_bytes(&t.input) + schema_bytes(&t.output))
        .sum();
    messages + tools
}

/// Sends `response` to `sink` piece by piece, yielding between pieces.
/// Pieces the sink refuses (over the engine's stream limits) are dropped:
/// the reply itself is whole either way.
async fn stream(response: &LlmResponse, sink: &DeltaSink) {
    if let Some(text) = &response.content {
        for piece in text_pieces(text) {
            let _ = sink(StreamDelta::text(piece));
            tokio::task::yield_now().await;
        }
    }
    for call in response.tool_calls.iter().flatten() {
        let delta = |name: Option<&str>, arguments: Option<&str>| StreamDelta {
            tool_calls: Some(vec![ToolCallDelta {
                id: call.id.clone(),
                name: name.map(str::to_owned),
                arguments: arguments.map(str::to_owned),
            }]),
            ..StreamDelta::default()
        };
        let _ = sink(delta(Some(&call.function.name), None));
        tokio::task::yield_now().await;
        for piece in chunks(&call.function.arguments, ARGUMENT_PIECE) {
            let _ = sink(delta(None, Some(piece)));
            tokio::task::yield_now().await;
        }
    }
    let _ = sink(StreamDelta { finish_reason: response.finish_reason.clone(), ..StreamDelta::default() });
}

/// `text` cut after each run of whitespace (a word and the space after it
/// per piece), words longer than [`MAX_TEXT_PIECE`] characters cut further.
/// The pieces concatenate to `text`.
fn text_pieces(text: &str) -> Vec<&str> {
    let mut words = Vec::new();
    let mut start = 0;
    let mut prev_space = false;
    for (i, c) in text.char_indices() {
        let space = c.is_whitespace();
        if prev_space && !space && i > start {
            words.push(&text[start..i]);
            start = i;
        }
        prev_space = space;
    }
    if start < text.len() {
        words.push(&text[start..]);
    }
    words.into_iter().flat_map(|w| chunks(w, MAX_TEXT_PIECE)).collect()
}

/// `text` in pieces of at most `size` characters.
fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some((cut, _)) = rest.char_indices().nth(size) {
        pieces.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    if !rest.is_empty() {
        pieces.push(rest);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::json;
    use subs_protocol::{DraftMessage, LlmTool, ToolInput};

    use super::*;

    fn tool(name: &str) -> LlmTool {
        LlmTool { name: name.into(), description: format!("the {name} tool"), input: None, output: None }
    }

    fn request(messages: Vec<DraftMessage>, tools: &[&str]) -> LlmRequest {
        LlmRequest {
            model: MODEL_NAME.into(),
            messages: messages.into(),
            tools: (!tools.is_empty()).then(|| tools.iter().map(|n| tool(n)).collect()),
            temperature: None,
            max_completion_tokens: None,
            reasoning: None,
        }
    }

    fn ask(text: &str, tools: &[&str]) -> LlmResponse {
        let messages = vec![DraftMessage::system("be brief"), DraftMessage::user(text)];
        OfflineProvider.answer(&request(messages, tools)).unwrap()
    }

    fn calls(response: &LlmResponse) -> Vec<(&str, &str)> {
        response
            .tool_calls
            .iter()
            .flatten()
            .map(|c| (c.function.name.as_str(), c.function.arguments.as_str()))
            .collect()
    }

    #[test]
    fn echoes_the_last_user_message() {
        let response = ask("hello there", &[]);
        assert_eq!(response.content.as_deref(), Some("You said: hello there"));
        assert_eq!(response.finish_reason.as_deref(), Some("stop"));
        assert_eq!(response.tool_calls, None);
        assert_eq!(response.model, OFFLINE_MODEL);
        assert_eq!(response.cost.as_deref(), Some("0"));
    }

    #[test]
    fn greets_when_no_user_has_spoken() {
        let response = OfflineProvider.answer(&request(vec![DraftMessage::system("sys")], &[])).unwrap();
        assert_eq!(response.content.as_deref(), Some(GREETING));
        let response = OfflineProvider.answer(&request(vec![], &[])).unwrap();
        assert_eq!(response.content.as_deref(), Some(GREETING));
    }

    #[test]
    fn after_an_assistant_message_it_echoes_the_last_user_message_without_calling() {
        let messages = vec![DraftMessage::user("use tool add with {}"), DraftMessage::assistant("hm")];
        let response = OfflineProvider.answer(&request(messages, &["add"])).unwrap();
        assert_eq!(response.content.as_deref(), Some("You said: use tool add with {}"));
        assert_eq!(response.tool_calls, None);
    }

    #[test]
    fn calls_a_named_tool_with_its_arguments() {
        let response = ask(r#"Please use tool add with {"a": 1, "b": 2} now."#, &["add", "mul"]);
        assert_eq!(calls(&response), [("add", r#"{"a":1,"b":2}"#)]);
        assert_eq!(response.content, None);
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
        let id = &response.tool_calls.as_ref().unwrap()[0].id;
        assert!(id.starts_with("call_") && id.len() == 21 && id[5..].chars().all(|c| c.is_ascii_hexdigit()), "{id}");
    }

    #[test]
    fn two_phrases_make_two_parallel_calls_in_order() {
        let response = ask("USE TOOL mul with {\"x\":2}\nthen use  tool add with {\"y\":3}", &["add", "mul"]);
        assert_eq!(calls(&response), [("mul", r#"{"x":2}"#), ("add", r#"{"y":3}"#)]);
        let ids: Vec<&str> = response.tool_calls.iter().flatten().map(|c| c.id.as_str()).collect();
        assert_ne!(ids[0], ids[1]);
    }

    #[test]
    fn nested_braces_and_braces_in_strings_stay_in_the_arguments() {
        let text = r#"use tool search with {"q": "a } b {", "opts": {"n": {"m": [1, {"k": "\"}"}]}}} and done"#;
        let response = ask(text, &["search"]);
        let (_, arguments) = calls(&response)[0];
        let value: Value = serde_json::from_str(arguments).unwrap();
        assert_eq!(value, json!({"q": "a } b {", "opts": {"n": {"m": [1, {"k": "\"}"}]}}}));
    }

    #[test]
    fn without_with_the_arguments_are_empty() {
        for text in ["use tool clock", "use tool clock.", "use tool clock and tell me", "use tool clock with"] {
            assert_eq!(calls(&ask(text, &["clock"])), [("clock", "{}")], "{text}");
        }
    }

    #[test]
    fn names_may_be_quoted_or_dotted() {
        let response =
            ask(r#"use tool `get weather` with {"city":"Oslo"}; use tool fs.read"#, &["get weather", "fs.read"]);
        assert_eq!(calls(&response), [("get weather", r#"{"city":"Oslo"}"#), ("fs.read", "{}")]);
    }

    #[test]
    fn other_words_are_not_the_phrase() {
        for text in ["reuse tool add", "use tools add", "use toolbox add", "use tool", "use tool !"] {
            let response = ask(text, &["add"]);
            assert_eq!(response.tool_calls, None, "{text}");
            assert_eq!(response.content, Some(format!("You said: {text}")), "{text}");
        }
    }

    #[test]
    fn malformed_arguments_are_passed_raw_and_check_as_malformed() {
        for (text, raw) in [
            ("use tool add with {a: 1}", "{a: 1}"),
            ("use tool add with [1, 2]\nthanks", "[1, 2]"),
            ("use tool add with {\"a\": 1", "{\"a\": 1"),
        ] {
            let response = ask(text, &["add"]);
            assert_eq!(calls(&response), [("add", raw)], "{text}");
            assert!(matches!(crate::tools::check_arguments(None, raw), ToolInput::Malformed { .. }), "{raw}");
        }
    }

    #[test]
    fn an_unknown_tool_is_not_called_and_the_reply_says_so() {
        let response = ask("use tool nope with {}", &["add"]);
        assert_eq!(response.tool_calls, None);
        assert_eq!(response.content.as_deref(), Some(r#"The tool "nope" is not available. Available tools: add."#));
        assert_eq!(response.finish_reason.as_deref(), Some("stop"));

        let response = ask("use tool nope", &[]);
        assert_eq!(response.content.as_deref(), Some(r#"The tool "nope" is not available. No tools are available."#));

        let response = ask("use tool nope and use tool add with {\"a\":1} and use tool zip", &["add"]);
        assert_eq!(calls(&response), [("add", r#"{"a":1}"#)]);
        assert_eq!(response.content.as_deref(), Some(r#"The tools "nope", "zip" are not available."#));
        assert_eq!(response.finish_reason.as_deref(), Some("tool_calls"));
    }

    fn after_tools(results: &[(&str, &str)]) -> LlmRequest {
        let mut messages = vec![DraftMessage::user("use tool add with {} and use tool mul with {}")];
        let mut assistant = DraftMessage { content: None, ..DraftMessage::assistant("") };
        assistant.tool_calls = Some(vec![ToolCall::function("c1", "add", "{}"), ToolCall::function("c2", "mul", "{}")]);
        messages.push(assistant);
        messages.extend(results.iter().map(|(id, text)| DraftMessage::tool(*id, *text)));
        request(messages, &["add", "mul"])
    }

    #[test]
    fn tool_results_are_reported_in_call_order() {
        let response = OfflineProvider.answer(&after_tools(&[("c2", "6"), ("c1", r#"{"sum":3}"#)])).unwrap();
        assert_eq!(response.content.as_deref(), Some(r#"add returned {"sum":3}. mul returned 6."#));
        assert_eq!(response.finish_reason.as_deref(), Some("stop"));
        assert_eq!(response.tool_calls, None);
    }

    #[test]
    fn odd_tool_results_are_still_reported() {
        let response = OfflineProvider
            .answer(&after_tools(&[("c1", "error: division by zero."), ("zz", ""), ("c2", "")]))
            .unwrap();
        assert_eq!(
            response.content.as_deref(),
            Some("add returned error: division by zero. mul returned nothing. The tool call zz returned nothing.")
        );
        let orphan = request(vec![DraftMessage::tool("c9", "42")], &[]);
        assert_eq!(OfflineProvider.answer(&orphan).unwrap().content.as_deref(), Some("The tool call c9 returned 42."));
    }

    #[test]
    fn the_same_request_gets_the_same_reply_and_ids() {
        let a = ask("use tool add with {\"a\":1} use tool add with {\"a\":1}", &["add"]);
        let b = ask("use tool add with {\"a\":1} use tool add with {\"a\":1}", &["add"]);
        assert_eq!(a, b);
        let ids: Vec<&str> = a.tool_calls.iter().flatten().map(|c| c.id.as_str()).collect();
        assert_ne!(ids[0], ids[1]);
        let c = ask("use tool add with {\"a\":2} use tool add with {\"a\":1}", &["add"]);
        assert_ne!(c.tool_calls.unwrap()[1].id, ids[1]);
    }

    #[test]
    fn text_is_counted_as_its_parts_joined() {
        use subs_protocol::{Content, ContentPart};
        let text = |t: &str| ContentPart::Text { text: t.to_owned() };
        let image: ContentPart =
            serde_json::from_value(json!({"type": "image_url", "image_url": {"url": "https://x/y.png"}})).unwrap();
        for content in [
            None,
            Some(Content::Text("héllo".to_owned())),
            Some(Content::Parts(Vec::new())),
            Some(Content::Parts(vec![image.clone()])),
            Some(Content::Parts(vec![text("ab"), image, text("çd"), text("")])),
        ] {
            let joined = content.as_ref().map_or(0, |c| c.text().len());
            assert_eq!(text_bytes(content.as_ref()), joined, "{content:?}");
        }
    }

    #[test]
    fn ids_hash_the_conversation_from_its_last_recorded_message_on() {
        let recorded = |id: &str, text: &str| DraftMessage::user(text).with_id(id);
        let ids = |messages: Vec<DraftMessage>| {
            OfflineProvider.answer(&request(messages, &["t"])).unwrap().tool_calls.unwrap()[0].id.clone()
        };
        let asked = || DraftMessage::user("use tool t");
        // What comes before the last recorded message is named by its id.
        let one = ids(vec![recorded("a", "first"), recorded("b", "second"), asked()]);
        let other = ids(vec![recorded("x", "another start"), recorded("b", "second"), asked()]);
        assert_eq!(one, other);
        // A message more, or another last id, another hash.
        assert_ne!(one, ids(vec![recorded("a", "first"), recorded("a2", "more"), recorded("b", "second"), asked()]));
        assert_ne!(one, ids(vec![recorded("a", "first"), recorded("c", "second"), asked()]));
        assert_ne!(one, ids(vec![recorded("a", "first"), recorded("b", "second"), DraftMessage::user("use tool t!")]));
    }

    #[test]
    fn ids_are_stable_across_processes_and_releases() {
        // Pinned: a change here changes every recorded offline session's ids.
        let response = OfflineProvider.answer(&request(vec![DraftMessage::user("use tool t")], &["t"])).unwrap();
        assert_eq!(response.tool_calls.unwrap()[0].id, "call_c1fdd703de5396b1");
        // The ids hash the messages only: offering other tools keeps them.
        assert_eq!(
            call_id(messages_hash(&request(vec![DraftMessage::user("use tool t")], &[])), 0),
            "call_c1fdd703de5396b1"
        );
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(mix(0), 0);
    }

    #[test]
    fn usage_counts_a_quarter_token_per_byte() {
        let response = ask("hello", &[]);
        // "be brief" (8) + "hello" (5) = 13 bytes → 4; "You said: hello" (15) → 4.
        assert_eq!(response.usage, Some(json!({"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8})));
        let response = ask("use tool add", &["add"]);
        // 8 + 12 + "add" + "the add tool" = 35 → 9; "add" + "{}" = 5 → 2.
        assert_eq!(response.usage, Some(json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11})));
    }

    #[test]
    fn max_completion_tokens_cuts_the_text() {
        let mut req = request(vec![DraftMessage::user("a long story about nothing")], &[]);
        req.max_completion_tokens = Some(2);
        let response = OfflineProvider.answer(&req).unwrap();
        assert_eq!(response.content.as_deref(), Some("You said"));
        assert_eq!(response.finish_reason.as_deref(), Some("length"));
        assert_eq!(response.usage.unwrap()["completion_tokens"], 2);

        req.max_completion_tokens = Some(100);
        assert_eq!(OfflineProvider.answer(&req).unwrap().finish_reason.as_deref(), Some("stop"));

        // 12 bytes end inside the `é`: the cut is at the character before.
        let mut req = request(vec![DraftMessage::user("aéé")], &[]);
        req.max_completion_tokens = Some(3);
        let response = OfflineProvider.answer(&req).unwrap();
        assert_eq!(response.content.as_deref(), Some("You said: a"));
        assert_eq!(response.usage.unwrap()["completion_tokens"], 3);
        // "aéé" is 5 bytes (3 characters): 2 tokens.
        req.max_completion_tokens = None;
        assert_eq!(OfflineProvider.answer(&req).unwrap().usage.unwrap()["prompt_tokens"], 2);
    }

    #[test]
    fn other_model_names_are_refused() {
        let mut req = request(vec![DraftMessage::user("hi")], &[]);
        req.model = OFFLINE_MODEL.into();
        let e = OfflineProvider.answer(&req).unwrap_err();
        assert!(!e.retryable);
        assert!(e.message.contains("`subs/offline`"), "{e}");
    }

    /// Runs `req` with a sink, checking each delta arrives before the call
    /// settles; returns the deltas and the response.
    async fn streamed(req: LlmRequest) -> (Vec<StreamDelta>, LlmResponse) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink_seen = Arc::clone(&seen);
        let sink: DeltaSink = Arc::new(move |d| {
            sink_seen.lock().unwrap().push(d);
            Ok(())
        });
        let provider = OfflineProvider;
        let mut call = provider.complete(req, Some(sink));
        // Polled by hand: the first poll must stop after one delta, which
        // shows deltas reach consumers while the call is still running.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(call.as_mut().poll(cx))).await;
        assert!(first.is_pending());
        assert_eq!(seen.lock().unwrap().len(), 1);
        let response = call.await.unwrap().response;
        let deltas = seen.lock().unwrap().clone();
        (deltas, response)
    }

    #[tokio::test]
    async fn streamed_text_concatenates_to_the_content() {
        let req = request(vec![DraftMessage::user("the  quick\nbrown fox-jumps-over-the-lazy-dog ")], &[]);
        let (deltas, response) = streamed(req.clone()).await;
        assert_eq!(response, OfflineProvider.answer(&req).unwrap());
        let (last, pieces) = deltas.split_last().unwrap();
        assert_eq!(last, &StreamDelta { finish_reason: Some("stop".into()), ..StreamDelta::default() });
        let text: String = pieces.iter().map(|d| d.text.clone().unwrap()).collect();
        assert_eq!(Some(text), response.content);
        assert!(pieces.len() >= 6, "{pieces:?}");
        assert!(pieces.iter().all(|d| d.text.as_ref().unwrap().chars().count() <= MAX_TEXT_PIECE));
    }

    #[tokio::test]
    async fn streamed_tool_calls_reassemble_to_the_final_calls() {
        let req = request(
            vec![DraftMessage::user(
                r#"use tool nope, use tool add with {"a": 1, "b": 22222}, use tool mul with {"x": "yyyyyyyyy"}"#,
            )],
            &["add", "mul"],
        );
        let (deltas, response) = streamed(req).await;
        let mut text = String::new();
        let mut order: Vec<String> = Vec::new();
        let mut rebuilt: HashMap<String, (String, String)> = HashMap::new();
        for d in &deltas[..deltas.len() - 1] {
            assert_eq!(d.finish_reason, None);
            if let Some(t) = &d.text {
                assert!(order.is_empty(), "text after tool calls");
                text.push_str(t);
            }
            for c in d.tool_calls.iter().flatten() {
                let entry = rebuilt.entry(c.id.clone()).or_insert_with(|| {
                    order.push(c.id.clone());
                    (c.name.clone().expect("the first piece names the tool"), String::new())
                });
                entry.1.push_str(c.arguments.as_deref().unwrap_or_default());
            }
        }
        assert_eq!(deltas.last().unwrap().finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(Some(text), response.content);
        let rebuilt: Vec<ToolCall> = order
            .iter()
            .map(|id| {
                let (name, arguments) = &rebuilt[id];
                ToolCall::function(id, name, arguments)
            })
            .collect();
        assert_eq!(Some(rebuilt), response.tool_calls);
    }

    #[test]
    fn text_pieces_cover_the_text_exactly() {
        for text in ["", " lead", "a b  c\n", "ünïcödé wörds ärë fïnë", "x".repeat(40).as_str()] {
            assert_eq!(text_pieces(text).concat(), text);
        }
        assert_eq!(text_pieces("a b  c"), ["a ", "b  ", "c"]);
        assert_eq!(chunks("abcdefghij", 4), ["abcd", "efgh", "ij"]);
    }

    #[test]
    fn the_phrase_grammar() {
        let parse = |t: &str| -> Vec<(String, String)> {
            tool_requests(t).into_iter().map(|r| (r.name, r.arguments)).collect()
        };
        let pair = |n: &str, a: &str| (n.to_owned(), a.to_owned());
        assert_eq!(parse("use tool a with {} use tool b"), [pair("a", "{}"), pair("b", "{}")]);
        assert_eq!(parse("use tool a with{\"k\":1}"), [pair("a", r#"{"k":1}"#)]);
        assert_eq!(parse("use tool a without"), [pair("a", "{}")]);
        assert_eq!(parse("use tool a with {\"s\": \"use tool b\"}"), [pair("a", r#"{"s":"use tool b"}"#)]);
        assert_eq!(parse("use tool a: yes"), [pair("a", "{}")]);
        assert_eq!(parse("use tool ns:op-2 with { }"), [pair("ns:op-2", "{}")]);
        assert_eq!(parse("Use Tool \"unclosed with {}"), []);
    }
}
