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
