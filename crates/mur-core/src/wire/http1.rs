//! An HTTP/1.1 reply as a client reads it off a socket, bytes in: the head (status and the
//! headers that frame the body) and the body, chunked or not. Pure and bounded: a head longer
//! than [`MAX_HEAD`] or a chunk-size line longer than [`MAX_CHUNK_LINE`] is refused rather than
//! buffered. `mur send` reads a door's event stream through it; the socket is the caller's.
//!
//! It also keeps one fact of HTTP/1.1 framing that awc does not implement: a reply with neither
//! `Content-Length` nor `Transfer-Encoding` is delimited by the server closing the connection
//! (RFC 9112 §6.3, rule 8). awc reads such a body only from an HTTP/1.0 reply, so the provider
//! connection (`src/outbound/framing.rs`) relabels exactly those heads as HTTP/1.0
//! ([`relabel_close_delimited`]), which changes nothing else about them.

/// Longest reply head kept while waiting for its blank line.
pub const MAX_HEAD: usize = 64 << 10;

/// Longest chunk-size or trailer line (a size in hex, maybe extensions).
pub const MAX_CHUNK_LINE: usize = 1024;

/// A reply head: its status and how its body is framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    pub framing: Framing,
}

/// How a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Close,
}

/// What does not read as an HTTP/1.1 reply; the text says what, for the caller's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

/// Splits a reply's head off `buf`: `Ok(None)` while its blank line has not arrived, else the
/// head and the index where the body starts.
pub fn head(buf: &[u8]) -> Result<Option<(Head, usize)>, Malformed> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        // Refused only once no blank line can start within the bound: a head of exactly
        // MAX_HEAD bytes may still be missing its last three, however its bytes arrive.
        if buf.len() > MAX_HEAD + 3 {
            return Err(Malformed("its head is longer than 64 KiB"));
        }
        return Ok(None);
    };
    if end > MAX_HEAD {
        return Err(Malformed("its head is longer than 64 KiB"));
    }
    let text = std::str::from_utf8(&buf[..end]).map_err(|_| Malformed("its head is not text"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    if !parts.next().is_some_and(|v| v.starts_with("HTTP/1.")) {
        return Err(Malformed("it does not start with an HTTP/1.x status line"));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|s| (100..1000).contains(s))
        .ok_or(Malformed("its status line has no status code"))?;
    let mut content_type = None;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(Malformed("a header line has no ':'"));
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = Some(value.to_string()),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().split(',').any(|c| c.trim() == "chunked"),
            "content-length" => {
                length = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| Malformed("its content-length is not a number"))?,
                )
            }
            _ => {}
        }
    }
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(n)) => Framing::Length(n),
        (false, None) => Framing::Close,
    };
    Ok(Some((
        Head {
            status,
            content_type,
            framing,
        },
        end + 4,
    )))
}

/// Undoes `Transfer-Encoding: chunked`, however the bytes arrive split.
#[derive(Debug, Default)]
pub struct Dechunker {
    state: State,
    /// A size or trailer line not ended yet.
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line.
    #[default]
    Size,
    /// This many data bytes of the chunk are still to come.
    Data(u64),
    /// The CRLF after a chunk's data: how many of its bytes are still to come.
    DataEnd(u8),
    /// Reading trailer lines after the last chunk.
    Trailer,
    Done,
}

impl Dechunker {
    /// Adds bytes; returns the body bytes they carried. Bytes after the body's end are ignored.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<u8>, Malformed> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            match self.state {
                State::Done => break,
                State::Data(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    out.extend_from_slice(&bytes[..n]);
                    bytes = &bytes[n..];
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::DataEnd(2)
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd(k) => {
                    let want: &[u8] = if k == 2 { b"\r\n" } else { b"\n" };
                    if bytes[0] != want[0] {
                        return Err(Malformed("a chunk does not end with CRLF"));
                    }
                    bytes = &bytes[1..];
                    self.state = if k == 2 { State::DataEnd(1) } else { State::Size };
                }
                State::Size | State::Trailer => {
                    let Some(nl) = bytes.iter().position(|&b| b == b'\n') else {
                        self.line.extend_from_slice(bytes);
                        if self.line.len() > MAX_CHUNK_LINE {
                            return Err(Malformed("a chunk-size line is longer than 1 KiB"));
                        }
                        break;
                    };
                    self.line.extend_from_slice(&bytes[..nl]);
                    bytes = &bytes[nl + 1..];
                    if self.line.len() > MAX_CHUNK_LINE {
                        return Err(Malformed("a chunk-size line is longer than 1 KiB"));
                    }
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    self.state = if self.state == State::Trailer {
                        if line.is_empty() { State::Done } else { State::Trailer }
                    } else {
                        match chunk_size(line)? {
                            0 => State::Trailer,
                            n => State::Data(n),
                        }
                    };
                }
            }
        }
        Ok(out)
    }

    /// The last chunk and the trailer arrived.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }
}

/// The size of a chunk-size line (`1a`, `1a;ext=1`).
fn chunk_size(line: &[u8]) -> Result<u64, Malformed> {
    let hex = line.split(|&b| b == b';').next().unwrap_or_default();
    let hex = std::str::from_utf8(hex)
        .map_err(|_| Malformed("a chunk size is not text"))?
        .trim();
    // Hex digits only: `from_str_radix` would also take a leading '+'.
    if hex.is_empty() || hex.len() > 15 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Malformed("a chunk size is not a hex number"));
    }
    u64::from_str_radix(hex, 16).map_err(|_| Malformed("a chunk size is not a hex number"))
}

/// Where the head in `buf` ends (just past its blank line), once it has.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Relabels `head` (a whole reply head) `HTTP/1.0` when its body is delimited by the close: an
/// `HTTP/1.1` status line whose status may carry a body (not 1xx, 204 or 304) and no
/// `Content-Length` or `Transfer-Encoding` header. Returns whether it did; a head that does not
/// read is left as it is.
pub fn relabel_close_delimited(head_bytes: &mut [u8]) -> bool {
    if !head_bytes.starts_with(b"HTTP/1.1 ") {
        return false;
    }
    let Ok(Some((h, _))) = head(head_bytes) else {
        return false;
    };
    let may_have_body = h.status >= 200 && h.status != 204 && h.status != 304;
    if !may_have_body || h.framing != Framing::Close {
        return false;
    }
    head_bytes[5..8].copy_from_slice(b"1.0");
    true
}

/// Rewrites a whole reply head (through its blank line) so the client does not keep its
/// connection: every `Connection` and `Keep-Alive` header dropped, `connection: close` added. A
/// connection kept across requests is followed only through replies whose end its reader can
/// count (`Content-Length`); after any other the client must let it go, or the next reply's head
/// would pass unread (`src/remote/client.rs`). A head that does not end with its blank line is
/// returned as it is.
pub fn close_after(head_bytes: &[u8]) -> Vec<u8> {
    let Some(body) = head_bytes.strip_suffix(b"\r\n\r\n") else {
        return head_bytes.to_vec();
    };
    let mut out = Vec::with_capacity(head_bytes.len() + 20);
    for (i, line) in body.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let name = name.trim_ascii();
        if i > 0 && (name.eq_ignore_ascii_case(b"connection") || name.eq_ignore_ascii_case(b"keep-alive")) {
            continue;
        }
        out.extend_from_slice(line);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"connection: close\r\n\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_is_rewritten_to_close_its_connection() {
        let table: &[(&str, &str)] = &[
            (
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nconnection: close\r\n\r\n",
            ),
            (
                "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\r\n",
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nconnection: close\r\n\r\n",
            ),
            (
                "HTTP/1.1 200 OK\r\nCONNECTION: Keep-Alive\r\nx-connection-id: 7\r\n\r\n",
                "HTTP/1.1 200 OK\r\nx-connection-id: 7\r\nconnection: close\r\n\r\n",
            ),
            (
                "HTTP/1.1 200 OK\r\n\r\n",
                "HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n",
            ),
            ("HTTP/1.1 200 OK\r\nno blank line", "HTTP/1.1 200 OK\r\nno blank line"),
        ];
        for (head_in, want) in table {
            let got = close_after(head_in.as_bytes());
            assert_eq!(String::from_utf8_lossy(&got), *want, "{head_in:?}");
            if got.ends_with(b"\r\n\r\n") {
                assert!(head(&got).is_ok_and(|h| h.is_some()), "{want:?} reads as a head");
            }
        }
    }

    #[test]
    fn only_a_head_without_framing_is_relabelled() {
        let sse = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\r\n";
        let table: &[(&str, bool)] = &[
            (sse, true),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\ncontent-length:5\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false),
            ("HTTP/1.1 500 Internal Server Error\r\nServer: x\r\n\r\n", true),
            ("HTTP/1.1 204 No Content\r\n\r\n", false),
            ("HTTP/1.1 304 Not Modified\r\n\r\n", false),
            ("HTTP/1.1 100 Continue\r\n\r\n", false),
            ("HTTP/1.0 200 OK\r\n\r\n", false),
            ("HTTP/2 200\r\n\r\n", false),
            ("HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", false),
            ("HTTP/1.1 2", false),
            ("", false),
        ];
        for (head, want) in table {
            let mut bytes = head.as_bytes().to_vec();
            assert_eq!(relabel_close_delimited(&mut bytes), *want, "{head:?}");
            let expect = if *want {
                head.replacen("HTTP/1.1", "HTTP/1.0", 1)
            } else {
                head.to_string()
            };
            assert_eq!(String::from_utf8(bytes).unwrap(), expect);
        }
        assert_eq!(head_end(sse.as_bytes()), Some(sse.len()));
        assert_eq!(head_end(b"HTTP/1.1 200 OK\r\n"), None);
    }

    #[test]
    fn heads_and_their_framing() {
        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\nrest";
        let (h, at) = head(reply).unwrap().unwrap();
        assert_eq!(
            h,
            Head {
                status: 200,
                content_type: Some("text/event-stream".into()),
                framing: Framing::Chunked
            }
        );
        assert_eq!(&reply[at..], b"rest");
        let (h, _) = head(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 12\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((h.status, h.framing), (401, Framing::Length(12)));
        let (h, _) = head(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.framing, Framing::Close);
        assert_eq!(head(b"HTTP/1.1 200 OK\r\ncontent-").unwrap(), None);
        for bad in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n",
        ] {
            assert!(head(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(head(&vec![b'a'; MAX_HEAD + 4]).is_err(), "an endless head is refused");
        // A head ending right at the bound reads the same whether its bytes arrive at once or
        // its blank line is still on the way.
        let mut at_bound = b"HTTP/1.1 200 OK\r\nx-pad: ".to_vec();
        at_bound.resize(MAX_HEAD, b'a');
        at_bound.extend_from_slice(b"\r\n\r\n");
        assert!(head(&at_bound).is_ok_and(|h| h.is_some()));
        for missing in 1..4 {
            let arriving = &at_bound[..at_bound.len() - missing];
            assert_eq!(head(arriving), Ok(None), "{missing} bytes to come");
        }
    }

    #[test]
    fn chunked_bodies_in_every_split() {
        let wire = b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\ntrailer: x\r\n\r\nignored";
        for split in 0..wire.len() {
            for step in [1, 2, 3, 7] {
                let mut d = Dechunker::default();
                let mut out = d.push(&wire[..split]).unwrap();
                for piece in wire[split..].chunks(step) {
                    out.extend(d.push(piece).unwrap());
                }
                assert_eq!(out, b"hello, world", "split {split} step {step}");
                assert!(d.done());
            }
        }
        let mut d = Dechunker::default();
        assert_eq!(d.push(b"3\r\nab").unwrap(), b"ab");
        assert!(!d.done());
        for bad in [&b"zz\r\n"[..], b"3\r\nabcX", b"\r\n", b"+3\r\nabc\r\n"] {
            assert!(
                Dechunker::default().push(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        assert!(
            Dechunker::default().push(&vec![b'1'; MAX_CHUNK_LINE + 1]).is_err(),
            "an endless size line is refused"
        );
    }
}
