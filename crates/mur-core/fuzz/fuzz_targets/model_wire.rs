//! Fuzzes the reading of a model provider's replies (docs/reference/capsules.md#model-capsules):
//! `parse_reply` (a whole reply of either API), `StreamReader` (a streamed reply), and the failure
//! text and retry waits read from a failed reply's body and headers.
//!
//! Input: the first byte picks the provider (low 2 bits) and the chunk size a stream arrives in
//! (1..=64); the rest is the body. Properties: no panic; reading is deterministic; the streamed
//! answer-text deltas are exactly the reader's text, which stays within `MAX_REPLY`; a stream read
//! in chunks ends as the same stream read whole does; the failure text quotes at most
//! `FAILURE_BODY_BYTES` of the body and never the key.

#![no_main]

use std::time::{Duration, SystemTime};

use libfuzzer_sys::fuzz_target;
use mur_core::manifest::Provider;
use mur_core::secret::Secret;
use mur_core::wire::model::{FAILURE_BODY_BYTES, failure_text, parse_reply, provider_wait};
use mur_core::wire::model_stream::{MAX_REPLY, StreamReader};

const KEY: &str = "sk-fuzz-0123456789";
/// The key, held as a member holds its provider's key, so the failure text is scrubbed of it.
static HELD: std::sync::OnceLock<Secret> = std::sync::OnceLock::new();

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let provider = match mode & 0x03 {
        0 => Provider::OpenAi,
        1 => Provider::OpenAiCompatible,
        _ => Provider::Anthropic,
    };
    let chunk = usize::from(mode >> 2) + 1;

    // A whole reply.
    let first = parse_reply(provider, body);
    assert_eq!(parse_reply(provider, body), first);

    // A streamed reply, in chunks and whole.
    let (chunked, chunked_ok) = stream(provider, body, chunk);
    let (whole, whole_ok) = stream(provider, body, body.len().max(1));
    assert_eq!(chunked_ok, whole_ok);
    if chunked_ok {
        assert_eq!(chunked.text(), whole.text());
        assert_eq!(chunked.is_done(), whole.is_done());
        assert_eq!(chunked.finish(), whole.finish());
    }

    // A failed reply: the quoted body is cut, the key never shown.
    let status = u16::from(mode) * 3;
    HELD.get_or_init(|| Secret::new(KEY.to_string()));
    let text = failure_text(status, body);
    assert!(
        text.len() <= "inference failed: 765 ".len() + FAILURE_BODY_BYTES,
        "{text:?}"
    );
    assert!(!text.contains(KEY), "{text:?}");
    if let Ok(header) = std::str::from_utf8(body) {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        if let Some(wait) = provider_wait(Some(header), None, now) {
            assert!(wait <= Duration::from_secs(86_400), "{header:?}");
        }
        let _ = provider_wait(None, Some(header), now);
    }
});

/// Reads `body` as a stream arriving in `chunk`-byte pieces, checking the deltas on the way;
/// returns the reader and whether every piece was read.
fn stream(provider: Provider, body: &[u8], chunk: usize) -> (StreamReader, bool) {
    let mut reader = StreamReader::new(provider);
    let mut deltas = String::new();
    let mut ok = true;
    for piece in body.chunks(chunk) {
        let (got, result) = reader.push(piece);
        deltas.extend(got);
        assert!(reader.text().len() <= MAX_REPLY);
        if result.is_err() {
            ok = false;
            break;
        }
    }
    assert_eq!(deltas, reader.text());
    assert_eq!(reader.finish(), reader.finish());
    (reader, ok)
}
