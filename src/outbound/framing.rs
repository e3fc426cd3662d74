//! The one framing adapter: what a foreign server sends over plain `http://`, made into replies
//! awc reads as HTTP/1.1 says they are.
//!
//! awc reads a body delimited by the server closing the connection (legal HTTP/1.1, and what
//! Python's `http.server` sends) only from an HTTP/1.0 reply, and it would keep such a
//! connection for a next request. [`Framed`] reads each reply head before awc does: a counted
//! reply passes as it is (the connection may be kept), any other is the connection's last.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::wire::http1;

/// A plain-`http://` connection to a foreign server, as awc reads it: the one framing adapter.
/// Each reply's head is read whole before the client sees it. A reply framed by its
/// `Content-Length` passes as it is and its body is counted, never read past, so the next
/// reply's head is read the same way. Any other reply is the connection's last: its head is
/// rewritten `connection: close` (`http1::close_after`) so the client lets the connection go,
/// and one delimited by the close is relabelled HTTP/1.0 as well, which is how awc reads such a
/// body (`http1::relabel_close_delimited`).
#[derive(Debug)]
pub struct Framed {
    stream: tokio::net::TcpStream,
    /// Bytes read and not handed over yet: a head being read, or what followed a counted body.
    head: Vec<u8>,
    /// A head (and what came with it) being handed over.
    pending: Option<(Vec<u8>, usize)>,
    mode: Mode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The next bytes are a reply head.
    Head,
    /// This many bytes of a counted body are still to come.
    Body(u64),
    /// The connection's last reply: everything passes.
    Through,
}

impl Framed {
    pub(super) fn new(stream: tokio::net::TcpStream) -> Framed {
        Framed {
            stream,
            head: Vec::new(),
            pending: None,
            mode: Mode::Head,
        }
    }

    /// Takes the whole head at the front of `self.head` (it ends at `end`) and decides how its
    /// body is followed.
    fn take_head(&mut self, end: usize) {
        let rest = self.head.split_off(end);
        let mut head = std::mem::take(&mut self.head);
        match http1::head(&head) {
            Ok(Some((h, _))) => match h.framing {
                // A reply that has no body whatever its length says (RFC 9112 §6.3).
                http1::Framing::Length(_) if h.status < 200 || h.status == 204 || h.status == 304 => {
                    self.mode = Mode::Head;
                    self.head = rest;
                    self.pending = Some((head, 0));
                }
                http1::Framing::Length(n) => {
                    let k = rest.len().min(usize::try_from(n).unwrap_or(usize::MAX));
                    head.extend_from_slice(&rest[..k]);
                    // Anything past the body is the next reply's: kept for its head.
                    self.head = rest[k..].to_vec();
                    let left = n - k as u64;
                    self.mode = if left == 0 { Mode::Head } else { Mode::Body(left) };
                    self.pending = Some((head, 0));
                }
                _ => {
                    http1::relabel_close_delimited(&mut head);
                    let mut out = http1::close_after(&head);
                    out.extend_from_slice(&rest);
                    self.mode = Mode::Through;
                    self.pending = Some((out, 0));
                }
            },
            // Not a head this can read: the client reads it and refuses it.
            _ => {
                head.extend_from_slice(&rest);
                self.mode = Mode::Through;
                self.pending = Some((head, 0));
            }
        }
    }
}

impl tokio::io::AsyncRead for Framed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if let Some((bytes, at)) = &mut me.pending {
                let n = (bytes.len() - *at).min(buf.remaining());
                buf.put_slice(&bytes[*at..*at + n]);
                *at += n;
                if *at == bytes.len() {
                    me.pending = None;
                }
                return Poll::Ready(Ok(()));
            }
            match me.mode {
                Mode::Through if me.head.is_empty() => return Pin::new(&mut me.stream).poll_read(cx, buf),
                Mode::Through => {
                    me.pending = Some((std::mem::take(&mut me.head), 0));
                }
                Mode::Body(left) => {
                    let mut chunk = [0u8; 8192];
                    let want = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(chunk.len())
                        .min(buf.remaining());
                    let mut read = tokio::io::ReadBuf::new(&mut chunk[..want]);
                    match Pin::new(&mut me.stream).poll_read(cx, &mut read) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) => {
                            let got = read.filled();
                            buf.put_slice(got);
                            if !got.is_empty() {
                                let left = left - got.len() as u64;
                                me.mode = if left == 0 { Mode::Head } else { Mode::Body(left) };
                            }
                            return Poll::Ready(Ok(()));
                        }
                    }
                }
                Mode::Head => {
                    if let Some(end) = http1::head_end(&me.head) {
                        me.take_head(end);
                        continue;
                    }
                    if me.head.len() > http1::MAX_HEAD {
                        me.mode = Mode::Through;
                        continue;
                    }
                    let mut chunk = [0u8; 8192];
                    let mut read = tokio::io::ReadBuf::new(&mut chunk);
                    match Pin::new(&mut me.stream).poll_read(cx, &mut read) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) if read.filled().is_empty() => {
                            // The end: what was read of a head is the client's to refuse.
                            if me.head.is_empty() {
                                return Poll::Ready(Ok(()));
                            }
                            me.mode = Mode::Through;
                        }
                        Poll::Ready(Ok(())) => me.head.extend_from_slice(read.filled()),
                    }
                }
            }
        }
    }
}

impl tokio::io::AsyncWrite for Framed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl actix_rt::net::ActixStream for Framed {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<actix_rt::net::Ready>> {
        let ready = self.pending.is_some()
            || (self.mode != Mode::Head && !self.head.is_empty())
            || (self.mode == Mode::Head && http1::head_end(&self.head).is_some());
        if ready {
            return Poll::Ready(Ok(actix_rt::net::Ready::READABLE));
        }
        actix_rt::net::ActixStream::poll_read_ready(&self.stream, cx)
    }

    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<actix_rt::net::Ready>> {
        actix_rt::net::ActixStream::poll_write_ready(&self.stream, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// What a client reads through a [`Framed`] when the server sends `sent` and closes.
    fn through_framed(sent: &'static [u8]) -> Vec<u8> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let server = tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let (mut s, _) = l.accept().await.unwrap();
                // In small pieces, so heads and bodies arrive split.
                for piece in sent.chunks(7) {
                    s.write_all(piece).await.unwrap();
                    s.flush().await.unwrap();
                }
            });
            let mut framed = Framed::new(tokio::net::TcpStream::connect(addr).await.unwrap());
            let mut got = Vec::new();
            framed.read_to_end(&mut got).await.unwrap();
            server.await.unwrap();
            got
        })
    }

    #[test]
    fn counted_replies_pass_and_any_other_closes_the_connection() {
        let rows: [(&'static [u8], &[u8]); 4] = [
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\ncde",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\ncde",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nconnection: close\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n",
                b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\nconnection: close\r\n\r\ndata: 1\n\n",
            ),
            (
                b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\nHTTP/1.1 200 OK\r\n\r\nx",
                b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\nHTTP/1.0 200 OK\r\nconnection: close\r\n\r\nx",
            ),
        ];
        for (sent, want) in rows {
            let got = through_framed(sent);
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
        }
    }
}
