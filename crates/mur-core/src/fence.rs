//! The one fence around foreign text a model reads (docs/reference/capsules.md#calls-between-members):
//! a callee's answer or question, a tool's result, a caller's answer to a question. The text is
//! put between `<untrusted-content source=…>` and `</untrusted-content>`, and every fence marker
//! inside it is neutralised first, so it can neither close its fence nor open another.

/// Replaces the `<` of each fence marker found inside fenced text [exact form ours].
const NEUTRALISED: &str = "<!MURMUR-NEUTRALISED!";

/// `text` fenced as untrusted content from `source` (`member:<name>`, `tool:<name>`, `caller`).
pub fn untrusted(source: &str, text: &str) -> String {
    format!(
        "<untrusted-content source={source}>\n{}\n</untrusted-content>",
        neutralise(text)
    )
}

/// Neutralises every `<untrusted-content` and `</untrusted-content` (ASCII case-insensitive) in
/// `text`, so it cannot close its fence or open a new one.
pub fn neutralise(text: &str) -> String {
    const TAGS: [&[u8]; 2] = [b"<untrusted-content", b"</untrusted-content"];
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    for (i, &b) in bytes.iter().enumerate() {
        let tagged = b == b'<'
            && TAGS
                .iter()
                .any(|t| bytes.len() >= i + t.len() && bytes[i..i + t.len()].eq_ignore_ascii_case(t));
        if tagged {
            out.extend_from_slice(NEUTRALISED.as_bytes());
        } else {
            out.push(b);
        }
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}
