//! Where a model capsule's requests go: `inference.endpoint` read as scheme and authority. Pure.
//!
//! The API key rides in every request's header, so the endpoint decides who receives it. Plain
//! `http://` carries it readable by anyone on the path; it is allowed only to this machine's
//! loopback (127.0.0.0/8, `::1`, `localhost`), where no network sits in between. `https://` may
//! name any host: the provider's certificate proves who receives the key.

use std::net::{Ipv4Addr, Ipv6Addr};

/// An endpoint URL's scheme and the part that names the receiving host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    pub tls: bool,
    /// `host[:port]`, without any `user@` part: what a request connects to.
    pub authority: &'a str,
}

/// Splits `http(s)://authority/...`; `None` when the URL has another scheme or no authority.
pub fn split(url: &str) -> Option<Endpoint<'_>> {
    let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
        (Some(r), _) => (true, r),
        (None, Some(r)) => (false, r),
        (None, None) => return None,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // The host follows the last '@', as HTTP clients read it.
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    (!authority.is_empty()).then_some(Endpoint { tls, authority })
}

/// The socket an endpoint naming `localhost` is dialled at: 127.0.0.1 and its port (80 or 443
/// when it names none). The name is never looked up: where `localhost` resolves to `::1` first,
/// any local user listening there would receive the API key (doors are dialled the same way).
/// `None` for every other host, which is resolved as usual.
pub fn localhost_socket(url: &str) -> Option<std::net::SocketAddr> {
    let endpoint = split(url)?;
    let (host, port) = match endpoint.authority.split_once(':') {
        Some((h, p)) => (h, p.parse::<u16>().ok().filter(|&p| p != 0)?),
        None => (endpoint.authority, if endpoint.tls { 443 } else { 80 }),
    };
    host.eq_ignore_ascii_case("localhost")
        .then(|| std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
}

/// Whether a plain `http://` endpoint may be used: its authority is exactly a loopback host and
/// an optional port. Anything looser (a user part, an odd spelling of an address) is refused, so
/// no HTTP client can read a different host out of it than this check did.
pub fn plain_http_allowed(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((inner, after)) = v6.split_once(']') else {
            return false;
        };
        (&authority[..inner.len() + 2], after)
    } else {
        match authority.split_once(':') {
            Some((h, _)) => (h, &authority[h.len()..]),
            None => (authority, ""),
        }
    };
    let port_ok = match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(p) => !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) && p.parse::<u16>().is_ok(),
    };
    port_ok && is_loopback_host(host)
}

/// `localhost`, an IPv4 address in 127.0.0.0/8, or `[::1]`.
fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<Ipv6Addr>().is_ok_and(|a| a == Ipv6Addr::LOCALHOST);
    }
    host.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback())
}

#[cfg(test)]
mod tests {

    #[test]
    fn localhost_is_dialled_at_127_0_0_1() {
        let at = |p: u16| Some(std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, p)));
        let rows: [(&str, Option<std::net::SocketAddr>); 8] = [
            ("http://localhost:11434/v1", at(11434)),
            ("http://LocalHost:8080", at(8080)),
            ("http://localhost/v1", at(80)),
            ("https://localhost/v1", at(443)),
            ("http://127.0.0.1:8080", None),
            ("https://api.openai.com", None),
            ("http://localhost:0", None),
            ("http://localhost:99999", None),
        ];
        for (url, want) in rows {
            assert_eq!(localhost_socket(url), want, "{url}");
        }
    }

    use super::*;

    #[test]
    fn plain_http_only_to_loopback() {
        let table = [
            ("http://127.0.0.1", true),
            ("http://127.0.0.1:8080/v1", true),
            ("http://127.255.3.4:1", true),
            ("http://localhost:11434", true),
            ("http://LOCALHOST/v1", true),
            ("http://[::1]:9/x", true),
            ("http://[::1]", true),
            ("http://127.0.0.1?x", true),
            ("http://evil.example", false),
            ("http://evil.example/127.0.0.1", false),
            ("http://10.0.0.1:8080", false),
            ("http://0.0.0.0:80", false),
            ("http://127.0.0.1@evil.example", false),
            ("http://evil.example@127.0.0.1", false),
            ("http://127.0.0.1.evil.example", false),
            ("http://localhost.evil.example", false),
            ("http://foo.localhost", false),
            ("http://127.1", false),
            ("http://0x7f.0.0.1", false),
            ("http://[::ffff:127.0.0.1]", false),
            ("http://[::2]", false),
            ("http://[::1", false),
            ("http://[::1]x", false),
            ("http://127.0.0.1:", false),
            ("http://127.0.0.1:99999", false),
            ("http://127.0.0.1:80:80", false),
            ("http://127.0.0.1\\@evil.example", false),
            ("http://", false),
            ("https://127.0.0.1", false),
        ];
        for (url, want) in table {
            assert_eq!(plain_http_allowed(url), want, "{url}");
        }
    }

    #[test]
    fn split_names_the_receiving_authority() {
        let table = [
            ("https://api.openai.com", Some((true, "api.openai.com"))),
            (
                "https://api.example.com:8443/v1?q#f",
                Some((true, "api.example.com:8443")),
            ),
            ("http://127.0.0.1:9/v1", Some((false, "127.0.0.1:9"))),
            ("https://user@evil.example/x", Some((true, "evil.example"))),
            ("https://", None),
            ("ftp://x", None),
        ];
        for (url, want) in table {
            assert_eq!(split(url).map(|e| (e.tls, e.authority)), want, "{url}");
        }
    }
}
