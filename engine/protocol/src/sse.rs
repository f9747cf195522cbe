//! Server-sent events (`text/event-stream`), read incrementally: bytes in,
//! events out. The one reader of the tree: LLM providers' streamed
//! replies, HTTP workers' streamed decisions, the command line and the
//! tests reading the engine's own event stream all go through it.
//!
//! It follows the WHATWG HTML standard's parsing rules:
//!
//! - lines end with CRLF, LF or CR, and a chunk may end anywhere: inside a
//!   line, between the CR and LF of one line break, inside a multi-byte
//!   character (whole lines are decoded, never chunks);
//! - text is UTF-8, invalid sequences decoded as U+FFFD (as a browser's
//!   `EventSource` does); a leading byte-order mark is dropped;
//! - `event:` names the event (`message` when none does); each `data:` line
//!   adds a line to its data; `id:` sets the event's id (and the stream's
//!   last id, kept for `Last-Event-ID`), unless it holds NUL; a line
//!   starting with `:` is a comment; one space after the colon is dropped;
//!   a line without a colon is a field with an empty value; `retry:` and
//!   unknown fields are ignored (reconnecting is the caller's business);
//! - a blank line ends the event; an event without data is not dispatched
//!   (it still sets the last id).
//!
//! Where a stream may end early, [`SseParser::finish`] dispatches an event
//! whose lines all ended but that lacks its closing blank line (some
//! servers close right after the last `data:` line), and
//! [`SseParser::has_partial_event`] says whether anything would be lost.
//!
//! Every parser has a bound: an event (its name, its data and the line
//! being read) larger than it is refused with [`SseError::TooLarge`], so a
//! peer that never ends a line cannot make the reader buffer without end.

use std::mem;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `message` when the event named none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The event's own `id:`, when it has one.
    pub id: Option<String>,
}

/// Why a stream could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// One event grew past the parser's bound.
    #[error("an event of the stream is larger than {limit} bytes")]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
}

/// The bound of [`SseParser::new`]: 16 MiB per event.
pub const DEFAULT_LIMIT: usize = 16 << 20;

/// An incremental event-stream parser; see the module docs.
#[derive(Debug)]
pub struct SseParser {
    /// Bytes of the line not yet ended.
    line: Vec<u8>,
    /// The last byte fed was a CR, so an LF that comes next (perhaps in the
    /// next chunk) belongs to the same line break.
    after_cr: bool,
    /// Whether a line has ended, so only the stream's first line loses its
    /// byte-order mark.
    started: bool,
    /// The open event's `event:` field, if any.
    event: Option<String>,
    /// The open event's data buffer: each `data:` line followed by `\n`,
    /// as the standard builds it (a bare `data:` makes it non-empty).
    data: String,
    /// The open event's `id:`, if any.
    id: Option<String>,
    /// The last id the stream set.
    last_id: Option<String>,
    /// The most bytes one event may hold (and comments kept, together).
    limit: usize,
    /// Comment lines read and not taken yet, when kept.
    comments: Option<Vec<String>>,
    /// Their bytes.
    comment_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser at the start of a stream, bounded by [`DEFAULT_LIMIT`].
    pub fn new() -> Self {
        Self::with_limit(DEFAULT_LIMIT)
    }

    /// A parser that refuses events larger than `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            started: false,
            event: None,
            data: String::new(),
            id: None,
            last_id: None,
            limit,
            comments: None,
            comment_bytes: 0,
        }
    }

    /// Keeps comment lines (`: …`, without the colon and one space) for
    /// [`take_comments`](Self::take_comments) instead of dropping them:
    /// servers say things there (why a stream ends, keep-alives). At most
    /// the parser's limit of bytes is kept; older comments go first.
    pub fn keep_comments(mut self) -> Self {
        self.comments = Some(Vec::new());
        self
    }

    /// The comments read since the last call, oldest first (none unless
    /// [`keep_comments`](Self::keep_comments)).
    pub fn take_comments(&mut self) -> Vec<String> {
        self.comment_bytes = 0;
        self.comments.as_mut().map(mem::take).unwrap_or_default()
    }

    /// Reads the next chunk; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut events = Vec::new();
        let mut start = 0;
        for (i, &byte) in chunk.iter().enumerate() {
            match byte {
                b'\n' if self.after_cr => {
                    self.after_cr = false;
                    start = i + 1;
                }
                b'\r' | b'\n' => {
                    self.line.extend_from_slice(&chunk[start..i]);
                    self.check_size()?;
                    if let Some(event) = self.end_line() {
                        events.push(event);
                    }
                    self.after_cr = byte == b'\r';
                    start = i + 1;
                }
                _ => self.after_cr = false,
            }
        }
        self.line.extend_from_slice(&chunk[start..]);
        self.check_size()?;
        Ok(events)
    }

    /// Ends the stream: dispatches an event whose lines all ended but
    /// which lacks its closing blank line; a line cut short is dropped.
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.line.clear();
        self.dispatch()
    }

    /// Whether the stream so far holds part of an event that no blank line
    /// has ended: what a stream that stops now would lose.
    pub fn has_partial_event(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty()
    }

    /// The last id the stream has set, for `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    fn check_size(&self) -> Result<(), SseError> {
        let event = self.event.as_ref().map_or(0, String::len);
        if self.line.len() + self.data.len() + event > self.limit {
            return Err(SseError::TooLarge { limit: self.limit });
        }
        Ok(())
    }

    fn end_line(&mut self) -> Option<SseEvent> {
        let bytes = mem::take(&mut self.line);
        let decoded = String::from_utf8_lossy(&bytes);
        let mut line: &str = &decoded;
        if !mem::replace(&mut self.started, true) {
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            return self.dispatch();
        }
        if let Some(comment) = line.strip_prefix(':') {
            if let Some(comments) = &mut self.comments {
                let comment = comment.strip_prefix(' ').unwrap_or(comment).to_owned();
                self.comment_bytes += comment.len();
                comments.push(comment);
                while self.comment_bytes > self.limit && !comments.is_empty() {
                    self.comment_bytes -= comments.remove(0).len();
                }
            }
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let id = self.id.take();
        if id.is_some() {
            self.last_id.clone_from(&id);
        }
        let event = self.event.take();
        let mut data = mem::take(&mut self.data);
        if data.is_empty() {
            return None;
        }
        data.pop();
        let event = event.filter(|e| !e.is_empty()).unwrap_or_else(|| "message".to_owned());
        Some(SseEvent { event, data, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent { event: event.into(), data: data.into(), id: None }
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
            ev("message", "no-space\n two spaces"),
            SseEvent { id: Some("7".into()), ..ev("ping", "") },
            ev("message", "cr"),
            ev("message", "[DONE]"),
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
    fn every_line_break_style_ends_lines() {
        for stream in ["data: a\n\n", "data: a\r\n\r\n", "data: a\r\r", "data: a\r\n\r"] {
            assert_eq!(parse_all(&[stream.as_bytes()]), [ev("message", "a")], "{stream:?}");
        }
    }

    #[test]
    fn events_without_data_are_not_dispatched_and_forget_their_name() {
        assert_eq!(parse_all(&[b"event: x\n\ndata: y\n\n"]), [ev("message", "y")]);
        assert_eq!(parse_all(&[b"event:\ndata: y\n\n"]), [ev("message", "y")], "an empty name is `message`");
    }

    #[test]
    fn one_space_after_the_colon_is_dropped_and_no_more() {
        assert_eq!(parse_all(&[b"data:a\ndata: b\ndata:  c\n\n"]), [ev("message", "a\nb\n c")]);
    }

    #[test]
    fn a_bom_is_dropped_only_at_the_start() {
        let stream = "\u{feff}data: a\n\n\u{feff}data: b\n\n";
        assert_eq!(parse_all(&[stream.as_bytes()]), [ev("message", "a")], "a BOM later makes an unknown field");
    }

    #[test]
    fn the_last_id_is_kept_for_a_reconnect() {
        let mut parser = SseParser::new();
        let events = parser.push(b"id: 1\ndata: a\n\ndata: b\n\nid: 2\n\nid: x\0y\ndata: c\n\n").unwrap();
        let ids: Vec<_> = events.iter().map(|e| e.id.as_deref()).collect();
        assert_eq!(ids, [Some("1"), None, None], "an id holding NUL is ignored");
        assert_eq!(parser.last_event_id(), Some("2"), "an event without data still sets the last id");
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_kept_by_finish_but_a_cut_line_is_not() {
        assert_eq!(parse_all(&[b"data: a\n"]), [ev("message", "a")]);
        assert_eq!(parse_all(&[b"data: a\ndata: b"]), [ev("message", "a")]);
        assert_eq!(parse_all(&[b"data: a"]), []);
        let mut parser = SseParser::new();
        parser.push(b"data: a\n\ndata: b").unwrap();
        assert!(parser.has_partial_event());
        parser.push(b"\n\n").unwrap();
        assert!(!parser.has_partial_event());
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        assert_eq!(parse_all(&[b"data: \xff\xfe\n\n"]), [ev("message", "\u{fffd}\u{fffd}")]);
    }

    #[test]
    fn an_event_larger_than_the_bound_is_refused() {
        let mut parser = SseParser::with_limit(16);
        assert_eq!(parser.push(b"data: 0123456789\n").map(|e| e.len()), Ok(0));
        assert_eq!(parser.push(b"data: 0123456789\n"), Err(SseError::TooLarge { limit: 16 }));
        let mut parser = SseParser::with_limit(16);
        assert_eq!(parser.push(&[b'a'; 17]), Err(SseError::TooLarge { limit: 16 }), "a line that never ends");
        let mut parser = SseParser::with_limit(16);
        for _ in 0..10 {
            assert_eq!(parser.push(b"data: 0123456789\n\n").map(|e| e.len()), Ok(1), "the bound is per event");
        }
    }

    #[test]
    fn comments_are_dropped_unless_kept() {
        let stream = b": hello\nevent: a\ndata: 1\n\n:  two spaces\n\n";
        let mut dropping = SseParser::new();
        assert_eq!(dropping.push(stream).unwrap(), [ev("a", "1")]);
        assert!(dropping.take_comments().is_empty());
        let mut keeping = SseParser::new().keep_comments();
        assert_eq!(keeping.push(stream).unwrap(), [ev("a", "1")]);
        assert_eq!(keeping.take_comments(), ["hello", " two spaces"]);
        assert!(keeping.take_comments().is_empty(), "taken once");
        let mut small = SseParser::with_limit(8).keep_comments();
        small.push(b":12345\n:678\n:9\n").unwrap();
        assert_eq!(small.take_comments(), ["678", "9"], "older comments go first past the limit");
    }
}
