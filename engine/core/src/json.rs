//! Sizes of JSON values, measured without building their text.

use std::io;

use serde::Serialize;

/// The length of `value`'s compact JSON, counted without writing it
/// anywhere.
pub(crate) fn json_bytes(value: &impl Serialize) -> u64 {
    /// Counts what is written to it.
    struct Count(u64);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // What is counted (messages, inputs, tool schemas) is made of
    // strings and JSON values, whose JSON always exists: no write fails.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::json_bytes;

    #[test]
    fn counts_the_compact_json() {
        let value = json!({"a": [1, "two", null], "b": {"c": "\u{e9}\n"}});
        assert_eq!(json_bytes(&value), serde_json::to_string(&value).unwrap().len() as u64);
    }
}
