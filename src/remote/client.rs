//! The HTTP side of a remote capsule: one awc client for the remote agent's origin, TLS for
//! `https://` and an owner-checked loopback connection for plain `http://` (which only a
//! loopback URL may use, `manifest::endpoint`). Redirects are off: one could carry the
//! credential to another origin. awc futures are not `Send`: a [`Client`] lives on the thread
//! that made it (the executor's arbiter, or start-up's own actix system).
//!
//! Connections are kept for the next request (for [`KEEP_ALIVE`]), as a direct client keeps its
//! own: a new connection per forwarded request costs the remote agent its accept and set-up each
//! time (about a millisecond for the Python SDK's server; a TLS handshake over a network). A
//! loopback connection is a [`Kept`], which reads every reply head before the client does.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::web::Bytes;
use awc::http::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use futures_util::StreamExt;

use crate::wire::http1;
use crate::wire::sse::SseReader;

/// How long an idle connection is kept: under the 5 s after which uvicorn and Node close idle
/// keep-alive connections, so a request rarely meets one the server is closing.
pub const KEEP_ALIVE: Duration = Duration::from_secs(4);

/// One response's head: status, `retry-after`, and whether its body is an event stream.
pub struct Head {
    pub status: u16,
    pub retry_after: Option<String>,
    pub stream: bool,
    body: awc::ClientResponse,
}

/// A connection failure, or a body past its bound, or silence past the deadline.
pub type Fault = String;

pub struct Client {
    http: awc::Client,
    /// Where a `localhost` URL is dialled: 127.0.0.1, never a resolved name.
    address: Option<SocketAddr>,
}

impl Client {
    /// A client for requests to `url`'s origin; `connect` bounds opening a connection.
    pub fn new(url: &str, connect: Duration) -> Result<Client, String> {
        let builder = awc::Client::builder().disable_redirects().disable_timeout();
        let address = crate::manifest::endpoint::localhost_socket(url);
        let http = if url.starts_with("https://") {
            let connector = awc::Connector::new()
                .timeout(connect)
                .handshake_timeout(connect)
                .conn_keep_alive(KEEP_ALIVE)
                .rustls_0_23(crate::model::client::tls_config()?);
            builder.connector(connector).finish()
        } else if crate::manifest::endpoint::plain_http_allowed(url) {
            builder.connector(loopback_connector(address, connect)).finish()
        } else {
            return Err("its URL must be https://, or plain http:// to loopback".to_string());
        };
        Ok(Client { http, address })
    }

    fn at(&self, req: awc::ClientRequest) -> awc::ClientRequest {
        match self.address {
            Some(a) => req.address(a),
            None => req,
        }
    }

    /// GET `url` (the agent card: never with the credential), its body within `max` bytes, all
    /// within `within`.
    pub async fn get(&self, url: &str, max: usize, within: Duration) -> Result<(u16, Bytes), Fault> {
        let read = async {
            let mut resp = self
                .at(self.http.get(url))
                .insert_header((ACCEPT, "application/json"))
                .send()
                .await
                .map_err(|e| format!("the request failed: {e}"))?;
            let status = resp.status().as_u16();
            let body = resp.body().limit(max).await.map_err(|e| match e {
                awc::error::PayloadError::Overflow => format!("its body is longer than {max} bytes"),
                e => format!("reading its body failed: {e}"),
            })?;
            Ok((status, body))
        };
        match tokio::time::timeout(within, read).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {} ms", within.as_millis())),
        }
    }

    /// POSTs a JSON-RPC `body` to `url` with `headers` (the credential, marked sensitive, and
    /// `traceparent`), and returns the response's head once it arrives, within `within`.
    pub async fn post(
        &self,
        url: &str,
        body: String,
        stream: bool,
        headers: &[(HeaderName, HeaderValue)],
        within: Duration,
    ) -> Result<Head, Fault> {
        let mut req = self
            .at(self.http.post(url))
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header(("a2a-version", "1.0"))
            .insert_header((
                ACCEPT,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            ));
        for (k, v) in headers {
            req = req.insert_header((k.clone(), v.clone()));
        }
        let resp = match tokio::time::timeout(within, req.send_body(body)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(format!("the request failed: {e}")),
            Err(_) => return Err(format!("no answer within {} ms", within.as_millis())),
        };
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(|s| crate::text::head(s, 64).to_string())
        };
        let is_stream = header("content-type").is_some_and(|t| t.trim_start().starts_with("text/event-stream"));
        Ok(Head {
            status: resp.status().as_u16(),
            retry_after: header("retry-after"),
            stream: is_stream,
            body: resp,
        })
    }
}

impl Head {
    /// The whole body, within `max` bytes and `within`.
    pub async fn body(mut self, max: usize, within: Duration) -> Result<Bytes, Fault> {
        match tokio::time::timeout(within, self.body.body().limit(max)).await {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(awc::error::PayloadError::Overflow)) => {
                Err(format!("the remote agent's reply is longer than {max} bytes"))
            }
            Ok(Err(e)) => Err(format!("reading the remote agent's reply failed: {e}")),
            Err(_) => Err(format!(
                "the remote agent's reply did not arrive within {} ms",
                within.as_millis()
            )),
        }
    }

    /// The event stream's reader: its next events, each bounded by `max_event` bytes.
    pub fn events(self, max_event: usize) -> Events {
        Events {
            body: self.body,
            sse: SseReader::new(max_event),
        }
    }
}

/// An open event stream from the remote agent.
pub struct Events {
    body: awc::ClientResponse,
    sse: SseReader,
}

impl Events {
    /// The events of the next chunk (perhaps none); `Ok(None)` at the stream's end.
    pub async fn next(&mut self) -> Result<Option<Vec<serde_json::Value>>, Fault> {
        match self.body.next().await {
            None => Ok(None),
            Some(Err(e)) => Err(format!("the remote agent's stream broke: {e}")),
            Some(Ok(bytes)) => {
                let data = self
                    .sse
                    .push_data(&bytes)
                    .map_err(|_| "the remote agent sent a stream event past its bound".to_string())?;
                // A garbage event is the end of trust in the stream, not a thing to skip.
                data.iter()
                    .map(|d| {
                        serde_json::from_str(d)
                            .map_err(|_| "the remote agent sent a stream event that is not JSON".to_string())
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
        }
    }
}

/// The connector for a plain-`http://` loopback agent: it dials `addr` (a `localhost` is never
/// resolved) or the request's own address, hands the connection over only once
/// `loopback::verify_owner` passed (the credential goes to a listener of this user only), and
/// wraps it in a [`Kept`].
fn loopback_connector(
    addr: Option<SocketAddr>,
    connect: Duration,
) -> awc::Connector<
    impl actix_service::Service<
        actix_tls::connect::ConnectInfo<awc::http::Uri>,
        Response = actix_tls::connect::Connection<awc::http::Uri, Kept>,
        Error = actix_tls::connect::ConnectError,
    > + Clone,
> {
    use actix_tls::connect::{ConnectInfo, Connection};
    let service = actix_service::fn_service(move |info: ConnectInfo<awc::http::Uri>| async move {
        let stream = crate::loopback::dial_owned(addr, info.request(), connect).await?;
        Ok(Connection::new(info.request().clone(), Kept::new(stream)))
    });
    awc::Connector::new()
        .connector(service)
        .timeout(connect)
        .conn_keep_alive(KEEP_ALIVE)
}

/// A loopback connection to the remote agent that the client may keep for its next request.
/// Each reply's head is read whole before the client sees it. A reply framed by its
/// `Content-Length` passes as it is and its body is counted, never read past, so the next
/// reply's head is read the same way. Any other reply is the connection's last: its head is
/// rewritten `connection: close` (`http1::close_after`) so the client lets the connection go,
/// and one delimited by the close is relabelled HTTP/1.0 as well, which is how awc reads such a
/// body (`http1::relabel_close_delimited`, as `loopback::ReadToClose` does).
#[derive(Debug)]
pub struct Kept {
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

impl Kept {
    fn new(stream: tokio::net::TcpStream) -> Kept {
        Kept {
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

impl tokio::io::AsyncRead for Kept {
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

impl tokio::io::AsyncWrite for Kept {
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

impl actix_rt::net::ActixStream for Kept {
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

    /// What a client reads through a [`Kept`] when the server sends `sent` and closes.
    fn through_kept(sent: &'static [u8]) -> Vec<u8> {
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
            let mut kept = Kept::new(tokio::net::TcpStream::connect(addr).await.unwrap());
            let mut got = Vec::new();
            kept.read_to_end(&mut got).await.unwrap();
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
            let got = through_kept(sent);
            assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
        }
    }
}
