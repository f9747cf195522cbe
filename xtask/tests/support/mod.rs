//! What the generator tests read from the files it writes.

/// The text `files` holds for `path`.
pub fn file<'a>(files: &'a [(&str, String)], path: &str) -> &'a str {
    files.iter().find(|(p, _)| *p == path).map(|(_, text)| text.as_str()).unwrap_or_else(|| panic!("no {path}"))
}

/// The text of the declaration that starts with `start`, up to `end`.
pub fn declaration<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let at = text.find(start).unwrap_or_else(|| panic!("no `{start}` in:\n{text}"));
    let rest = &text[at..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}
