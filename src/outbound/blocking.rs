//! The blocking half: dialling and reading for the clients that run on a thread of their own
//! (the OTLP exporter's batch thread, `mur send`), with the same rules as the awc clients'.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::wire::http1::{self, Dechunker, Framing};

/// Whom a plain connection must reach before anything is written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// This user's listener, when it is on loopback ([`super::owner::verify_owner`]).
    Owner,
    /// Anyone: TLS over the connection checks whom it reaches.
    Tls,
}

/// Connects to the first of `addrs` that answers within `connect` each, and checks it as
/// `check` says; `TCP_NODELAY` is set. `Err` is the last failure (`NotFound` when there was no
/// address to try).
pub fn dial(addrs: impl IntoIterator<Item = SocketAddr>, connect: Duration, check: Check) -> io::Result<TcpStream> {
    let mut last = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, connect) {
            Ok(stream) => {
                if check == Check::Owner {
                    super::owner::verify_owner(stream.local_addr()?, stream.peer_addr()?)?;
                }
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::new(io::ErrorKind::NotFound, "the name resolves to no address")))
}

/// `stream` under TLS to `host` ([`super::tls`], HTTP/1.1).
pub fn tls(host: &str, stream: TcpStream) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
    let name =
        rustls::pki_types::ServerName::try_from(host.to_string()).map_err(|e| format!("not a TLS server name: {e}"))?;
    let conn = rustls::ClientConnection::new(super::tls(super::Alpn::Http1)?, name).map_err(|e| format!("TLS: {e}"))?;
    Ok(rustls::StreamOwned::new(conn, stream))
}

/// A reply body as its head frames it, read from the bytes as they come.
#[derive(Debug)]
pub enum Body {
    Chunked(Dechunker),
    Length(u64),
    Close,
}

impl Body {
    pub fn new(f: Framing) -> Body {
        match f {
            Framing::Chunked => Body::Chunked(Dechunker::default()),
            Framing::Length(n) => Body::Length(n),
            Framing::Close => Body::Close,
        }
    }

    /// The body's bytes among `bytes` (nothing past a counted body's end).
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<u8>, http1::Malformed> {
        match self {
            Body::Chunked(d) => d.push(bytes),
            Body::Length(left) => {
                let n = usize::try_from(*left).unwrap_or(usize::MAX).min(bytes.len());
                *left -= n as u64;
                Ok(bytes[..n].to_vec())
            }
            Body::Close => Ok(bytes.to_vec()),
        }
    }

    pub fn done(&self) -> bool {
        match self {
            Body::Chunked(d) => d.done(),
            Body::Length(left) => *left == 0,
            Body::Close => false,
        }
    }
}

/// The status and body of a whole reply read into `bytes` (the server closed, or the read was
/// cut at its bound): the body as its head frames it, what arrived of it. `None` when the bytes
/// hold no whole head.
pub fn whole_reply(bytes: &[u8]) -> Option<(u16, Vec<u8>)> {
    let (head, at) = http1::head(bytes).ok()??;
    let mut body = Body::new(head.framing);
    let out = body.push(&bytes[at..]).unwrap_or_default();
    Some((head.status, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_as_their_heads_frame_them_or_refused() {
        type Case<'a> = (&'a [u8], Option<(u16, &'a [u8])>);
        let cases: [Case; 6] = [
            (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", Some((200, b"ok"))),
            (
                b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokjunk",
                Some((200, b"ok")),
            ),
            (
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                Some((200, b"ok")),
            ),
            (b"HTTP/1.0 503 Busy\r\n\r\n", Some((503, b""))),
            (b"SSH-2.0-OpenSSH\r\n\r\n", None),
            (b"HTTP/1.1 200 OK\r\n", None),
        ];
        for (bytes, want) in cases {
            let got = whole_reply(bytes);
            assert_eq!(
                got.as_ref().map(|(s, b)| (*s, b.as_slice())),
                want,
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }

    #[test]
    fn a_dial_reaches_this_users_listener_and_says_why_not_otherwise() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = dial([l.local_addr().unwrap()], Duration::from_secs(5), Check::Owner).unwrap();
        assert_eq!(s.peer_addr().unwrap(), l.local_addr().unwrap());
        let none: [SocketAddr; 0] = [];
        assert_eq!(
            dial(none, Duration::from_secs(1), Check::Owner).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
