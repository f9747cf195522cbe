//! A reader of `text/event-stream` bodies: bytes in, events out.
//!
//! It follows the HTML standard's parsing rules, minus what a one-shot
//! reply has no use for (`id` and `retry` are read and dropped, since the
//! engine never reconnects to a worker mid-reply):
//!
//! - lines end with CRLF, LF or CR, and a chunk may end anywhere, even
//!   between the CR and LF of one line break;
//! - `event:` names the event (`message` when none does), each `data:` line
//!   adds a line to its data, a line starting with `:` is a comment, one
//!   space after the colon is dropped, a line without a colon is a field
//!   with an empty value, unknown fields are ignored;
//! - a blank line ends the event; an event without data is not dispatched;
//!   a leading byte-order mark is dropped;
//! - an event still open when the stream ends is discarded
//!   ([`SseParser::has_partial_event`] tells whether one was).

use std::mem;

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field, or `message` when the event named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// An event grew past the parser's limit. Without a limit a worker that
/// never ends a line would make the engine buffer without bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an event is larger than {limit} bytes")]
pub(crate) struct TooLarge {
    /// The limit.
    pub limit: usize,
}

/// An incremental `text/event-stream` parser; see the module docs.
#[derive(Debug)]
pub(crate) struct SseParser {
    /// Bytes of the line not yet ended.
    line: Vec<u8>,
    /// The `event:` field of the open event; empty when none was given.
    event: String,
    /// The open event's data, each line followed by `\n` (the standard's
    /// data buffer: `data:` alone makes it non-empty, so it dispatches).
    data: String,
    /// Whether the last byte fed was a CR, so an LF that comes next (maybe
    /// in the next chunk) is the same line break.
    after_cr: bool,
    /// Whether a line has been read, so only the stream's first line loses
    /// its byte-order mark.
    started: bool,
    /// The most bytes one event (its data plus the current line) may hold.
    limit: usize,
}

impl SseParser {
    /// A parser that refuses events larger than `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self { line: Vec::new(), event: String::new(), data: String::new(), after_cr: false, started: false, limit }
    }

    /// Reads `bytes`, appending each event they complete to `out`.
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLarge> {
        let mut start = 0;
        for (i, &byte) in bytes.iter().enumerate() {
            match byte {
                b'\n' if self.after_cr => {
                    self.after_cr = false;
                    start = i + 1;
                }
                b'\r' | b'\n' => {
                    self.line.extend_from_slice(&bytes[start..i]);
                    self.check_size()?;
                    self.end_line(out);
                    self.after_cr = byte == b'\r';
                    start = i + 1;
                }
                _ => self.after_cr = false,
            }
        }
        self.line.extend_from_slice(&bytes[start..]);
        self.check_size()
    }

    /// Whether the stream so far holds part of an event that no blank line
    /// has ended: what a stream that stops now would lose.
    pub(crate) fn has_partial_event(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty()
    }

    fn check_size(&self) -> Result<(), TooLarge> {
        if self.line.len() + self.data.len() + self.event.len() > self.limit {
            return Err(TooLarge { limit: self.limit });
        }
        Ok(())
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let bytes = mem::take(&mut self.line);
        let mut line = String::from_utf8_lossy(&bytes);
        if !mem::replace(&mut self.started, true)
            && let Some(rest) = line.strip_prefix('\u{feff}')
        {
            line = rest.to_owned().into();
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => value.clone_into(&mut self.event),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            // `id` and `retry` matter to a client that reconnects; the
            // engine does not. Unknown fields are ignored by the standard.
            _ => {}
        }
        // Keep the line buffer's capacity for the next line.
        self.line = bytes;
        self.line.clear();
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = mem::take(&mut self.event);
        let mut data = mem::take(&mut self.data);
        if data.is_empty() {
            return;
        }
        data.pop(); // the `\n` after the last data line
        let event = if event.is_empty() { "message".to_owned() } else { event };
        out.push(SseEvent { event, data });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunks: &[&[u8]]) -> (Vec<SseEvent>, SseParser) {
        let mut parser = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut out).unwrap();
        }
        (out, parser)
    }

    fn event(name: &str, data: &str) -> SseEvent {
        SseEvent { event: name.to_owned(), data: data.to_owned() }
    }

    #[test]
    fn events_end_at_blank_lines() {
        let (events, parser) =
            parse(&[b"event: llm.token.delta\ndata: {\"text\":\"hel\"}\n\nevent: decision.result\ndata: {}\n\n"]);
        assert_eq!(events, [event("llm.token.delta", r#"{"text":"hel"}"#), event("decision.result", "{}")]);
        assert!(!parser.has_partial_event());
    }

    #[test]
    fn data_lines_join_with_newlines() {
        let (events, _) = parse(&[b"data: {\ndata:  \"a\": 1\ndata\ndata: }\n\n"]);
        assert_eq!(events, [event("message", "{\n \"a\": 1\n\n}")]);
    }

    #[test]
    fn comments_and_unknown_fields_are_skipped() {
        let (events, _) = parse(&[b": keep-alive\n\n:\nid: 7\nretry: 10\nfoo: bar\nevent: x\ndata: 1\n\n"]);
        assert_eq!(events, [event("x", "1")]);
    }

    #[test]
    fn events_without_data_are_not_dispatched_and_reset_the_name() {
        let (events, _) = parse(&[b"event: lonely\n\ndata: after\n\n"]);
        assert_eq!(events, [event("message", "after")]);
        let (events, _) = parse(&[b"data:\n\n"]);
        assert_eq!(events, [event("message", "")]);
    }

    #[test]
    fn every_line_break_style_works() {
        let expected = [event("a", "1"), event("b", "2")];
        for text in [
            &b"event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n"[..],
            b"event: a\rdata: 1\r\revent: b\rdata: 2\r\r",
            b"event: a\ndata: 1\r\n\revent: b\r\ndata: 2\n\n",
        ] {
            assert_eq!(parse(&[text]).0, expected, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn chunks_may_split_anywhere() {
        let text = "\u{feff}event: é\r\ndata: {\"text\": \"ü\"}\r\n\r\n: c\r\ndata: x\r\n\r\n".as_bytes();
        let whole = parse(&[text]).0;
        assert_eq!(whole, [event("é", r#"{"text": "ü"}"#), event("message", "x")]);
        for split in 0..=text.len() {
            let (a, b) = text.split_at(split);
            assert_eq!(parse(&[a, b]).0, whole, "split at {split}");
        }
        let bytes: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse(&bytes).0, whole);
    }

    #[test]
    fn a_cr_then_lf_across_chunks_is_one_line_break() {
        let (events, _) = parse(&[b"data: 1\r", b"\n", b"\r", b"\n"]);
        assert_eq!(events, [event("message", "1")]);
    }

    #[test]
    fn one_space_after_the_colon_is_dropped_and_no_more() {
        let (events, _) = parse(&[b"event:x\ndata:  two\n\n"]);
        assert_eq!(events, [event("x", " two")]);
    }

    #[test]
    fn unfinished_events_are_reported_not_dispatched() {
        let (events, parser) = parse(&[b"event: decision.result\ndata: {}\n"]);
        assert!(events.is_empty());
        assert!(parser.has_partial_event());
        let (_, parser) = parse(&[b"data: {}"]);
        assert!(parser.has_partial_event());
    }

    #[test]
    fn a_bom_is_dropped_only_at_the_start() {
        let (events, _) = parse(&[b"\xEF\xBB", b"\xBFdata: 1\n\n\xEF\xBB\xBFdata: 2\n\n"]);
        // The second BOM starts a field named "\u{feff}data", which is unknown.
        assert_eq!(events, [event("message", "1")]);
    }

    #[test]
    fn events_larger_than_the_limit_are_refused() {
        let mut parser = SseParser::new(16);
        let mut out = Vec::new();
        parser.feed(b"data: 0123456789\n", &mut out).unwrap();
        assert_eq!(parser.feed(b"data: 0123456789\n", &mut out), Err(TooLarge { limit: 16 }));
        let mut parser = SseParser::new(16);
        assert_eq!(parser.feed(&[b'x'; 17], &mut out), Err(TooLarge { limit: 16 }));
        assert!(out.is_empty());
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let (events, _) = parse(&[b"data: \xff\n\n"]);
        assert_eq!(events, [event("message", "\u{fffd}")]);
    }
}
