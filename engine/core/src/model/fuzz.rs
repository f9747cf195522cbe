//! Fuzzing of the providers' stream readers and response readers, on the
//! stable toolchain so it runs with the tests: real-looking OpenAI and
//! Anthropic streams (text, reasoning, tool calls split across chunks,
//! usage, errors), mutated thousands of times over by a seeded generator
//! (bytes flipped, cut, repeated, JSON tokens and huge numbers spliced
//! in), parsed as the engine parses a provider's stream, and fed to both
//! readers. Whatever arrives, a reader answers a reply or an error with a
//! message, never panics, and keeps its error messages short however long
//! the input. `FUZZ_CASES` sets the number of mutants per seed.
//!
//! Coverage-guided fuzzing of the SSE parser itself is in `fuzz/`.

use serde_json::Value;

use super::reply::ReplyBuilder;
use super::sse::{SseEvent, SseParser};
use super::{ModelError, anthropic, openai};

const OPENAI: &str = concat!(
    "data: {\"id\":\"c1\",\"model\":\"gpt-x\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"think\"}}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hé \"}}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":\"}}]}}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"1}\"}},{\"index\":1,\"id\":\"call_2\",\"function\":{\"name\":\"sub\",\"arguments\":\"{}\"}}]}}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3}}\n\n",
    "data: [DONE]\n\n",
);

const ANTHROPIC: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"model\":\"claude-x\",\"usage\":{\"input_tokens\":9}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hé \"}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"add\",\"input\":{}}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\\\":\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"1}\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
    "event: ping\ndata: {\"type\":\"ping\"}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

const ERRORS: &str = concat!(
    "data: {\"error\":{\"message\":\"slow down\",\"type\":\"rate_limit_error\",\"code\":429}}\n\n",
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n",
);

/// What gets spliced in: JSON structure, numbers that do not fit, SSE
/// syntax, and the strings the readers branch on.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "null",
    "true",
    "-1",
    "0",
    "1e999",
    "18446744073709551615",
    "-9223372036854775809",
    "\n\n",
    "\r",
    "data: ",
    "event: ",
    "[DONE]",
    "\"index\":",
    "\"tool_calls\":",
    "\"arguments\":",
    "\"content_block\":",
    "\"input_json_delta\"",
    "\"tool_use\"",
    "\"error\":",
    "\u{fffd}",
    "\u{0}",
];

/// xorshift64*: reproducible mutants without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n.max(1) as u64)).unwrap_or(0)
    }
}

/// `seed` with one to four random edits.
fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(bytes.len() + 1);
        match rng.below(6) {
            0 if !bytes.is_empty() => {
                let i = rng.below(bytes.len());
                bytes[i] ^= 1 << rng.below(8);
            }
            1 => {
                let end = (at + rng.below(64)).min(bytes.len());
                bytes.drain(at..end);
            }
            2 => {
                let end = (at + rng.below(256)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                for _ in 0..=rng.below(8) {
                    bytes.splice(at..at, copy.iter().copied());
                }
            }
            3 => bytes.truncate(at),
            _ => {
                let token = TOKENS[rng.below(TOKENS.len())];
                bytes.splice(at..at, token.bytes());
            }
        }
    }
    bytes
}

/// The events of `stream` as the engine's parser hands them out, up to
/// its first error.
fn events(stream: &[u8]) -> Vec<SseEvent> {
    let mut parser = SseParser::new();
    let mut events = parser.push(stream).unwrap_or_default();
    events.extend(parser.finish());
    events
}

/// A reply or an error that says something, in a few kilobytes at most.
fn check(outcome: Result<super::Completion, ModelError>, input: &[u8]) {
    match outcome {
        Ok(done) => drop(subs_protocol::to_json(&done.response)),
        Err(e) => {
            assert!(
                !e.message.trim().is_empty(),
                "an error without a message for {:?}",
                String::from_utf8_lossy(input)
            );
            assert!(e.message.len() < 4096, "an error message of {} bytes", e.message.len());
        }
    }
}

/// A provider's stream reader, so both formats run the same way.
trait Reader {
    fn event(&mut self, event: &SseEvent) -> Result<bool, ModelError>;
    fn finish(self, provider: &str) -> Result<super::Completion, ModelError>;
}

macro_rules! reader {
    ($($format:ident),+) => {$(
        impl Reader for $format::StreamReader {
            fn event(&mut self, event: &SseEvent) -> Result<bool, ModelError> {
                $format::StreamReader::event(self, event)
            }
            fn finish(self, provider: &str) -> Result<super::Completion, ModelError> {
                $format::StreamReader::finish(self, provider)
            }
        }
    )+};
}
reader!(openai, anthropic);

/// Feeds `events` as the model client does (stopping at the end or the
/// first error) and finishes the reply.
fn read(mut reader: impl Reader, events: &[SseEvent], provider: &str) -> Result<super::Completion, ModelError> {
    for event in events {
        if reader.event(event)? {
            break;
        }
    }
    reader.finish(provider)
}

/// Runs one stream through both readers, and each event's JSON through
/// both non-streaming readers.
fn run(stream: &[u8]) {
    let events = events(stream);
    check(read(openai::StreamReader::new(ReplyBuilder::new(None, true)), &events, "openai"), stream);
    check(read(anthropic::StreamReader::new(ReplyBuilder::new(None, true)), &events, "anthropic"), stream);
    for event in &events {
        if let Ok(body) = serde_json::from_str::<Value>(&event.data) {
            check(openai::read_response(&body, ReplyBuilder::new(None, true)), event.data.as_bytes());
            check(anthropic::read_response(&body, ReplyBuilder::new(None, true)), event.data.as_bytes());
        }
    }
}

#[test]
fn the_seeds_read_as_replies() {
    let reply = read(openai::StreamReader::new(ReplyBuilder::new(None, true)), &events(OPENAI.as_bytes()), "openai");
    assert_eq!(
        reply.unwrap().response.tool_calls.map(|c| c.len()),
        Some(2),
        "the OpenAI seed reaches the tool-call paths"
    );
    let reply =
        read(anthropic::StreamReader::new(ReplyBuilder::new(None, true)), &events(ANTHROPIC.as_bytes()), "anthropic");
    assert_eq!(
        reply.unwrap().response.tool_calls.map(|c| c.len()),
        Some(1),
        "the Anthropic seed reaches the tool-use paths"
    );
}

#[test]
fn mutated_provider_streams_give_a_reply_or_an_error_never_a_panic() {
    let cases: usize = std::env::var("FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(3000);
    let mut rng = Rng(0x005e_ed0f_5ab5);
    for seed in [OPENAI, ANTHROPIC, ERRORS] {
        run(seed.as_bytes());
        for _ in 0..cases {
            run(&mutate(seed.as_bytes(), &mut rng));
        }
    }
}
