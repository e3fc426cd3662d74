//! `capabilities.network.allow` rules (docs/reference/capsules.md#what-the-host-grants) and
//! matching a request target against them.
//!
//! Pure: plain strings in, booleans out, so the session's W-RUN-008 check, the virtual-peer
//! router and the wasi:http hook all share one reading of the grammar.
//!
//! A rule is `host`, `host:port`, or `scheme://host[:port]` (an optional trailing `/` is
//! tolerated). Hosts compare ASCII case-insensitively; a part a rule leaves out matches anything,
//! so a bare host matches every scheme and port. There are no wildcards: `localhost` does not
//! match `127.0.0.1`, and `example.com` does not match `api.example.com`.
//!
//! Loopback destinations are the exception ([`AllowList::allows_direct`]). A caller must declare
//! the bare `localhost` for its calls to reach doors at ports chosen at launch
//! (docs/reference/capsules.md#what-the-host-grants), and the runtime's own route to a door is
//! checked against it; but a request the component sends as written to a loopback host
//! (`localhost`, 127.0.0.0/8, `::1`, and every other spelling that reaches this machine) passes
//! only a rule that names its port, such as `localhost:5432`. Otherwise that one grant would reach
//! every service listening on the machine's loopback.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// One parsed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowRule {
    /// Lowercase scheme, or `None` for every scheme.
    scheme: Option<String>,
    /// Lowercase host, without IPv6 brackets.
    host: String,
    /// `None` for every port.
    port: Option<u16>,
}

impl AllowRule {
    /// Parses one rule; the error says what is wrong with it.
    pub fn parse(rule: &str) -> Result<AllowRule, String> {
        let (scheme, rest) = match rule.split_once("://") {
            Some((scheme, rest)) => {
                if !is_scheme(scheme) {
                    return Err(format!("'{scheme}' is not a URL scheme"));
                }
                (
                    Some(scheme.to_ascii_lowercase()),
                    rest.strip_suffix('/').unwrap_or(rest),
                )
            }
            None => (None, rule),
        };
        let (host, port) = split_host_port(rest)?;
        Ok(AllowRule { scheme, host, port })
    }

    /// The host it names: lowercase, without IPv6 brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port it names; `None` for every port.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// Whether this rule lets a request to `scheme://host[:port]` through. `port` is the port
    /// as written in the URL; the scheme's default port applies when it is absent.
    pub fn matches(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        if let Some(s) = &self.scheme
            && !s.eq_ignore_ascii_case(scheme)
        {
            return false;
        }
        if !self.host.eq_ignore_ascii_case(unbracket(host)) {
            return false;
        }
        match self.port {
            None => true,
            Some(p) => port.or_else(|| default_port(scheme)) == Some(p),
        }
    }

    /// A rule that reaches a loopback door: it matches `http://localhost` at any port
    /// (docs/reference/capsules.md#what-the-host-grants, the W-RUN-008 condition).
    pub fn reaches_loopback_door(&self) -> bool {
        self.port.is_none() && self.host == "localhost" && self.scheme.as_deref().is_none_or(|s| s == "http")
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(s) = &self.scheme {
            write!(f, "{s}://")?;
        }
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        Ok(())
    }
}

/// A component's allow list. Malformed rules are kept aside and match nothing, so a typo
/// narrows what a capsule may reach instead of stopping the session; `rejected()` lists them
/// for a warning.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowList {
    rules: Vec<AllowRule>,
    rejected: Vec<(String, String)>,
}

impl AllowList {
    /// Reads the rules as `capabilities.network.allow` lists them.
    pub fn parse<S: AsRef<str>>(rules: &[S]) -> AllowList {
        let mut list = AllowList::default();
        for r in rules {
            let r = r.as_ref();
            match AllowRule::parse(r) {
                Ok(rule) => list.rules.push(rule),
                Err(why) => list.rejected.push((r.to_string(), why)),
            }
        }
        list
    }

    /// The rules that parsed.
    pub fn rules(&self) -> &[AllowRule] {
        &self.rules
    }

    /// The rules that did not parse, each with the reason.
    pub fn rejected(&self) -> &[(String, String)] {
        &self.rejected
    }

    /// Whether any rule lets a request to `scheme://host[:port]` through: the check of a door the
    /// runtime routes a call to (a bare `localhost` reaches every door).
    pub fn allows(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        self.rules.iter().any(|r| r.matches(scheme, host, port))
    }

    /// Whether a request the component sends as written to `scheme://host[:port]` may go: as
    /// [`allows`](Self::allows), except that a loopback host is reached only through a rule that
    /// names the port (a bare `localhost` is for doors, routed by the runtime, not for every
    /// service on the machine).
    pub fn allows_direct(&self, scheme: &str, host: &str, port: Option<u16>) -> bool {
        let loopback = is_loopback_host(host);
        self.rules
            .iter()
            .any(|r| (!loopback || r.port.is_some()) && r.matches(scheme, host, port))
    }

    /// Whether any rule lets a request to this absolute door URL through (see
    /// [`allows`](Self::allows)); a URL that does not parse is never allowed.
    pub fn allows_url(&self, url: &str) -> bool {
        match split_url(url) {
            Some((scheme, host, port)) => self.allows(scheme, host, port),
            None => false,
        }
    }

    /// Whether some rule reaches `http://localhost` at any port (the W-RUN-008 condition).
    pub fn reaches_loopback_door(&self) -> bool {
        self.rules.iter().any(AllowRule::reaches_loopback_door)
    }
}

/// Whether a connection to `host` (as a URL writes it; IPv6 may keep its brackets) reaches this
/// machine's loopback: `localhost` and names under it, 127.0.0.0/8, `::1`, the unspecified
/// addresses (a connection to 0.0.0.0 or `::` reaches the local host), IPv4-mapped forms of
/// these, and the numeric spellings the system resolver reads as IPv4 (`127.1`, `0x7f000001`,
/// `2130706433`, `0`). A trailing dot is ignored. Names that merely resolve to loopback are not
/// recognised: a rule must name them, and the manifest that does is the one that chose them.
pub fn is_loopback_host(host: &str) -> bool {
    let h = unbracket(host).to_ascii_lowercase();
    let h = h.strip_suffix('.').unwrap_or(&h);
    if h == "localhost" || h.ends_with(".localhost") {
        return true;
    }
    let ip = match h.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => match numeric_ipv4(h) {
            Some(v4) => IpAddr::V4(v4),
            None => return false,
        },
    };
    let local_v4 = |a: Ipv4Addr| a.is_loopback() || a.is_unspecified();
    match ip {
        IpAddr::V4(a) => local_v4(a),
        IpAddr::V6(a) => a.is_loopback() || a.is_unspecified() || a.to_ipv4_mapped().is_some_and(local_v4),
    }
}

/// The IPv4 address `inet_aton` reads from `s`: one to four dot-separated parts, each decimal,
/// octal (leading `0`) or hex (`0x`), the last filling the remaining bytes.
fn numeric_ipv4(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for p in &parts {
        let v = if let Some(hex) = p.strip_prefix("0x") {
            if hex.is_empty() {
                return None;
            }
            u32::from_str_radix(hex, 16).ok()?
        } else if p.len() > 1 && p.starts_with('0') {
            u32::from_str_radix(&p[1..], 8).ok()?
        } else {
            p.parse::<u32>().ok()?
        };
        values.push(v);
    }
    let (last, head) = values.split_last()?;
    let mut addr: u32 = 0;
    for (i, &v) in head.iter().enumerate() {
        if v > 0xff {
            return None;
        }
        addr |= v << (24 - 8 * i);
    }
    let room = 32 - 8 * head.len();
    if room < 32 && *last >> room != 0 {
        return None;
    }
    Some(Ipv4Addr::from(addr | last))
}

/// Splits `scheme://host[:port][/…]` into its parts; `None` when it is not such a URL (userinfo
/// included: a door URL never carries one).
pub fn split_url(url: &str) -> Option<(&str, &str, Option<u16>)> {
    let (scheme, rest) = url.split_once("://")?;
    if !is_scheme(scheme) {
        return None;
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return None;
    }
    let (host, port) = split_authority(authority)?;
    Some((scheme, host, port))
}

fn is_scheme(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

fn default_port(scheme: &str) -> Option<u16> {
    if scheme.eq_ignore_ascii_case("http") {
        Some(80)
    } else if scheme.eq_ignore_ascii_case("https") {
        Some(443)
    } else {
        None
    }
}

fn unbracket(host: &str) -> &str {
    host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` → (host without brackets, port).
fn split_authority(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if v6.is_empty() || !v6.chars().all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.') {
            return None;
        }
        match after {
            "" => (v6, None),
            p => (v6, Some(p.strip_prefix(':')?)),
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    if !s.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return None;
    }
    let port = match port {
        None => None,
        Some(p) => Some(parse_port(p)?),
    };
    Some((host, port))
}

fn parse_port(p: &str) -> Option<u16> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    p.parse::<u16>().ok().filter(|&n| n != 0)
}

fn split_host_port(s: &str) -> Result<(String, Option<u16>), String> {
    if s.is_empty() {
        return Err("the host is missing".to_string());
    }
    match split_authority(s) {
        Some((host, port)) => Ok((host.to_ascii_lowercase(), port)),
        None => Err(format!(
            "'{s}' is not a host or host:port (a port is 1–65535; no path, user or wildcard)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rules_of_every_form() {
        let ok: &[(&str, &str)] = &[
            ("localhost", "localhost"),
            ("LocalHost", "localhost"),
            ("localhost:8080", "localhost:8080"),
            ("http://localhost", "http://localhost"),
            ("HTTPS://API.Example.com:8443", "https://api.example.com:8443"),
            ("https://api.example.com/", "https://api.example.com"),
            ("[::1]:9000", "[::1]:9000"),
            ("http://[::1]", "http://[::1]"),
            ("127.0.0.1", "127.0.0.1"),
        ];
        for (rule, shown) in ok {
            let parsed = AllowRule::parse(rule).unwrap_or_else(|e| panic!("{rule}: {e}"));
            assert_eq!(parsed.to_string(), *shown, "{rule}");
        }
        let bad = [
            "",
            "http://",
            "localhost:",
            "localhost:0",
            "localhost:65536",
            "localhost:http",
            "*.example.com",
            "https://example.com/v1",
            "user@example.com",
            "1http://x",
            "exa mple.com",
            "[::1",
            "[]:80",
        ];
        for rule in bad {
            assert!(AllowRule::parse(rule).is_err(), "{rule:?} should be refused");
        }
    }

    #[test]
    fn matches_by_scheme_host_and_port() {
        // (rule, scheme, host, port, allowed)
        let table: &[(&str, &str, &str, Option<u16>, bool)] = &[
            ("localhost", "http", "localhost", Some(4242), true),
            ("localhost", "https", "LOCALHOST", None, true),
            ("localhost", "http", "127.0.0.1", Some(4242), false),
            ("localhost", "http", "localhost.evil.com", None, false),
            ("example.com", "https", "api.example.com", None, false),
            ("localhost:8080", "http", "localhost", Some(8080), true),
            ("localhost:8080", "https", "localhost", Some(8080), true),
            ("localhost:8080", "http", "localhost", Some(8081), false),
            ("localhost:80", "http", "localhost", None, true),
            ("localhost:80", "https", "localhost", None, false),
            ("http://localhost", "http", "localhost", Some(1), true),
            ("http://localhost", "https", "localhost", None, false),
            ("https://api.example.com", "https", "api.example.com", None, true),
            ("https://api.example.com:443", "https", "api.example.com", None, true),
            ("https://api.example.com:8443", "https", "api.example.com", None, false),
            ("[::1]", "http", "[::1]", Some(5), true),
            ("[::1]", "http", "::1", Some(5), true),
        ];
        for (rule, scheme, host, port, want) in table {
            let list = AllowList::parse(&[rule]);
            assert_eq!(
                list.allows(scheme, host, *port),
                *want,
                "{rule} vs {scheme}://{host}:{port:?}"
            );
        }
    }

    #[test]
    fn empty_and_malformed_lists_allow_nothing() {
        let none: [&str; 0] = [];
        assert!(!AllowList::parse(&none).allows("http", "localhost", None));
        let list = AllowList::parse(&["*.example.com", "example.org"]);
        assert_eq!(list.rules().len(), 1);
        assert_eq!(list.rejected().len(), 1);
        assert_eq!(list.rejected()[0].0, "*.example.com");
        assert!(!list.allows("https", "a.example.com", None));
        assert!(list.allows("https", "example.org", None));
    }

    #[test]
    fn allows_urls() {
        let list = AllowList::parse(&["localhost"]);
        assert!(list.allows_url("http://localhost:4242"));
        assert!(list.allows_url("http://localhost:4242/"));
        assert!(list.allows_url("http://LOCALHOST/a?b"));
        assert!(!list.allows_url("http://127.0.0.1:4242"));
        assert!(!list.allows_url("http://user@localhost:4242"));
        assert!(!list.allows_url("localhost:4242"));
        assert!(!list.allows_url("http://localhost:99999"));
    }

    #[test]
    fn loopback_hosts_in_every_spelling() {
        let table: &[(&str, bool)] = &[
            ("localhost", true),
            ("LocalHost", true),
            ("localhost.", true),
            ("db.localhost", true),
            ("127.0.0.1", true),
            ("127.255.255.254", true),
            ("127.1", true),
            ("127.0.1", true),
            ("0x7f000001", true),
            ("0X7F.1", true),
            ("0177.0.0.1", true),
            ("2130706433", true),
            ("0", true),
            ("0.0.0.0", true),
            ("::1", true),
            ("[::1]", true),
            ("[0:0:0:0:0:0:0:1]", true),
            ("[::]", true),
            ("[::ffff:127.0.0.1]", true),
            ("[::ffff:7f00:2]", true),
            ("[::ffff:0.0.0.0]", true),
            // Not this machine's loopback.
            ("localhost.example.com", false),
            ("mylocalhost", false),
            ("example.com", false),
            ("128.0.0.1", false),
            ("10.0.0.1", false),
            ("126.255.255.255", false),
            ("1.127.0.0", false),
            ("[::2]", false),
            ("[::ffff:10.0.0.1]", false),
            ("[2001:db8::1]", false),
            ("127.0.0.1.example.com", false),
            ("0x", false),
            ("08.0.0.1", false),
            ("127.0.0.256", false),
            ("127.16777216", false),
            ("4294967296", false),
            ("127..1", false),
            ("", false),
        ];
        for (host, want) in table {
            assert_eq!(is_loopback_host(host), *want, "{host:?}");
        }
    }

    #[test]
    fn direct_requests_reach_loopback_only_at_a_named_port() {
        // (rules, scheme, host, port, sent as written, routed to a door)
        type Row<'a> = (&'a [&'a str], &'a str, &'a str, Option<u16>, bool, bool);
        let table: &[Row] = &[
            // The bare grant every caller declares reaches doors, not every loopback service.
            (&["localhost"], "http", "localhost", Some(5432), false, true),
            (&["localhost"], "http", "localhost", None, false, true),
            (&["http://localhost"], "http", "localhost", Some(4242), false, true),
            (&["LOCALHOST"], "http", "LocalHost", Some(4242), false, true),
            (&["127.0.0.1"], "http", "127.0.0.1", Some(5432), false, true),
            (&["[::1]"], "http", "[::1]", Some(5432), false, true),
            (&["0.0.0.0"], "http", "0.0.0.0", Some(5432), false, true),
            (&["2130706433"], "http", "2130706433", Some(5432), false, true),
            // A rule that names the port reaches that port, and only it.
            (
                &["localhost", "localhost:5432"],
                "http",
                "localhost",
                Some(5432),
                true,
                true,
            ),
            (&["localhost:5432"], "http", "localhost", Some(5433), false, false),
            (&["localhost:5432"], "https", "localhost", Some(5432), true, true),
            (&["http://localhost:8080"], "http", "localhost", Some(8080), true, true),
            (
                &["http://localhost:8080"],
                "https",
                "localhost",
                Some(8080),
                false,
                false,
            ),
            (&["localhost:80"], "http", "localhost", None, true, true),
            (&["127.0.0.1:5432"], "http", "127.0.0.1", Some(5432), true, true),
            (&["127.0.0.1:5432"], "http", "localhost", Some(5432), false, false),
            (&["[::1]:9000"], "http", "[::1]", Some(9000), true, true),
            // Other hosts keep the plain rules.
            (&["example.com"], "https", "example.com", None, true, true),
            (&["example.com"], "http", "example.com", Some(8080), true, true),
            (
                &["https://api.example.com"],
                "http",
                "api.example.com",
                None,
                false,
                false,
            ),
            (&[], "http", "localhost", Some(1), false, false),
        ];
        for (rules, scheme, host, port, direct, routed) in table {
            let list = AllowList::parse(rules);
            let at = format!("{rules:?} vs {scheme}://{host}:{port:?}");
            assert_eq!(list.allows_direct(scheme, host, *port), *direct, "direct: {at}");
            assert_eq!(list.allows(scheme, host, *port), *routed, "routed: {at}");
        }
    }

    #[test]
    fn loopback_door_condition() {
        let table: &[(&[&str], bool)] = &[
            (&["localhost"], true),
            (&["http://localhost"], true),
            (&["Localhost"], true),
            (&["localhost:8080"], false),
            (&["https://localhost"], false),
            (&["127.0.0.1"], false),
            (&["example.com", "http://localhost:1"], false),
            (&[], false),
        ];
        for (rules, want) in table {
            assert_eq!(AllowList::parse(rules).reaches_loopback_door(), *want, "{rules:?}");
        }
    }
}
