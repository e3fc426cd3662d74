//! Who listens on a loopback port, checked before a key is sent to it.
//!
//! A model endpoint or a collector over plain `http://` is on loopback (E-MAN-001), and a
//! loopback port is anyone's to bind once its owner let go of it. So a client that is about to
//! send a key over such a connection first reads who owns the server's side of it
//! (the kernel's socket lookup, or `/proc/net/tcp*` when that cannot answer) and refuses a server of another user.
//! Invariant: **no key goes over a loopback TCP connection whose server is not this user's.**
//!
//! The same connector reads a reply delimited by the server closing the connection (legal
//! HTTP/1.1, and what Python's `http.server` sends) to its end: awc reads such a body only from
//! an HTTP/1.0 response, so [`ReadToClose`] relabels exactly those heads
//! (`wire::http1::relabel_close_delimited`). Each request on these connections asks for
//! `Connection: close`, so a connection carries one response and the first head is the only one.

use std::io;
use std::net::SocketAddr;

use crate::procinfo;

/// Refuses a connection from `local` to loopback `peer` whose server is not this user's (or
/// whose owner cannot be read). Connections to other hosts are not this check's to judge.
pub fn verify_owner(local: SocketAddr, peer: SocketAddr) -> io::Result<()> {
    if !peer.ip().is_loopback() {
        return Ok(());
    }
    let me = nix::unistd::geteuid().as_raw();
    let table = if peer.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    // The kernel's socket lookup answers for the one socket (tens of µs); the table lists every
    // socket of the host and costs 2–8 ms to read (docs/performance.md §7), so it is read only
    // when the lookup cannot answer: no netlink, or a server side not yet accepted.
    let owner = match sock_diag_owner(peer, local) {
        Some(procinfo::SockDiag::Owner(uid)) => Some(uid),
        _ => std::fs::read_to_string(table)
            .ok()
            .and_then(|t| procinfo::socket_owner(&t, peer, local)),
    };
    match owner {
        Some(uid) if uid == me => Ok(()),
        Some(uid) => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{peer} is served by user {uid}, not by this user; nothing was sent to it"),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("who serves {peer} cannot be read from {table}; nothing was sent to it"),
        )),
    }
}

/// Asks the kernel (`NETLINK_SOCK_DIAG`) who owns the socket at `server` connected to `client`.
/// `None` when netlink cannot be used here; the caller then reads `/proc`.
fn sock_diag_owner(server: SocketAddr, client: SocketAddr) -> Option<procinfo::SockDiag> {
    use nix::sys::socket::{self, AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType};
    use std::os::fd::AsRawFd;
    let fd = socket::socket(
        AddressFamily::Netlink,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )
    .ok()?;
    // The kernel answers an exact lookup at once; the bound only keeps a broken netlink from
    // hanging a connect.
    let bound = nix::sys::time::TimeVal::new(0, 200_000);
    socket::setsockopt(&fd, socket::sockopt::ReceiveTimeout, &bound).ok()?;
    let seq = 1;
    let request = procinfo::sock_diag_request(server, client, seq);
    socket::sendto(fd.as_raw_fd(), &request, &NetlinkAddr::new(0, 0), MsgFlags::empty()).ok()?;
    let mut reply = [0u8; 512];
    let n = socket::recv(fd.as_raw_fd(), &mut reply, MsgFlags::empty()).ok()?;
    Some(procinfo::sock_diag_owner(&reply[..n], server, client, seq))
}

/// [`verify_owner`] for a connected stream.
pub fn verify_stream(stream: &std::net::TcpStream) -> io::Result<()> {
    verify_owner(stream.local_addr()?, stream.peer_addr()?)
}

/// An awc connector for a plain-`http://` loopback endpoint: it dials `addr` (the endpoint's
/// socket; a `localhost` is never resolved) or the request's own host when that is an address,
/// and hands the connection over only once [`verify_owner`] passed.
pub fn awc_connector(
    addr: Option<SocketAddr>,
    connect: std::time::Duration,
) -> awc::Connector<
    impl actix_service::Service<
        actix_tls::connect::ConnectInfo<awc::http::Uri>,
        Response = actix_tls::connect::Connection<awc::http::Uri, ReadToClose>,
        Error = actix_tls::connect::ConnectError,
    > + Clone,
> {
    use actix_tls::connect::{ConnectInfo, Connection};
    let service = actix_service::fn_service(move |info: ConnectInfo<awc::http::Uri>| async move {
        let stream = dial_owned(addr, info.request(), connect).await?;
        Ok(Connection::new(info.request().clone(), ReadToClose::new(stream)))
    });
    awc::Connector::new().connector(service).timeout(connect)
}

/// What an awc connector of a loopback endpoint dials: `addr`, or the request's own host when
/// that is an address, within `connect`. The stream comes back only once [`verify_owner`] passed,
/// with `TCP_NODELAY` set (a request's head and body are separate writes).
pub async fn dial_owned(
    addr: Option<SocketAddr>,
    uri: &awc::http::Uri,
    connect: std::time::Duration,
) -> Result<tokio::net::TcpStream, actix_tls::connect::ConnectError> {
    use actix_tls::connect::ConnectError;
    let target = match addr {
        Some(a) => a,
        None => {
            let host = uri
                .host()
                .unwrap_or_default()
                .trim_start_matches('[')
                .trim_end_matches(']');
            let ip: std::net::IpAddr = host.parse().map_err(|_| ConnectError::Unresolved)?;
            SocketAddr::new(ip, uri.port_u16().unwrap_or(80))
        }
    };
    let stream = match tokio::time::timeout(connect, tokio::net::TcpStream::connect(target)).await {
        Ok(r) => r.map_err(ConnectError::Io)?,
        Err(_) => return Err(ConnectError::Io(io::Error::from(io::ErrorKind::TimedOut))),
    };
    verify_owner(stream.local_addr().map_err(ConnectError::Io)?, target).map_err(ConnectError::Io)?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A provider connection whose first response head, when its body is delimited by the close,
/// is relabelled HTTP/1.0 before the client parses it (see the module's note).
#[derive(Debug)]
pub struct ReadToClose {
    stream: tokio::net::TcpStream,
    /// The head read so far, until it is whole (or past `MAX_HEAD`).
    head: Vec<u8>,
    /// What is left of the head to hand over; `None` once it has all been.
    pending: Option<(Vec<u8>, usize)>,
    passing: bool,
}

impl ReadToClose {
    fn new(stream: tokio::net::TcpStream) -> ReadToClose {
        ReadToClose {
            stream,
            head: Vec::new(),
            pending: None,
            passing: false,
        }
    }
}

impl tokio::io::AsyncRead for ReadToClose {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        use crate::wire::http1;
        use std::task::Poll;
        let me = self.get_mut();
        loop {
            if me.passing {
                return std::pin::Pin::new(&mut me.stream).poll_read(cx, buf);
            }
            if let Some((bytes, at)) = &mut me.pending {
                let n = (bytes.len() - *at).min(buf.remaining());
                buf.put_slice(&bytes[*at..*at + n]);
                *at += n;
                if *at == bytes.len() {
                    me.pending = None;
                    me.passing = true;
                }
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut read = tokio::io::ReadBuf::new(&mut chunk);
            match std::pin::Pin::new(&mut me.stream).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let got = read.filled();
                    let eof = got.is_empty();
                    me.head.extend_from_slice(got);
                    let end = http1::head_end(&me.head);
                    if end.is_none() && !eof && me.head.len() <= http1::MAX_HEAD {
                        continue;
                    }
                    let mut bytes = std::mem::take(&mut me.head);
                    if let Some(end) = end {
                        http1::relabel_close_delimited(&mut bytes[..end]);
                    }
                    if bytes.is_empty() {
                        me.passing = true;
                        return Poll::Ready(Ok(()));
                    }
                    me.pending = Some((bytes, 0));
                }
            }
        }
    }
}

impl tokio::io::AsyncWrite for ReadToClose {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl actix_rt::net::ActixStream for ReadToClose {
    fn poll_read_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<actix_rt::net::Ready>> {
        if self.pending.is_some() {
            return std::task::Poll::Ready(Ok(actix_rt::net::Ready::READABLE));
        }
        actix_rt::net::ActixStream::poll_read_ready(&self.stream, cx)
    }

    fn poll_write_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<io::Result<actix_rt::net::Ready>> {
        actix_rt::net::ActixStream::poll_write_ready(&self.stream, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_of_this_user_passes_and_other_hosts_are_not_judged() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let _accepted = l.accept().unwrap();
        verify_stream(&s).unwrap();
        // A connection that is not there: nothing to read, refused.
        let gone = SocketAddr::from(([127, 0, 0, 1], 1));
        let e = verify_owner(SocketAddr::from(([127, 0, 0, 1], 2)), gone).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        verify_owner(
            SocketAddr::from(([10, 0, 0, 1], 2)),
            SocketAddr::from(([10, 0, 0, 2], 80)),
        )
        .unwrap();
    }

    #[test]
    fn the_kernel_names_the_owner_of_an_accepted_connection_without_the_table() {
        for bind in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(l) = std::net::TcpListener::bind(bind) else {
                continue;
            };
            let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let _accepted = l.accept().unwrap();
            let me = nix::unistd::geteuid().as_raw();
            let got = sock_diag_owner(s.peer_addr().unwrap(), s.local_addr().unwrap());
            assert_eq!(got, Some(procinfo::SockDiag::Owner(me)), "{bind}");
            // Asked the other way round, the client's own side is this user's too, and a
            // connection that does not exist is no one's.
            let back = sock_diag_owner(s.local_addr().unwrap(), s.peer_addr().unwrap());
            assert_eq!(back, Some(procinfo::SockDiag::Owner(me)), "{bind}");
            let mut none = s.local_addr().unwrap();
            none.set_port(1);
            assert_eq!(
                sock_diag_owner(s.peer_addr().unwrap(), none),
                Some(procinfo::SockDiag::Unknown)
            );
        }
    }
}
