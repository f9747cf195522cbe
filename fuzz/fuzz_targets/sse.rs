//! The event-stream parser every reader of the tree uses
//! (`subs_protocol::sse`): any bytes, cut into chunks anywhere, give the
//! same events (or the same error) as the whole stream in one chunk, and
//! never a panic. (A chunk that ends in an error returns no events, so
//! before an error a finer cut may hand out more of the events that
//! precede it; the reader fails either way.) A small bound makes the
//! over-the-bound error reachable.

#![no_main]

use libfuzzer_sys::fuzz_target;
use subs_protocol::sse::{SseError, SseEvent, SseParser};

/// The bound the fuzzed parsers run with.
const LIMIT: usize = 4096;

/// Feeds `chunks` in order: the events up to the first error, the error,
/// and what `finish` dispatches after a clean end.
fn parse<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> (Vec<SseEvent>, Option<SseError>) {
    let mut parser = SseParser::with_limit(LIMIT);
    let mut events = Vec::new();
    for chunk in chunks {
        match parser.push(chunk) {
            Ok(more) => events.extend(more),
            Err(e) => return (events, Some(e)),
        }
    }
    events.extend(parser.finish());
    (events, None)
}

/// `cut` parsed the stream as `whole` did: the same events, or the same
/// error after at least the same events.
fn same(cut: (Vec<SseEvent>, Option<SseError>), whole: &(Vec<SseEvent>, Option<SseError>), how: &str) {
    match &whole.1 {
        None => assert_eq!(&cut, whole, "{how}"),
        Some(_) => {
            assert_eq!(cut.1, whole.1, "{how}");
            assert!(cut.0.starts_with(&whole.0), "{how}: {cut:?} against {whole:?}");
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte picks where to cut, the rest is the stream.
    let Some((&cut, stream)) = data.split_first() else { return };
    let whole = parse([stream]);
    let step = usize::from(cut % 16) + 1;
    same(parse(stream.chunks(step)), &whole, &format!("cut every {step} bytes"));
    // Every byte alone, with empty chunks between.
    let bytes = stream.iter().flat_map(|b| [std::slice::from_ref(b), &[][..]]);
    same(parse(bytes), &whole, "cut at every byte");
});
