//! Whether an endpoint a member will use answers (`mur doctor`): a connection within a bounded
//! time, checked as the runtime checks it before sending (a plain loopback listener must be this
//! user's), then closed. Nothing is written to it, so no key reaches a listener that is not ours.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::blocking::{Check, dial};

/// Connects to `url`'s host and port within `within` per address and hangs up. `Err` says why
/// not, in words for a person: nothing listens there, another user's listener, no such name.
pub fn reach(url: &str, within: Duration) -> Result<(), String> {
    let (host, port, tls) =
        crate::checkup::target(url).ok_or_else(|| "it is not an http(s) URL with a usable port".to_string())?;
    // `localhost` is dialled at 127.0.0.1 only, as the runtime dials it.
    let addrs: Vec<SocketAddr> = match crate::manifest::endpoint::localhost_socket(url) {
        Some(a) => vec![a],
        None => (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| format!("{host} does not resolve ({e})"))?
            .collect(),
    };
    let check = if tls { Check::Tls } else { Check::Owner };
    match dial(addrs, within, check) {
        Ok(_stream) => Ok(()),
        Err(e) => Err(match e.kind() {
            std::io::ErrorKind::ConnectionRefused => format!("nothing listens at {host}:{port} (connection refused)"),
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
                format!("{host}:{port} did not answer within {} s", within.as_secs())
            }
            _ => e.to_string(),
        }),
    }
}
