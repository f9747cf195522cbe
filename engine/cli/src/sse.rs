//! A reader of server-sent events (the `text/event-stream` format of the
//! WHATWG HTML standard), fed with chunks as they arrive off the wire.
//!
//! Chunks split lines and even UTF-8 characters anywhere, so the parser
//! keeps the unfinished line as bytes and decodes only whole lines. It
//! remembers the last event id the way `EventSource` does (an event
//! without `id:` keeps the previous one), which is what a reconnect sends
//! as `Last-Event-ID`.

/// One event of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `message` when the event has none.
    pub event: String,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The event's own `id:`, when it has one (events without an id, like
    /// subs' token deltas, are not replayed on reconnect).
    pub id: Option<String>,
}

/// Turns bytes into events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting this one belongs to
    /// that line ending.
    after_cr: bool,
    /// Whether the stream's first line has been seen (a UTF-8 byte order
    /// mark may start it).
    started: bool,
    /// Fields of the event being read: its type, its data buffer (each
    /// `data:` line plus `\n`, as the standard builds it) and its id.
    event: Option<String>,
    data: String,
    id: Option<String>,
    /// The last event id seen (what to resume after).
    last_id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The last event id the stream has set, for `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Reads a chunk; returns the events it completed, in order.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in chunk {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&line) {
                        events.push(event);
                    }
                }
                _ => self.line.push(byte),
            }
        }
        events
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        let mut line = String::from_utf8_lossy(line).into_owned();
        if !std::mem::replace(&mut self.started, true) && line.starts_with('\u{feff}') {
            line.remove(0);
        }
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            // A comment: keep-alives are sent this way.
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            // An id holding NUL is ignored, as the standard says.
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            // `retry:` and unknown fields: the reconnect policy is the
            // client's own.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let id = self.id.take();
        if let Some(id) = &id {
            self.last_id = Some(id.clone());
        }
        let event = self.event.take();
        let mut data = std::mem::take(&mut self.data);
        // A block with no data is no event (it may still have set the id).
        if data.is_empty() {
            return None;
        }
        data.pop();
        Some(SseEvent { event: event.filter(|e| !e.is_empty()).unwrap_or_else(|| "message".to_owned()), data, id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(event: &str, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent { event: event.to_owned(), data: data.to_owned(), id: id.map(str::to_owned) }
    }

    #[test]
    fn reads_events_with_ids_names_and_data() {
        let mut p = SseParser::new();
        let events = p.feed(b"id: 3\nevent: message\ndata: {\"a\":1}\n\nevent: llm.token.delta\ndata: {}\n\n");
        assert_eq!(events, [ev("message", "{\"a\":1}", Some("3")), ev("llm.token.delta", "{}", None)]);
        assert_eq!(p.last_event_id(), Some("3"), "an event without id keeps the last one");
    }

    #[test]
    fn chunks_may_split_anything() {
        let text = "id: 1\r\nevent: x\r\ndata: héllo\r\n\r\n: keep-alive\n\nid:2\rdata:a\rdata:\rdata: b\r\r";
        let whole = SseParser::new().feed(text.as_bytes());
        assert_eq!(whole, [ev("x", "héllo", Some("1")), ev("message", "a\n\nb", Some("2"))]);
        // Every split point, including inside `\r\n` and inside `é`.
        for at in 0..text.len() {
            let mut p = SseParser::new();
            let mut events = p.feed(&text.as_bytes()[..at]);
            events.extend(p.feed(&text.as_bytes()[at..]));
            assert_eq!(events, whole, "split at {at}");
            assert_eq!(p.last_event_id(), Some("2"));
        }
        // One byte at a time.
        let mut p = SseParser::new();
        let events: Vec<_> = text.as_bytes().iter().flat_map(|b| p.feed(&[*b])).collect();
        assert_eq!(events, whole);
    }

    #[test]
    fn comments_empty_blocks_and_unfinished_events_are_not_events() {
        let mut p = SseParser::new();
        assert_eq!(p.feed(b": ping\n\n\n\nretry: 10\n\n"), []);
        // An id-only block sets the id but dispatches nothing.
        assert_eq!(p.feed(b"id: 7\n\n"), []);
        assert_eq!(p.last_event_id(), Some("7"));
        // No blank line yet: not dispatched (a dropped connection loses it).
        assert_eq!(p.feed(b"id: 8\ndata: partial\n"), []);
        assert_eq!(p.last_event_id(), Some("7"));
    }

    #[test]
    fn a_byte_order_mark_and_fields_without_colon() {
        let mut p = SseParser::new();
        let events = p.feed("\u{feff}data\nevent:e\n\n".as_bytes());
        assert_eq!(events, [ev("e", "", None)]);
    }
}
