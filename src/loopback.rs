//! Who listens on a loopback port, checked before a key is sent to it.
//!
//! A model endpoint or a collector over plain `http://` is on loopback (E-MAN-001), and a
//! loopback port is anyone's to bind once its owner let go of it. So a client that is about to
//! send a key over such a connection first reads who owns the server's side of it
//! (`procinfo::socket_owner` over `/proc/net/tcp*`) and refuses a server of another user.
//! Invariant: **no key goes over a loopback TCP connection whose server is not this user's.**

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
    // The table lists every socket of the host; reading it costs well under a millisecond,
    // once per connection (a provider connection is reused across a task's turns).
    let owner = std::fs::read_to_string(table)
        .ok()
        .and_then(|t| procinfo::socket_owner(&t, peer, local));
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
        Response = actix_tls::connect::Connection<awc::http::Uri, tokio::net::TcpStream>,
        Error = actix_tls::connect::ConnectError,
    > + Clone,
> {
    use actix_tls::connect::{ConnectError, ConnectInfo, Connection};
    let service = actix_service::fn_service(move |info: ConnectInfo<awc::http::Uri>| async move {
        let target = match addr {
            Some(a) => a,
            None => {
                let uri = info.request();
                let host = uri
                    .host()
                    .unwrap_or_default()
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let ip: std::net::IpAddr = host.parse().map_err(|_| ConnectError::Unresolved)?;
                SocketAddr::new(ip, uri.port_u16().unwrap_or(80))
            }
        };
        let dial = tokio::net::TcpStream::connect(target);
        let stream = match tokio::time::timeout(connect, dial).await {
            Ok(r) => r.map_err(ConnectError::Io)?,
            Err(_) => return Err(ConnectError::Io(io::Error::from(io::ErrorKind::TimedOut))),
        };
        verify_owner(stream.local_addr().map_err(ConnectError::Io)?, target).map_err(ConnectError::Io)?;
        let _ = stream.set_nodelay(true);
        Ok(Connection::new(info.request().clone(), stream))
    });
    awc::Connector::new().connector(service).timeout(connect)
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
}
