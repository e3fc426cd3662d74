//! One fact of HTTP/1.1 framing the runtime's HTTP client does not implement: a response with
//! neither `Content-Length` nor `Transfer-Encoding` is delimited by the server closing the
//! connection (RFC 9112 §6.3, rule 8). The client reads such a body only from an HTTP/1.0
//! response, so the provider connection (`src/loopback.rs`) relabels the status line of exactly
//! those responses as HTTP/1.0, which changes nothing else about them.

/// Bytes of a response head read before giving up on finding its end (then it passes as is).
pub const HEAD_MAX: usize = 64 * 1024;

/// Where the head in `buf` ends (just past its blank line), once it has.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Relabels `head` (a whole response head) `HTTP/1.0` when its body is delimited by the close:
/// an `HTTP/1.1` status line whose status may carry a body (not 1xx, 204 or 304) and no
/// `Content-Length` or `Transfer-Encoding` header. Returns whether it did.
pub fn relabel_close_delimited(head: &mut [u8]) -> bool {
    let Some(rest) = head.strip_prefix(b"HTTP/1.1 ") else {
        return false;
    };
    let status = rest
        .get(..3)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok());
    let may_have_body = status.is_some_and(|s| s >= 200 && s != 204 && s != 304);
    let framed = head.split(|&b| b == b'\n').skip(1).any(|line| {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let name = name.trim_ascii();
        name.eq_ignore_ascii_case(b"content-length") || name.eq_ignore_ascii_case(b"transfer-encoding")
    });
    if !may_have_body || framed {
        return false;
    }
    head[5..8].copy_from_slice(b"1.0");
    true
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
