//! Who listens on a loopback port, checked before a key is sent to it.
//!
//! A model endpoint or a collector over plain `http://` is on loopback (E-MAN-001), and a
//! loopback port is anyone's to bind once its owner let go of it. So a client that is about to
//! send a key over such a connection first reads who owns the server's side of it
//! (the kernel's socket lookup, or `/proc/net/tcp*` when that cannot answer) and refuses a server of another user.
//! Invariant: **no key goes over a loopback TCP connection whose server is not this user's.**
//! Every dial of the outbound module ends here before its stream is handed over.

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
