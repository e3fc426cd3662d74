//! Facts about processes on this host: start time tokens and liveness.
//!
//! A pid alone can be reused; a pid together with its start time (clock ticks since boot, field
//! 22 of `/proc/<pid>/stat`) names one process for its whole life. Running records, formation
//! markers and `mur stop` all identify processes this way.

use std::path::Path;

/// The start time of `pid` as the host reports it, as a decimal string; `None` if unreadable.
pub fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    parse_start_field(&stat)
}

/// This process's own start token.
pub fn own_start() -> Option<String> {
    process_start(std::process::id())
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is parenthesised and may
/// itself contain spaces and parentheses, so fields are counted after its last `)`.
fn parse_start_field(stat: &str) -> Option<String> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name come fields 3, 4, …; field 22 is the 20th of them.
    let field = after.split_whitespace().nth(19)?;
    field.bytes().all(|b| b.is_ascii_digit()).then(|| field.to_string())
}

/// True when `pid` exists and, if `start` is given and non-empty, still has that start token.
pub fn is_alive(pid: u32, start: Option<&str>) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    match process_start(pid) {
        None => false,
        Some(now) => match start {
            Some(s) if !s.is_empty() => now == s,
            _ => !is_zombie(pid),
        },
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// The owner (uid) of the TCP socket at `server` connected to `client`, as a `/proc/net/tcp`
/// or `/proc/net/tcp6` table lists it: the server's side of a connection this process made.
///
/// A client that dials a loopback port cannot otherwise tell who listens there; any local user
/// may bind a port its owner left, so a client that sends a key reads the owner first. `None`
/// when the table has no such row.
pub fn socket_owner(table: &str, server: std::net::SocketAddr, client: std::net::SocketAddr) -> Option<u32> {
    let (want_local, want_remote) = (hex_socket(server), hex_socket(client));
    table.lines().skip(1).find_map(|row| {
        let mut fields = row.split_whitespace();
        let _slot = fields.next()?;
        let local = fields.next()?;
        let remote = fields.next()?;
        if !local.eq_ignore_ascii_case(&want_local) || !remote.eq_ignore_ascii_case(&want_remote) {
            return None;
        }
        // st, tx:rx, tr:when, retrnsmt, then uid.
        fields.nth(4)?.parse().ok()
    })
}

/// `SOCK_DIAG_BY_FAMILY`: the netlink message type of a socket lookup and of its answer.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const IPPROTO_TCP: u8 = 6;
const NLMSG_HEADER: usize = 16;
/// `inet_diag_sockid`: ports, two 16-byte addresses, interface, cookie.
const SOCKID: usize = 48;

/// The `NETLINK_SOCK_DIAG` request for the one TCP socket at `server` connected to `client`
/// (an exact lookup, not a dump: the kernel answers from its hash in microseconds, where
/// reading `/proc/net/tcp` walks every socket of the host).
pub fn sock_diag_request(server: std::net::SocketAddr, client: std::net::SocketAddr, seq: u32) -> Vec<u8> {
    let family: u8 = if server.is_ipv4() { 2 } else { 10 };
    let mut m = Vec::with_capacity(NLMSG_HEADER + 8 + SOCKID);
    m.extend_from_slice(&((NLMSG_HEADER + 8 + SOCKID) as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, extensions, pad, states (all), then the socket id.
    m.extend_from_slice(&[family, IPPROTO_TCP, 0, 0]);
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m.extend_from_slice(&sock_id(server, client));
    m
}

/// An `inet_diag_sockid` as the kernel fills it for the socket whose own end is `local`:
/// ports and addresses in network order, no interface, no cookie (`INET_DIAG_NOCOOKIE`).
fn sock_id(local: std::net::SocketAddr, remote: std::net::SocketAddr) -> [u8; SOCKID] {
    let mut id = [0u8; SOCKID];
    id[0..2].copy_from_slice(&local.port().to_be_bytes());
    id[2..4].copy_from_slice(&remote.port().to_be_bytes());
    let octets = |a: std::net::IpAddr| match a {
        std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
        std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
    };
    let (l, r) = (octets(local.ip()), octets(remote.ip()));
    id[4..4 + l.len()].copy_from_slice(&l);
    id[20..20 + r.len()].copy_from_slice(&r);
    id[40..48].copy_from_slice(&[0xff; 8]);
    id
}

/// What the kernel answered to [`sock_diag_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SockDiag {
    /// The socket is a full, connected one, owned by this uid.
    Owner(u32),
    /// The kernel has no such socket (`ENOENT`), or has it only as a socket whose uid it does
    /// not report (a half-open or time-wait one, whose uid reads 0): ask `/proc` instead.
    Unknown,
}

/// Reads the kernel's answer to the request [`sock_diag_request`] made for `server`/`client`
/// with `seq`. An answer about another socket, another request, or in no shape the kernel
/// sends is `Unknown`, never an owner.
pub fn sock_diag_owner(reply: &[u8], server: std::net::SocketAddr, client: std::net::SocketAddr, seq: u32) -> SockDiag {
    let word = |at: usize| -> Option<u32> { Some(u32::from_ne_bytes(reply.get(at..at + 4)?.try_into().ok()?)) };
    let half = |at: usize| -> Option<u16> { Some(u16::from_ne_bytes(reply.get(at..at + 2)?.try_into().ok()?)) };
    let read = || -> Option<SockDiag> {
        let len = word(0)? as usize;
        if len > reply.len() || word(8)? != seq || half(4)? != SOCK_DIAG_BY_FAMILY {
            return None;
        }
        // inet_diag_msg: family, state, timer, retrans, the socket id, expires, rqueue, wqueue, uid.
        let body = NLMSG_HEADER;
        let state = *reply.get(body + 1)?;
        if reply.get(body + 4..body + 4 + SOCKID)?[..40] != sock_id(server, client)[..40] {
            return None;
        }
        // ESTABLISHED … CLOSING: a full socket with its own uid. LISTEN (10), TIME_WAIT (6),
        // CLOSE (7) and NEW_SYN_RECV (12) are not the connection's server side or report no uid.
        matches!(state, 1 | 3 | 4 | 5 | 8 | 9 | 11).then_some(())?;
        let uid = word(body + 4 + SOCKID + 12)?;
        Some(SockDiag::Owner(uid))
    };
    if half(4) == Some(NLMSG_ERROR) {
        return SockDiag::Unknown;
    }
    read().unwrap_or(SockDiag::Unknown)
}

/// A socket address as the kernel prints it in `/proc/net/tcp*`: each 32-bit word of the
/// address in host byte order as 8 hex digits, `:`, the port as 4.
fn hex_socket(a: std::net::SocketAddr) -> String {
    let words: Vec<String> = match a.ip() {
        std::net::IpAddr::V4(v4) => vec![format!("{:08X}", u32::from_ne_bytes(v4.octets()))],
        std::net::IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect(),
    };
    format!("{}:{:04X}", words.concat(), a.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connections_server_side_owner_is_read_from_the_tcp_table() {
        // As this host prints it: 127.0.0.1:8080 (uid 1000) serving 127.0.0.1:43210, a listener
        // of uid 0 on the same port, and an IPv6 connection.
        let v4 = u32::from_ne_bytes([127, 0, 0, 1]);
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             0: {v4:08X}:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0\n\
             1: {v4:08X}:1F90 {v4:08X}:A8CA 01 00000000:00000000 00:00000000 00000000  1000        0 2 1 0\n\
             2: {v4:08X}:A8CA {v4:08X}:1F90 01 00000000:00000000 00:00000000 00000000     7        0 3 1 0\n"
        );
        let at = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
        assert_eq!(socket_owner(&table, at(8080), at(43210)), Some(1000));
        assert_eq!(socket_owner(&table, at(43210), at(8080)), Some(7));
        assert_eq!(socket_owner(&table, at(8081), at(43210)), None);
        assert_eq!(socket_owner("", at(8080), at(43210)), None);
        let one = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 8080));
        let two = std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 43210));
        let hex = hex_socket(one);
        assert_eq!(hex.len(), 32 + 1 + 4);
        let t6 = format!("header\n   0: {hex} {} 01 0:0 0:0 0 1234 0 9\n", hex_socket(two));
        assert_eq!(socket_owner(&t6, one, two), Some(1234));
    }

    /// The kernel's answer for the server side of `server`/`client`, as it lays it out.
    fn diag_answer(
        server: std::net::SocketAddr,
        client: std::net::SocketAddr,
        seq: u32,
        state: u8,
        uid: u32,
    ) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&((NLMSG_HEADER + 4 + SOCKID + 20) as u32).to_ne_bytes());
        m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        m.extend_from_slice(&2u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(&[if server.is_ipv4() { 2 } else { 10 }, state, 0, 0]);
        let mut id = sock_id(server, client);
        id[40..48].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        m.extend_from_slice(&id);
        for w in [0u32, 0, 0, uid, 77] {
            m.extend_from_slice(&w.to_ne_bytes());
        }
        m
    }

    #[test]
    fn a_sock_diag_lookup_names_the_server_side_and_trusts_only_its_answer() {
        let at = |p: u16| std::net::SocketAddr::from(([127, 0, 0, 1], p));
        let (server, client) = (at(8080), at(43210));
        let req = sock_diag_request(server, client, 9);
        assert_eq!(req.len(), 72);
        assert_eq!(&req[0..4], &72u32.to_ne_bytes());
        assert_eq!(&req[16..20], &[2, 6, 0, 0]);
        // The socket id: its own port first, in network order, then the remote's.
        assert_eq!(&req[24..28], &[0x1f, 0x90, 0xa8, 0xca]);
        assert_eq!(&req[28..32], &[127, 0, 0, 1]);
        assert_eq!(&req[44..48], &[127, 0, 0, 1]);
        assert_eq!(&req[64..72], &[0xff; 8]);
        let v6 = |p: u16| std::net::SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, p));
        let req6 = sock_diag_request(v6(8080), v6(43210), 1);
        assert_eq!((req6[16], req6[43], req6[59]), (10, 1, 1));

        let cases: &[(&str, Vec<u8>, SockDiag)] = &[
            (
                "established",
                diag_answer(server, client, 9, 1, 1000),
                SockDiag::Owner(1000),
            ),
            ("close-wait", diag_answer(server, client, 9, 8, 0), SockDiag::Owner(0)),
            (
                "half-open reads uid 0",
                diag_answer(server, client, 9, 12, 0),
                SockDiag::Unknown,
            ),
            ("time-wait", diag_answer(server, client, 9, 6, 0), SockDiag::Unknown),
            (
                "a listener",
                diag_answer(server, client, 9, 10, 1000),
                SockDiag::Unknown,
            ),
            (
                "another request",
                diag_answer(server, client, 8, 1, 1000),
                SockDiag::Unknown,
            ),
            (
                "another socket",
                diag_answer(at(8081), client, 9, 1, 1000),
                SockDiag::Unknown,
            ),
            (
                "the client's side",
                diag_answer(client, server, 9, 1, 1000),
                SockDiag::Unknown,
            ),
            (
                "cut short",
                diag_answer(server, client, 9, 1, 1000)[..70].to_vec(),
                SockDiag::Unknown,
            ),
            ("empty", Vec::new(), SockDiag::Unknown),
        ];
        for (what, reply, want) in cases {
            assert_eq!(sock_diag_owner(reply, server, client, 9), *want, "{what}");
        }
        let mut error = diag_answer(server, client, 9, 1, 1000);
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(
            sock_diag_owner(&error, server, client, 9),
            SockDiag::Unknown,
            "an error"
        );
        let mut long = diag_answer(server, client, 9, 1, 1000);
        long[0..4].copy_from_slice(&4096u32.to_ne_bytes());
        assert_eq!(
            sock_diag_owner(&long, server, client, 9),
            SockDiag::Unknown,
            "a length past the reply"
        );
    }

    #[test]
    fn start_field_survives_odd_command_names() {
        let line = "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_field(line).as_deref(), Some("987654"));
        assert_eq!(parse_start_field("garbage"), None);
    }

    #[test]
    fn own_process_is_alive_with_its_start() {
        let start = own_start().expect("procfs readable");
        assert!(is_alive(std::process::id(), Some(&start)));
        assert!(!is_alive(std::process::id(), Some("1")));
        assert!(!is_alive(0, None));
    }
}
