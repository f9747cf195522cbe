//! What the fake provider answers: a [`Reply`] per request, with the
//! [`Fault`]s a real provider shows.

use std::time::Duration;

/// One scripted answer. Build with [`Reply::text`] / [`Reply::tool_calls`]
/// and the `with_*` methods; the same reply renders in whichever format
/// (and streaming or not) the request asked for.
#[derive(Debug, Clone, Default)]
pub struct Reply {
    /// Text pieces: one delta each when streaming, joined otherwise.
    pub text: Vec<String>,
    /// Reasoning pieces (OpenAI: `delta.reasoning_content`, or
    /// `delta.reasoning` with [`Reply::with_reasoning_key`]; Anthropic: a
    /// `thinking` block).
    pub reasoning: Vec<String>,
    /// Which OpenAI delta field carries reasoning.
    pub reasoning_key: Option<String>,
    /// Tool calls, in order.
    pub tool_calls: Vec<ScriptedCall>,
    /// Generated images, by URL or `data:` URL (OpenAI: the message's or a
    /// delta's `images`, as OpenRouter sends them; Anthropic: `image`
    /// blocks).
    pub images: Vec<String>,
    /// A refusal: OpenAI's `refusal` field; Anthropic's `stop_reason:
    /// refusal`.
    pub refusal: Option<String>,
    /// Token counts sent as usage.
    pub usage: Usage,
    /// The native finish/stop reason to send instead of the natural one
    /// (`"stop"` with tool calls, `"length"`, `"max_tokens"`, …).
    pub finish_reason: Option<String>,
    /// The model to name instead of echoing the request's.
    pub model: Option<String>,
    /// What goes wrong, if anything.
    pub fault: Option<Fault>,
    /// Wait this long before answering.
    pub latency: Duration,
    /// Wait this long between two stream events.
    pub chunk_delay: Duration,
    /// Send the stream's text in pieces of this many bytes, cutting lines,
    /// `\n\n` separators and multi-byte characters.
    pub byte_chunks: Option<usize>,
    /// Stop after this many stream events until
    /// [`FakeProvider::release`](crate::FakeProvider::release).
    pub hold_after: Option<usize>,
}

/// A scripted tool call, its arguments in the pieces they stream in.
#[derive(Debug, Clone)]
pub struct ScriptedCall {
    /// The call id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The argument text, one piece per stream fragment.
    pub pieces: Vec<String>,
}

impl ScriptedCall {
    /// A call whose arguments stream in `pieces`.
    pub fn new(id: &str, name: &str, pieces: &[&str]) -> ScriptedCall {
        ScriptedCall { id: id.into(), name: name.into(), pieces: pieces.iter().map(|p| (*p).to_owned()).collect() }
    }

    /// A call whose `arguments` stream `every` characters at a time.
    pub fn split_every(id: &str, name: &str, arguments: &str, every: usize) -> ScriptedCall {
        let chars: Vec<char> = arguments.chars().collect();
        let pieces = chars.chunks(every.max(1)).map(|c| c.iter().collect()).collect();
        ScriptedCall { id: id.into(), name: name.into(), pieces }
    }

    /// The whole argument text.
    pub fn arguments(&self) -> String {
        self.pieces.concat()
    }
}

/// Token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
}

impl Default for Usage {
    fn default() -> Self {
        Usage { input: 10, output: 5 }
    }
}

/// A failure to inject.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status, headers and body instead of the reply.
    Status {
        /// The HTTP status.
        status: u16,
        /// Extra headers (`retry-after`, …).
        headers: Vec<(String, String)>,
        /// The body, as sent.
        body: String,
    },
    /// After `after` stream events, an error: Anthropic's `error` event
    /// (`overloaded_error`), OpenAI's `{"error": …}` chunk; then the stream
    /// ends. Not streaming: a 500.
    ErrorEvent {
        /// Events sent first.
        after: usize,
    },
    /// After `after` stream events, the connection breaks (not streaming:
    /// half the body, then the break).
    Drop {
        /// Events sent first.
        after: usize,
    },
    /// After `after` stream events, the stream ends cleanly but without its
    /// last event (not streaming: half the body).
    Truncate {
        /// Events sent first.
        after: usize,
    },
    /// After `after` stream events, one whose data is not JSON (not
    /// streaming: a body that is not JSON).
    Malformed {
        /// Events sent first.
        after: usize,
    },
}

impl Fault {
    /// A 429 with `retry-after: <value>` (seconds or an HTTP date).
    pub fn rate_limited(retry_after: &str) -> Fault {
        Fault::Status {
            status: 429,
            headers: vec![("retry-after".into(), retry_after.into())],
            body: r#"{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}"#
                .into(),
        }
    }

    /// A 429 with `retry-after-ms: <ms>`.
    pub fn rate_limited_ms(ms: u64) -> Fault {
        Fault::Status {
            status: 429,
            headers: vec![("retry-after-ms".into(), ms.to_string())],
            body: r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#.into(),
        }
    }

    /// Anthropic's 529 `overloaded_error`.
    pub fn overloaded() -> Fault {
        Fault::Status {
            status: 529,
            headers: Vec::new(),
            body: r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.into(),
        }
    }

    /// A status with an OpenAI-style error body carrying `message`.
    pub fn status(status: u16, message: &str) -> Fault {
        let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error"}});
        Fault::Status { status, headers: Vec::new(), body: body.to_string() }
    }
}

impl Reply {
    /// A text reply streamed a word at a time (each piece keeps its
    /// trailing space).
    pub fn text(text: &str) -> Reply {
        let mut pieces = Vec::new();
        let mut piece = String::new();
        for c in text.chars() {
            piece.push(c);
            if c == ' ' {
                pieces.push(std::mem::take(&mut piece));
            }
        }
        if !piece.is_empty() {
            pieces.push(piece);
        }
        Reply { text: pieces, ..Reply::default() }
    }

    /// A text reply in exactly these pieces.
    pub fn pieces(pieces: &[&str]) -> Reply {
        Reply { text: pieces.iter().map(|p| (*p).to_owned()).collect(), ..Reply::default() }
    }

    /// A reply that calls `calls` (no text).
    pub fn tool_calls(calls: Vec<ScriptedCall>) -> Reply {
        Reply { tool_calls: calls, ..Reply::default() }
    }

    /// A reply that fails with `fault`.
    pub fn fault(fault: Fault) -> Reply {
        Reply { fault: Some(fault), ..Reply::default() }
    }

    /// A refusal.
    pub fn refusal(text: &str) -> Reply {
        Reply { refusal: Some(text.into()), ..Reply::default() }
    }

    /// Adds reasoning pieces.
    #[must_use]
    pub fn with_reasoning(mut self, pieces: &[&str]) -> Reply {
        self.reasoning = pieces.iter().map(|p| (*p).to_owned()).collect();
        self
    }

    /// Sends OpenAI reasoning under `key` (`reasoning` rather than
    /// `reasoning_content`).
    #[must_use]
    pub fn with_reasoning_key(mut self, key: &str) -> Reply {
        self.reasoning_key = Some(key.into());
        self
    }

    /// Adds generated images (URLs or `data:` URLs).
    #[must_use]
    pub fn with_images(mut self, urls: &[&str]) -> Reply {
        self.images = urls.iter().map(|u| (*u).to_owned()).collect();
        self
    }

    /// Sets the usage.
    #[must_use]
    pub fn with_usage(mut self, input: u64, output: u64) -> Reply {
        self.usage = Usage { input, output };
        self
    }

    /// Sends this native finish reason.
    #[must_use]
    pub fn with_finish_reason(mut self, reason: &str) -> Reply {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Injects `fault`.
    #[must_use]
    pub fn with_fault(mut self, fault: Fault) -> Reply {
        self.fault = Some(fault);
        self
    }

    /// Waits before answering.
    #[must_use]
    pub fn with_latency(mut self, latency: Duration) -> Reply {
        self.latency = latency;
        self
    }

    /// Waits between stream events.
    #[must_use]
    pub fn with_chunk_delay(mut self, delay: Duration) -> Reply {
        self.chunk_delay = delay;
        self
    }

    /// Sends the stream text `n` bytes at a time.
    #[must_use]
    pub fn with_byte_chunks(mut self, n: usize) -> Reply {
        self.byte_chunks = Some(n.max(1));
        self
    }

    /// Holds the stream after `n` events until released.
    #[must_use]
    pub fn with_hold_after(mut self, n: usize) -> Reply {
        self.hold_after = Some(n);
        self
    }

    /// Names `model` as the model that answered.
    #[must_use]
    pub fn with_model(mut self, model: &str) -> Reply {
        self.model = Some(model.into());
        self
    }

    /// The whole text.
    pub fn full_text(&self) -> String {
        self.text.concat()
    }
}
