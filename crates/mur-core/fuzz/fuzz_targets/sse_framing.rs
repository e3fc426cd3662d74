//! Fuzzes the SubscribeToTask event-stream framing a caller reads
//! (docs/reference/capsules.md#calls-between-members step 5).
//!
//! Input: the first byte sets the event bound (1..=64 bytes, so the bound is reached often), the
//! second the chunk size (1..=32); the rest is the stream. Properties: no panic; the stream read in
//! chunks gives exactly the events of a naive reading of the whole stream, and is refused exactly
//! when that reading finds an event (or the unended tail) longer than the bound; the bytes held
//! between chunks never pass the bound plus a partial separator.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::wire::sse;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let [bound, chunk, stream @ ..] = data else {
        return;
    };
    let max = usize::from(bound % 64) + 1;
    let chunk = usize::from(chunk % 32) + 1;
    let want = naive(stream, max);

    let mut reader = sse::SseReader::new(max);
    let mut got = Vec::new();
    let mut refused = false;
    for piece in stream.chunks(chunk) {
        match reader.push(piece) {
            Ok(events) => got.extend(events),
            Err(_) => {
                refused = true;
                break;
            }
        }
        assert!(reader.buffered() <= max + 3, "{} bytes held", reader.buffered());
    }
    match want {
        Ok(events) => {
            assert!(!refused, "refused a stream within the bound");
            assert_eq!(got, events);
        }
        Err(before) => {
            assert!(refused, "kept an event past the bound");
            assert!(got.len() <= before.len() && got[..] == before[..got.len()]);
        }
    }
    // In one piece: the same answer.
    let whole = sse::SseReader::new(max).push(stream);
    assert_eq!(whole.is_err(), refused);
});

/// The whole stream split at each first blank line by plain search: the events' data as JSON, or
/// `Err` with the events before the first one too long.
fn naive(stream: &[u8], max: usize) -> Result<Vec<Value>, Vec<Value>> {
    let mut out = Vec::new();
    let mut rest = stream;
    loop {
        let lf = rest.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
        let crlf = rest.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i, 4));
        let Some((end, sep)) = [lf, crlf].into_iter().flatten().min_by_key(|(i, _)| *i) else {
            break;
        };
        if end > max {
            return Err(out);
        }
        let mut data: Option<String> = None;
        for line in String::from_utf8_lossy(&rest[..end]).lines() {
            if let Some(d) = line.strip_prefix("data:") {
                let d = d.strip_prefix(' ').unwrap_or(d);
                data = Some(match data {
                    Some(before) => format!("{before}\n{d}"),
                    None => d.to_string(),
                });
            }
        }
        if let Ok(v) = serde_json::from_str(&data.unwrap_or_default()) {
            out.push(v);
        }
        rest = &rest[end + sep..];
    }
    // The unended tail: its shortest possible event leaves off a separator's beginning.
    let partial = [&b"\r\n\r"[..], b"\r\n", b"\n", b"\r"]
        .iter()
        .find(|p| rest.ends_with(p))
        .map_or(0, |p| p.len());
    if rest.len() - partial > max {
        return Err(out);
    }
    Ok(out)
}
