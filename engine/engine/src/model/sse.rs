//! Server-sent events, read incrementally from a streamed response body.
//!
//! Both providers stream their replies as SSE. The body arrives in chunks
//! cut anywhere — inside a line, between `\r` and `\n`, inside a multi-byte
//! character — so the parser keeps bytes until a line is complete and only
//! then decodes it. It follows the WHATWG event-stream rules that matter
//! here: `\n`, `\r\n` and `\r` end lines; `event:` names the event; `data:`
//! lines join with `\n`; `:` starts a comment; a blank line dispatches; one
//! space after the colon is dropped; a leading BOM is skipped. `id:` and
//! `retry:` are read and ignored (nothing here reconnects).

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name; empty when the event had none (the spec's
    /// "message").
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// Why the stream's text could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// A line is not UTF-8.
    #[error("the event stream is not UTF-8 text: {0}")]
    NotUtf8(String),
    /// A line grew past [`MAX_LINE`] bytes without ending.
    #[error("an event-stream line is longer than {MAX_LINE} bytes")]
    LineTooLong,
}

/// The longest line kept while waiting for its end: a guard against a
/// server that never sends a newline.
pub const MAX_LINE: usize = 16 * 1024 * 1024;

/// An incremental event-stream parser: feed it chunks, take events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line not yet ended.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`, so a `\n` opening this one
    /// belongs to that line ending.
    after_cr: bool,
    /// Whether the first line (which may open with a BOM) has ended.
    started: bool,
    /// The event being built.
    event: String,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds the next chunk; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        let mut rest = chunk;
        // An empty chunk says nothing about what follows a `\r`.
        if self.after_cr && !rest.is_empty() {
            if let Some(stripped) = rest.strip_prefix(b"\n") {
                rest = stripped;
            }
            self.after_cr = false;
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            let ending = rest[end];
            rest = &rest[end + 1..];
            if ending == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            if let Some(event) = self.line_ended(&line)? {
                events.push(event);
            }
        }
        if self.line.len() + rest.len() > MAX_LINE {
            return Err(SseError::LineTooLong);
        }
        self.line.extend_from_slice(rest);
        Ok(events)
    }

    /// Ends the stream: an event whose lines all ended but which lacks the
    /// closing blank line is still dispatched (some servers close right
    /// after the last `data:` line); a line cut short is dropped.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.line.clear();
        self.dispatch()
    }

    fn line_ended(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        let line = std::str::from_utf8(line).map_err(|e| SseError::NotUtf8(e.to_string()))?;
        let line = if self.started { line } else { line.strip_prefix('\u{feff}').unwrap_or(line) };
        self.started = true;
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        // Per the spec an event without data is not dispatched (and its
        // name is forgotten).
        std::mem::take(&mut self.has_data).then_some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into() }
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in chunks {
            events.extend(parser.push(chunk).unwrap());
        }
        events.extend(parser.finish());
        events
    }

    const STREAM: &str = "\u{feff}event: message_start\r\n: comment\r\ndata: {\"a\":\"h\u{e9}llo \u{1F600}\"}\r\n\r\n\
        data:no-space\ndata:  two spaces\n\nevent: ping\nid: 7\nretry: 10\ndata\n\n\
        event: lonely\n\ndata: cr\r\rdata: [DONE]\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev("message_start", "{\"a\":\"h\u{e9}llo \u{1F600}\"}"),
            ev("", "no-space\n two spaces"),
            ev("ping", ""),
            ev("", "cr"),
            ev("", "[DONE]"),
        ]
    }

    #[test]
    fn parses_the_event_stream_rules() {
        assert_eq!(parse_all(&[STREAM.as_bytes()]), expected());
    }

    #[test]
    fn any_split_into_two_or_three_chunks_gives_the_same_events() {
        let bytes = STREAM.as_bytes();
        for i in 0..=bytes.len() {
            assert_eq!(parse_all(&[&bytes[..i], &bytes[i..]]), expected(), "split at {i}");
            for j in i..=bytes.len() {
                assert_eq!(parse_all(&[&bytes[..i], &bytes[i..j], &bytes[j..]]), expected(), "split at {i}, {j}");
            }
        }
    }

    #[test]
    fn byte_at_a_time_splits_multibyte_characters_and_crlf() {
        let chunks: Vec<&[u8]> = STREAM.as_bytes().chunks(1).collect();
        assert_eq!(parse_all(&chunks), expected());
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_kept_but_a_cut_line_is_not() {
        assert_eq!(parse_all(&[b"data: a\n"]), [ev("", "a")]);
        assert_eq!(parse_all(&[b"data: a\ndata: b"]), [ev("", "a")]);
        assert_eq!(parse_all(&[b"data: a"]), []);
    }

    #[test]
    fn bad_text_is_an_error_not_a_panic() {
        let mut parser = SseParser::new();
        assert!(matches!(parser.push(b"data: \xff\xfe\n"), Err(SseError::NotUtf8(_))));
        let mut parser = SseParser::new();
        let long = vec![b'a'; MAX_LINE + 1];
        assert_eq!(parser.push(&long), Err(SseError::LineTooLong));
    }
}
