//! Server-sent-event framing for the SubscribeToTask stream a caller follows
//! (docs/reference/capsules.md#calls-between-members step 5): bytes in, each event's `data:` JSON
//! out. Pure (bytes and `serde_json` only); the `sse_framing` fuzz target reads streams with it in
//! every chunking.

use serde_json::Value;

/// Longest event kept while waiting for its end; a stream sending more is not followed.
pub const MAX_EVENT: usize = 8 << 20;

/// Splits a server-sent-event byte stream into the JSON of its `data:` fields.
///
/// Each byte is looked at a bounded number of times however the stream is chunked: a search
/// for an event's end resumes where the last one stopped. Memory stays within one event's bound
/// plus a partial separator.
#[derive(Debug)]
pub struct SseReader {
    buf: Vec<u8>,
    /// No separator starts before this index of `buf`: where the next search resumes.
    scanned: usize,
    max_event: usize,
}

impl Default for SseReader {
    fn default() -> Self {
        SseReader::new(MAX_EVENT)
    }
}

/// One event was longer than the reader's bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

impl SseReader {
    /// A reader refusing any event longer than `max_event` bytes (its blank line not counted).
    pub fn new(max_event: usize) -> SseReader {
        SseReader {
            buf: Vec::new(),
            scanned: 0,
            max_event,
        }
    }

    /// Adds bytes; returns every complete event's data parsed as JSON (events whose data is not
    /// JSON are skipped), or `Err` once an event is, or must become, longer than the bound.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Value>, TooLong> {
        Ok(self
            .push_data(bytes)?
            .iter()
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect())
    }

    /// Adds bytes; returns every complete event's `data:` text, unparsed (events without a
    /// `data:` field are skipped): for streams whose data is not always JSON (`[DONE]`) or
    /// whose malformed events must be noticed rather than skipped.
    pub fn push_data(&mut self, bytes: &[u8]) -> Result<Vec<String>, TooLong> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some((end, sep)) = find_event_end(&self.buf, self.scanned) {
            if end - start > self.max_event {
                return Err(TooLong);
            }
            if let Some(v) = event_data(&self.buf[start..end]) {
                out.push(v);
            }
            start = end + sep;
            self.scanned = start;
        }
        // A separator may have begun in the last bytes and end in the next chunk.
        self.scanned = (self.buf.len() - partial_separator(&self.buf)).max(start);
        if start > 0 {
            self.buf.drain(..start);
            self.scanned -= start;
        }
        // The pending event is at least `scanned` bytes long.
        if self.scanned > self.max_event {
            return Err(TooLong);
        }
        Ok(out)
    }

    /// Bytes held for the event not yet ended.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }
}

/// An event's `data:` lines joined by newlines; `None` when it has no `data:` field.
fn event_data(event: &[u8]) -> Option<String> {
    let mut data: Option<String> = None;
    for line in String::from_utf8_lossy(event).lines() {
        if let Some(d) = line.strip_prefix("data:") {
            let data = data.get_or_insert_with(String::new);
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    data
}

/// Index and length of the first blank-line separator (`\n\n` or `\r\n\r\n`) starting at or after
/// `from`.
fn find_event_end(buf: &[u8], from: usize) -> Option<(usize, usize)> {
    let mut i = from;
    while let Some(off) = buf.get(i..)?.iter().position(|&b| b == b'\n' || b == b'\r') {
        let at = i + off;
        let rest = &buf[at..];
        if rest.starts_with(b"\n\n") {
            return Some((at, 2));
        }
        if rest.starts_with(b"\r\n\r\n") {
            return Some((at, 4));
        }
        i = at + 1;
    }
    None
}

/// How many of the last bytes could begin a separator that the next bytes complete.
fn partial_separator(buf: &[u8]) -> usize {
    if buf.ends_with(b"\r\n\r") {
        3
    } else if buf.ends_with(b"\r\n") {
        2
    } else if buf.ends_with(b"\n") || buf.ends_with(b"\r") {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of `stream` pushed in one piece.
    fn whole(stream: &[u8], max: usize) -> Result<Vec<Value>, TooLong> {
        SseReader::new(max).push(stream)
    }

    #[test]
    fn framing() {
        // (stream, bound, events' `n`, or None for a refusal)
        let table: &[(&str, usize, Option<&[i64]>)] = &[
            ("data: {\"n\":1}\n\n", 64, Some(&[1])),
            ("data: {\"n\":1}\r\n\r\ndata: {\"n\":2}\n\n", 64, Some(&[1, 2])),
            // Multi-line data joins with a newline; comments and other fields are ignored.
            ("id: 7\n: note\ndata: {\"n\":\ndata: 3}\n\n", 64, Some(&[3])),
            ("data: not json\n\ndata: {\"n\":4}\n\n", 64, Some(&[4])),
            // No blank line yet: nothing.
            ("data: {\"n\":5}\n", 64, Some(&[])),
            ("data: {\"n\":5}\r\n\r", 64, Some(&[])),
            // Exactly the bound is kept; one byte more is refused, ended or not.
            ("data: {\"n\":6}\n\n", 13, Some(&[6])),
            ("data: {\"n\":6}\n\n", 12, None),
            ("data: {\"n\":66}", 13, None),
            // A partial separator does not count towards the bound.
            ("data: {\"n\":6}\r\n\r", 13, Some(&[])),
        ];
        for (stream, max, want) in table {
            let got = whole(stream.as_bytes(), *max)
                .map(|v| v.iter().map(|e| e["n"].as_i64().unwrap_or(-1)).collect::<Vec<_>>());
            match want {
                Some(ns) => assert_eq!(got.as_deref(), Ok(*ns), "{stream:?} at {max}"),
                None => assert_eq!(got, Err(TooLong), "{stream:?} at {max}"),
            }
        }
    }

    #[test]
    fn any_chunking_reads_the_same_events() {
        let stream =
            "data: {\"n\":1}\n\nid: 2\r\ndata: {\"n\":2}\r\n\r\n: c\n\ndata: {\"n\":3}\r\n\r\ndata: {\"n\":4}\n\n";
        let want = whole(stream.as_bytes(), 64).unwrap();
        assert_eq!(want.len(), 4);
        for size in 1..stream.len() {
            let mut r = SseReader::new(64);
            let mut got = Vec::new();
            for chunk in stream.as_bytes().chunks(size) {
                got.extend(r.push(chunk).unwrap());
                assert!(r.buffered() <= 64 + 3);
            }
            assert_eq!(got, want, "chunks of {size}");
            assert_eq!(r.buffered(), 0);
        }
    }

    /// A search resumes where the last one stopped (a partial separator excepted), so an event
    /// fed a byte at a time is scanned once, not once per chunk.
    #[test]
    fn a_search_resumes_where_it_stopped() {
        let mut r = SseReader::new(64);
        // (chunk, where the next search starts, bytes held)
        let steps: &[(&str, usize, usize)] = &[
            ("data: 1", 7, 7),
            ("2", 8, 8),
            ("\r", 8, 9),
            ("\n", 8, 10),
            ("\r", 8, 11),
            ("\n", 0, 0),
            ("data: 3\n", 7, 8),
            ("x", 9, 9),
            ("\n\nda", 2, 2),
        ];
        for (chunk, scanned, held) in steps {
            r.push(chunk.as_bytes()).unwrap();
            assert_eq!((r.scanned, r.buffered()), (*scanned, *held), "after {chunk:?}");
        }
    }
}
