//! Fuzzes the reading of an HTTP/1.1 reply as it comes off a socket (`wire::http1`): the head, as
//! `mur send` reads a door's reply and the remote member's connection a remote agent's; the
//! chunked body `mur send` reads; and the two rewrites of a head the remote member's connection
//! makes before its HTTP client reads it (`relabel_close_delimited`, `close_after`).
//!
//! Input: the first byte sets the size of the pieces the bytes arrive in (1..=64) and of the
//! chunks the round trip sends (1..=64); the second, when its top bit is set, puts a filler header
//! in front of the rest so that the head ends within a few bytes of `MAX_HEAD` (its low three bits
//! say where); the rest is the reply. Properties:
//! - no panic;
//! - the head read again after each piece, as the callers do, is never refused nor read
//!   differently on the way: the first answer is the whole bytes' answer, and its body starts at
//!   `head_end`;
//! - a chunked body read in pieces gives the bytes and the end of a plain reading of the whole
//!   body (RFC 9112 §7.1), and is refused exactly when that reading breaks off;
//! - any bytes sent chunked, with an extension and a trailer, read back to themselves in any
//!   pieces, and what follows the body is left alone;
//! - `relabel_close_delimited` changes only the version of a head that reads the same after it,
//!   once; `close_after` leaves `connection: close` the only connection header, changes nothing
//!   when applied again, and keeps what a head with CRLF line ends says (status, type, framing).

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::wire::http1::{self, Dechunker, Framing, MAX_CHUNK_LINE, MAX_HEAD};

fuzz_target!(|data: &[u8]| {
    let [piece, pad, rest @ ..] = data else {
        return;
    };
    let piece = usize::from(piece % 64) + 1;
    let padded;
    let (reply, piece, near) = if pad & 0x80 == 0 {
        (rest, piece, None)
    } else {
        padded = near_the_bound(rest, usize::from(pad & 0x07));
        // Pieces of up to 64 KiB keep the reads of a 64 KiB head few.
        (&padded[..], piece << 10, Some(MAX_HEAD))
    };

    let whole = http1::head(reply);
    let mut seen = None;
    for at in arrivals(reply.len(), piece, near) {
        match http1::head(&reply[..at]) {
            Ok(None) => {}
            first => {
                assert_eq!(first, whole, "{at} of {} bytes", reply.len());
                seen = Some(at);
                break;
            }
        }
    }
    if seen.is_none() {
        assert_eq!(whole, Ok(None), "answered only once whole");
    }
    let Ok(Some((h, body_at))) = whole else {
        return;
    };
    assert_eq!(http1::head_end(reply), Some(body_at));
    let head_bytes = &reply[..body_at];

    if h.framing == Framing::Chunked {
        chunked_body(&reply[body_at..], piece.min(64));
    }
    round_trip(&reply[body_at..], piece.min(64));
    relabelled(head_bytes, &h);
    closed(head_bytes, &h);
});

/// The prefix lengths a reader sees: each piece's end, and when `near` is set every length
/// within 8 bytes of it (where a head at the bound is still arriving).
fn arrivals(len: usize, piece: usize, near: Option<usize>) -> Vec<usize> {
    let mut at: Vec<usize> = (1..=len.div_ceil(piece)).map(|i| (i * piece).min(len)).collect();
    if let Some(n) = near {
        at.extend((n.saturating_sub(8)..=n + 8).filter(|&k| k <= len));
    }
    at.sort_unstable();
    at.dedup();
    at
}

/// A status line and a filler header, then `rest`, such that the first blank line of `rest`
/// (or its end) falls `back` bytes short of `MAX_HEAD + 3`.
fn near_the_bound(rest: &[u8], back: usize) -> Vec<u8> {
    let start = b"HTTP/1.1 200 OK\r\nx-pad: ";
    let blank = rest.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(rest.len());
    let target = MAX_HEAD + 3 - back;
    let fill = target.saturating_sub(start.len() + 2 + blank);
    let mut out = Vec::with_capacity(target + rest.len());
    out.extend_from_slice(start);
    out.resize(start.len() + fill, b'a');
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(rest);
    out
}

fn chunked_body(body: &[u8], piece: usize) {
    let want = plain_dechunk(body);
    let mut d = Dechunker::default();
    let mut got = Vec::new();
    let mut refused = false;
    for p in body.chunks(piece) {
        match d.push(p) {
            Ok(bytes) => got.extend(bytes),
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    match want {
        Ok((bytes, done)) => {
            assert!(!refused, "refused a body that reads");
            assert_eq!(got, bytes);
            assert_eq!(d.done(), done);
        }
        Err(()) => assert!(refused, "read a body whose framing breaks"),
    }
    let mut whole = Dechunker::default();
    assert_eq!(whole.push(body).is_err(), refused);
}

/// RFC 9112 §7.1 read plainly over the whole body: its bytes so far and whether the last chunk
/// and the trailer arrived; `Err` where the framing breaks (a size that is not 1 to 15 hex
/// digits, white space around it aside; data not followed by CRLF; a line longer than
/// `MAX_CHUNK_LINE`).
fn plain_dechunk(mut rest: &[u8]) -> Result<(Vec<u8>, bool), ()> {
    let mut out = Vec::new();
    let mut in_trailer = false;
    loop {
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            return if rest.len() > MAX_CHUNK_LINE {
                Err(())
            } else {
                Ok((out, false))
            };
        };
        if nl > MAX_CHUNK_LINE {
            return Err(());
        }
        let line = &rest[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        rest = &rest[nl + 1..];
        if in_trailer {
            if line.is_empty() {
                return Ok((out, true));
            }
            continue;
        }
        let size = line.split(|&b| b == b';').next().unwrap_or_default();
        let size = std::str::from_utf8(size).map_err(|_| ())?.trim();
        if size.is_empty() || size.len() > 15 || !size.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(());
        }
        let size = u64::from_str_radix(size, 16).map_err(|_| ())?;
        if size == 0 {
            in_trailer = true;
            continue;
        }
        let take = usize::try_from(size).unwrap_or(usize::MAX).min(rest.len());
        out.extend_from_slice(&rest[..take]);
        rest = &rest[take..];
        if (take as u64) < size {
            return Ok((out, false));
        }
        match rest {
            [] | [b'\r'] => return Ok((out, false)),
            [b'\r', b'\n', after @ ..] => rest = after,
            _ => return Err(()),
        }
    }
}

/// `payload` sent chunked in `size`-byte chunks, the first with an extension, then a trailer and
/// bytes of the next reply, reads back to `payload` in any pieces.
fn round_trip(payload: &[u8], size: usize) {
    let mut wire = Vec::new();
    for (i, chunk) in payload.chunks(size).enumerate() {
        let ext = if i == 0 { ";name=\"v\"" } else { "" };
        wire.extend_from_slice(format!("{:x}{ext}\r\n", chunk.len()).as_bytes());
        wire.extend_from_slice(chunk);
        wire.extend_from_slice(b"\r\n");
    }
    wire.extend_from_slice(b"0\r\nx-trailer: 1\r\n\r\nHTTP/1.1 200 OK\r\n");
    for step in [1, 7, size, wire.len()] {
        let mut d = Dechunker::default();
        let mut got = Vec::new();
        for p in wire.chunks(step) {
            got.extend(d.push(p).expect("a body this side sent chunked"));
        }
        assert_eq!(got, payload, "in {step}-byte pieces");
        assert!(d.done());
    }
}

fn relabelled(head_bytes: &[u8], h: &http1::Head) {
    let mut bytes = head_bytes.to_vec();
    if !http1::relabel_close_delimited(&mut bytes) {
        assert_eq!(bytes, head_bytes, "left as it is");
        return;
    }
    assert_eq!(h.framing, Framing::Close);
    assert!(bytes.starts_with(b"HTTP/1.0 "));
    assert_eq!(bytes[8..], head_bytes[8..]);
    let (again, at) = http1::head(&bytes).unwrap().unwrap();
    assert_eq!((&again, at), (h, head_bytes.len()));
    assert!(!http1::relabel_close_delimited(&mut bytes.clone()), "relabelled once");
}

fn closed(head_bytes: &[u8], h: &http1::Head) {
    let out = http1::close_after(head_bytes);
    assert!(out.ends_with(b"\r\nconnection: close\r\n\r\n"));
    assert_eq!(http1::close_after(&out), out, "a second rewrite changes nothing");
    let body = &out[..out.len() - 2];
    let lines: Vec<&[u8]> = body.split(|&b| b == b'\n').skip(1).collect();
    let connection = lines
        .iter()
        .filter(|l| {
            let name = l.split(|&b| b == b':').next().unwrap_or_default().trim_ascii();
            name.eq_ignore_ascii_case(b"connection") || name.eq_ignore_ascii_case(b"keep-alive")
        })
        .count();
    assert_eq!(connection, 1, "{:?}", String::from_utf8_lossy(&out));
    let crlf_only = head_bytes
        .iter()
        .enumerate()
        .all(|(i, &b)| b != b'\n' || (i > 0 && head_bytes[i - 1] == b'\r'));
    // Within the bound still (the added header may pass it, which only `head` minds).
    if crlf_only && out.len() - 4 <= MAX_HEAD {
        let (again, at) = http1::head(&out).unwrap().unwrap();
        assert_eq!((&again, at), (h, out.len()));
    }
}
