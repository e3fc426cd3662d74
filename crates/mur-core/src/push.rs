//! Push notifications' pure part (A2A v1.0 §3.1.7–3.1.10, §4.3, §13.2; docs/a2a.md#push-notification-configuration-methods):
//! the webhook URL rule, the address rule applied to every address a webhook's name resolves to,
//! a config's params, and the delivery's retry plan. The door (`mur::door::push`) stores the
//! configs and moves the bytes.
//!
//! The URL rule: `https://`, or `http://` to a loopback address (or `localhost`, which is dialled
//! at 127.0.0.1, never resolved); never an address that is link-local, a cloud metadata service,
//! unspecified, multicast or broadcast, whichever way it is spelled: an IPv4 address in the
//! decimal, hexadecimal, octal or shortened forms URL parsers accept, or IPv6 carrying an IPv4
//! address (mapped, compatible, NAT64, 6to4) is judged as that IPv4 address. A name is judged by
//! every address it resolves to, at creation and again at each delivery, and a delivery connects
//! only to an address it judged.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::secret::Secret;

/// Bytes of a webhook URL.
pub const MAX_URL_BYTES: usize = 2048;
/// Bytes of a config's `token` and of its `authentication.credentials`.
pub const MAX_SECRET_BYTES: usize = 4096;
/// Bytes of a config's `id` and of an `authentication.scheme`.
pub const MAX_ID_BYTES: usize = 256;
/// Configs one task may hold [ours].
pub const PER_TASK: usize = 8;
/// Configs one door may hold, over all its tasks [ours].
pub const PER_DOOR: usize = 1024;
/// Attempts at one update, the first included, before it is given up.
pub const ATTEMPTS: u32 = 5;
/// Bound of one delivery: connecting, sending and reading the reply's head.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// Wait before the first retry; each later one doubles it, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(8);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// A webhook's host as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An address literal, in whichever spelling (normalised).
    Ip(IpAddr),
    /// `localhost` or a name under it: dialled at 127.0.0.1, never resolved.
    Localhost,
    /// A DNS name, lowercase, without a trailing dot.
    Name(String),
}

/// A webhook URL that passed [`check_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    pub scheme: Scheme,
    pub host: Host,
    pub port: u16,
    /// Path and query, starting with `/`.
    pub path: String,
}

impl Webhook {
    /// The URL to request, with the host as written (so `Host` and TLS name the webhook's name),
    /// an address literal in its canonical spelling, and the port only when not the default.
    pub fn request_url(&self) -> String {
        let scheme = match self.scheme {
            Scheme::Http => "http",
            Scheme::Https => "https",
        };
        let host = match &self.host {
            Host::Ip(IpAddr::V4(a)) => a.to_string(),
            Host::Ip(IpAddr::V6(a)) => format!("[{a}]"),
            Host::Localhost => "localhost".to_string(),
            Host::Name(n) => n.clone(),
        };
        let default = match self.scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        };
        if self.port == default {
            format!("{scheme}://{host}{}", self.path)
        } else {
            format!("{scheme}://{host}:{}{}", self.port, self.path)
        }
    }
}

/// What an address is, for the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrClass {
    Loopback,
    LinkLocal,
    /// A cloud metadata service (169.254.169.254, fd00:ec2::254, 100.100.100.200, …).
    Metadata,
    Unspecified,
    Multicast,
    Broadcast,
    /// Anything else: reachable over `https`.
    Other,
}

/// The IPv4 address an IPv6 address carries, when it is one of the forms that reach it:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d` and 6to4
/// `2002:aabb:ccdd::`.
fn embedded_v4(a: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = a.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(v4) = a.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0, 0, 0, 0, 0, 0] && !(s[6] == 0 && s[7] <= 1) {
        return Some(tail);
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(tail);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    None
}

pub fn classify(ip: IpAddr) -> AddrClass {
    match ip {
        IpAddr::V4(a) => classify_v4(a),
        IpAddr::V6(a) => match embedded_v4(a) {
            Some(v4) => classify_v4(v4),
            None => classify_v6(a),
        },
    }
}

fn classify_v4(a: Ipv4Addr) -> AddrClass {
    const METADATA: [Ipv4Addr; 3] = [
        Ipv4Addr::new(169, 254, 169, 254),
        Ipv4Addr::new(169, 254, 170, 2),
        Ipv4Addr::new(100, 100, 100, 200),
    ];
    let o = a.octets();
    if METADATA.contains(&a) {
        AddrClass::Metadata
    } else if o[0] == 127 {
        AddrClass::Loopback
    } else if o[0] == 0 {
        // 0.0.0.0/8, "this network": Linux connects 0.0.0.0 to the local host.
        AddrClass::Unspecified
    } else if o[0] == 169 && o[1] == 254 {
        AddrClass::LinkLocal
    } else if a.is_broadcast() {
        AddrClass::Broadcast
    } else if a.is_multicast() {
        AddrClass::Multicast
    } else {
        AddrClass::Other
    }
}

fn classify_v6(a: Ipv6Addr) -> AddrClass {
    let s = a.segments();
    if s == [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254] {
        AddrClass::Metadata
    } else if a.is_loopback() {
        AddrClass::Loopback
    } else if a.is_unspecified() {
        AddrClass::Unspecified
    } else if a.is_multicast() {
        AddrClass::Multicast
    } else if s[0] & 0xffc0 == 0xfe80 || s[0] & 0xffc0 == 0xfec0 {
        // Link-local, and the deprecated site-local block that behaves as a local scope.
        AddrClass::LinkLocal
    } else {
        AddrClass::Other
    }
}

/// Why the rule refuses `ip` for `scheme`, or `None` when a delivery may connect to it.
pub fn address_refusal(scheme: Scheme, ip: IpAddr) -> Option<String> {
    let what = match classify(ip) {
        AddrClass::Loopback => return None,
        AddrClass::Other if scheme == Scheme::Https => return None,
        AddrClass::Other => {
            return Some(format!(
                "plain http:// is only for a loopback address, not {ip}; use https://"
            ));
        }
        AddrClass::LinkLocal => "a link-local address",
        AddrClass::Metadata => "a cloud metadata address",
        AddrClass::Unspecified => "an unspecified address",
        AddrClass::Multicast => "a multicast address",
        AddrClass::Broadcast => "the broadcast address",
    };
    Some(format!("{ip} is {what}, which a webhook may never be"))
}

/// The rule for every address a name resolved to: all must pass, or the delivery is refused (a
/// name that resolves elsewhere later is refused then). `None` when they all pass and there is one.
pub fn resolved_refusal(scheme: Scheme, name: &str, addrs: &[IpAddr]) -> Option<String> {
    if addrs.is_empty() {
        return Some(format!("{name} resolves to no address"));
    }
    addrs
        .iter()
        .find_map(|ip| address_refusal(scheme, *ip))
        .map(|why| format!("{name} resolves to an address refused: {why}"))
}

/// The WHATWG URL standard's IPv4 number: decimal, `0x` hexadecimal, or octal with a leading 0.
fn ipv4_number(part: &str) -> Option<u64> {
    let (digits, radix) = if let Some(h) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
        (h, 16)
    } else if part.len() > 1 && part.starts_with('0') {
        (&part[1..], 8)
    } else {
        (part, 10)
    };
    if digits.is_empty() {
        return (radix != 10).then_some(0);
    }
    if digits.len() > 20 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// Whether a host's last label makes it an IPv4 address to a URL parser (WHATWG "ends in a
/// number"): then it must parse as one, or the URL is invalid.
fn ends_in_number(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or_default();
    if !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    last.strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The WHATWG IPv4 parser: one to four parts, the last filling the remaining bytes.
fn parse_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let numbers: Vec<u64> = parts.iter().map(|p| ipv4_number(p)).collect::<Option<_>>()?;
    let (last, init) = numbers.split_last()?;
    if init.iter().any(|n| *n > 255) || *last >= 256u64.pow(5 - numbers.len() as u32) {
        return None;
    }
    let mut v = *last;
    for (i, n) in init.iter().enumerate() {
        v += n << (8 * (3 - i));
    }
    u32::try_from(v).ok().map(Ipv4Addr::from)
}

fn dns_name_ok(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A webhook URL read and judged (the address rule applied to a literal; a name's addresses are
/// judged when it is resolved, [`resolved_refusal`]). The refusal says why, quoting nothing of
/// the URL but an address.
pub fn check_url(url: &str) -> Result<Webhook, String> {
    if url.len() > MAX_URL_BYTES {
        return Err(format!("is over {MAX_URL_BYTES} bytes"));
    }
    // Only printable ASCII: spaces, controls, backslashes and non-ASCII are read differently by
    // different URL parsers, so a URL holding one is refused rather than guessed at.
    if !url.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') {
        return Err("holds a character outside printable ASCII, or a backslash".into());
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err("is not an absolute http:// or https:// URL".into());
    };
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "https" => Scheme::Https,
        "http" => Scheme::Http,
        _ => return Err("must be https://, or http:// to a loopback address".into()),
    };
    if rest.contains('#') {
        return Err("has a fragment, which a webhook URL may not".into());
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err("carries credentials before its host; use `authentication`".into());
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err("has an unclosed [ in its host".into());
        };
        let ip: Ipv6Addr = addr.parse().map_err(|_| "has an invalid IPv6 address".to_string())?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("has bytes after its IPv6 address")?),
        };
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        let (name, port) = match authority.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (authority, None),
        };
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        if name.is_empty() {
            return Err("has no host".into());
        }
        let host = if ends_in_number(&name) {
            Host::Ip(IpAddr::V4(parse_ipv4(&name).ok_or("has an invalid IPv4 address")?))
        } else if !dns_name_ok(&name) {
            return Err("has an invalid host name".into());
        } else if name == "localhost" || name.ends_with(".localhost") {
            Host::Localhost
        } else {
            Host::Name(name)
        };
        (host, port)
    };
    let port = match port {
        None | Some("") => match scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        },
        Some(p) if p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err("has a port outside 1–65535".into()),
        },
        Some(_) => return Err("has an invalid port".into()),
    };
    match &host {
        Host::Ip(ip) => {
            if let Some(why) = address_refusal(scheme, *ip) {
                return Err(why);
            }
        }
        Host::Localhost => {}
        Host::Name(_) if scheme == Scheme::Http => {
            return Err("plain http:// is only for a loopback address; use https:// for a name".into());
        }
        Host::Name(_) => {}
    }
    let path = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok(Webhook {
        scheme,
        host,
        port,
        path,
    })
}

/// `AuthenticationInfo` (A2A v1.0 §4.3.2): the scheme and credentials sent as `Authorization`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth {
    pub scheme: String,
    /// The caller's, passed on to its webhook ([`Secret::passed_on`]).
    pub credentials: Secret,
}

/// A `TaskPushNotificationConfig` as CreateTaskPushNotificationConfig (or SendMessage's
/// `configuration.taskPushNotificationConfig`) gives it, validated. Its token and credentials are
/// [`Secret`]s: revealed where the delivery writes its headers, and to the caller that may see
/// the config (A2A shows a config as it was given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigParams {
    /// `taskId`; absent inside SendMessage, where the task is the new one.
    pub task_id: Option<String>,
    /// `id`; absent or empty, the door gives one.
    pub id: Option<String>,
    /// The URL as written, and as read.
    pub url: String,
    pub webhook: Webhook,
    /// `token`, sent as `X-A2A-Notification-Token`; the caller's, passed on to its webhook.
    pub token: Option<Secret>,
    pub auth: Option<Auth>,
}

/// A refused parameter: its JSON path and why (the door answers `-32602` naming it).
pub type ParamRefusal = (String, String);

/// The proto field name of a JSON field name (`taskId` → `task_id`).
fn proto_name(json_name: &str) -> String {
    let mut out = String::with_capacity(json_name.len() + 4);
    for c in json_name.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The value of field `key` (its JSON name) in a request object, read under its JSON name or its
/// proto field name: ProtoJSON, which A2A's JSON follows (§5.5, ADR-001), has parsers accept
/// both ("Parsers accept both the lowerCamelCase name … and the original proto field name"), as
/// the official SDKs' servers do. Both at once is refused, as a field given twice.
pub fn field<'a>(obj: &'a Map<String, Value>, prefix: &str, key: &str) -> Result<Option<&'a Value>, ParamRefusal> {
    let proto = proto_name(key);
    match (obj.get(key), obj.get(&proto).filter(|_| proto != key)) {
        (Some(_), Some(_)) => Err((
            format!("{prefix}{key}"),
            format!("is given twice, as {key} and as {proto}"),
        )),
        (v, None) | (None, v) => Ok(v),
    }
}

fn string_field<'a>(
    obj: &'a Map<String, Value>,
    prefix: &str,
    key: &str,
    max: usize,
) -> Result<Option<&'a str>, ParamRefusal> {
    let path = || format!("{prefix}{key}");
    match field(obj, prefix, key)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.len() > max => Err((path(), format!("is over {max} bytes"))),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err((path(), "must be a string".into())),
    }
}

/// RFC 9110 `token`: an authentication scheme's characters.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A header value's characters: printable ASCII and spaces inside, so no CR or LF can split it.
fn is_header_value(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_graphic() || b == b' ') && !s.starts_with(' ') && !s.ends_with(' ')
}

/// Reads a `TaskPushNotificationConfig` object; `prefix` is its path in the params (`""`, or
/// `configuration.taskPushNotificationConfig.`), for the refusal's field name.
pub fn parse_config(obj: &Map<String, Value>, prefix: &str) -> Result<ConfigParams, ParamRefusal> {
    let task_id = string_field(obj, prefix, "taskId", MAX_ID_BYTES)?.map(str::to_string);
    let id = string_field(obj, prefix, "id", MAX_ID_BYTES)?
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if id.as_deref().is_some_and(|i| i.chars().any(char::is_control)) {
        return Err((format!("{prefix}id"), "holds a control character".into()));
    }
    let Some(url) = string_field(obj, prefix, "url", MAX_URL_BYTES)? else {
        return Err((format!("{prefix}url"), "is required".into()));
    };
    let webhook = check_url(url).map_err(|why| (format!("{prefix}url"), why))?;
    let token = string_field(obj, prefix, "token", MAX_SECRET_BYTES)?.filter(|s| !s.is_empty());
    if token.is_some_and(|t| !is_header_value(t)) {
        return Err((
            format!("{prefix}token"),
            "must be printable ASCII (it is sent as a header)".into(),
        ));
    }
    let token = token.map(|t| Secret::passed_on(t.to_string()));
    let auth = match obj.get("authentication") {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            let at = format!("{prefix}authentication.");
            let scheme = string_field(a, &at, "scheme", MAX_ID_BYTES)?.unwrap_or_default();
            if !is_token(scheme) {
                return Err((
                    format!("{at}scheme"),
                    "must be an HTTP authentication scheme, such as Bearer".into(),
                ));
            }
            let credentials = string_field(a, &at, "credentials", MAX_SECRET_BYTES)?.unwrap_or_default();
            if credentials.is_empty() || !is_header_value(credentials) {
                return Err((
                    format!("{at}credentials"),
                    "must be non-empty printable ASCII (it is sent as Authorization)".into(),
                ));
            }
            Some(Auth {
                scheme: scheme.to_string(),
                credentials: Secret::passed_on(credentials.to_string()),
            })
        }
        Some(_) => return Err((format!("{prefix}authentication"), "must be an object".into())),
    };
    Ok(ConfigParams {
        task_id,
        id,
        url: url.to_string(),
        webhook,
        token,
        auth,
    })
}

/// What one delivery attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The webhook answered with this status.
    Status(u16),
    /// No status: refused address, connection failure, timeout, a broken reply.
    Failed,
}

/// What follows attempt number `made` (1 for the first) of an update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Try the same update again after this wait.
    Retry(Duration),
    /// Give the update up and go on with the next.
    GiveUp,
}

/// The retry plan: a 2xx delivers; a 4xx other than 408 and 429 is the webhook refusing that
/// update, not retried; anything else is retried after a wait that doubles from
/// [`FIRST_BACKOFF`] to [`MAX_BACKOFF`], [`ATTEMPTS`] attempts in all. A redirect is a failure
/// (never followed).
pub fn next(made: u32, attempt: Attempt) -> Next {
    match attempt {
        Attempt::Status(s) if (200..300).contains(&s) => return Next::Delivered,
        Attempt::Status(s) if (400..500).contains(&s) && s != 408 && s != 429 => return Next::GiveUp,
        _ => {}
    }
    if made >= ATTEMPTS {
        return Next::GiveUp;
    }
    let doubled = FIRST_BACKOFF.saturating_mul(1u32 << made.saturating_sub(1).min(16));
    Next::Retry(doubled.min(MAX_BACKOFF))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn addresses_are_classified_whatever_their_form() {
        let table: &[(&str, AddrClass)] = &[
            ("127.0.0.1", AddrClass::Loopback),
            ("127.9.8.7", AddrClass::Loopback),
            ("::1", AddrClass::Loopback),
            ("::ffff:127.0.0.1", AddrClass::Loopback),
            ("169.254.169.254", AddrClass::Metadata),
            ("169.254.170.2", AddrClass::Metadata),
            ("100.100.100.200", AddrClass::Metadata),
            ("fd00:ec2::254", AddrClass::Metadata),
            ("::ffff:169.254.169.254", AddrClass::Metadata),
            ("::169.254.169.254", AddrClass::Metadata),
            ("64:ff9b::a9fe:a9fe", AddrClass::Metadata),
            ("2002:a9fe:a9fe::1", AddrClass::Metadata),
            ("169.254.1.1", AddrClass::LinkLocal),
            ("fe80::1", AddrClass::LinkLocal),
            ("febf::1", AddrClass::LinkLocal),
            ("fec0::1", AddrClass::LinkLocal),
            ("0.0.0.0", AddrClass::Unspecified),
            ("0.1.2.3", AddrClass::Unspecified),
            ("::", AddrClass::Unspecified),
            ("::ffff:0.0.0.0", AddrClass::Unspecified),
            ("224.0.0.1", AddrClass::Multicast),
            ("ff02::1", AddrClass::Multicast),
            ("255.255.255.255", AddrClass::Broadcast),
            ("93.184.215.14", AddrClass::Other),
            ("10.0.0.1", AddrClass::Other),
            ("100.100.100.201", AddrClass::Other),
            ("2001:db8::1", AddrClass::Other),
            ("fe00::1", AddrClass::Other),
        ];
        for (ip, class) in table {
            let ip: IpAddr = ip.parse().expect("an address");
            assert_eq!(classify(ip), *class, "{ip}");
        }
    }

    #[test]
    fn the_url_rule() {
        let ok: &[(&str, Scheme, Host, u16, &str)] = &[
            (
                "http://127.0.0.1:8080/hook?x=1",
                Scheme::Http,
                Host::Ip("127.0.0.1".parse().expect("ip")),
                8080,
                "/hook?x=1",
            ),
            (
                "HTTP://[::1]:9/",
                Scheme::Http,
                Host::Ip("::1".parse().expect("ip")),
                9,
                "/",
            ),
            ("http://localhost:7", Scheme::Http, Host::Localhost, 7, "/"),
            ("http://LocalHost.:7/a", Scheme::Http, Host::Localhost, 7, "/a"),
            ("http://a.localhost/", Scheme::Http, Host::Localhost, 80, "/"),
            // 2130706433, 0x7f.1, 0177.0.0.1 and 127.1 are all 127.0.0.1 to a URL parser.
            (
                "http://2130706433/",
                Scheme::Http,
                Host::Ip("127.0.0.1".parse().expect("ip")),
                80,
                "/",
            ),
            (
                "http://0x7f.1/",
                Scheme::Http,
                Host::Ip("127.0.0.1".parse().expect("ip")),
                80,
                "/",
            ),
            (
                "http://0177.0.0.1/",
                Scheme::Http,
                Host::Ip("127.0.0.1".parse().expect("ip")),
                80,
                "/",
            ),
            (
                "http://127.1/",
                Scheme::Http,
                Host::Ip("127.0.0.1".parse().expect("ip")),
                80,
                "/",
            ),
            (
                "https://hooks.example.com/a/b",
                Scheme::Https,
                Host::Name("hooks.example.com".into()),
                443,
                "/a/b",
            ),
            (
                "https://Hooks.Example.com.:8443?q",
                Scheme::Https,
                Host::Name("hooks.example.com".into()),
                8443,
                "/?q",
            ),
            (
                "https://93.184.215.14/",
                Scheme::Https,
                Host::Ip("93.184.215.14".parse().expect("ip")),
                443,
                "/",
            ),
        ];
        for (url, scheme, host, port, path) in ok {
            let w = check_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(
                (w.scheme, &w.host, w.port, w.path.as_str()),
                (*scheme, host, *port, *path),
                "{url}"
            );
        }
        let refused: &[(&str, &str)] = &[
            ("http://169.254.169.254/", "cloud metadata"),
            ("https://169.254.169.254/latest", "cloud metadata"),
            ("https://[fd00:ec2::254]/", "cloud metadata"),
            ("https://100.100.100.200/", "cloud metadata"),
            ("http://[fe80::1]/", "link-local"),
            ("https://[fe80::1]/", "link-local"),
            ("https://[::ffff:169.254.169.254]/", "cloud metadata"),
            ("https://[::ffff:a9fe:a9fe]/", "cloud metadata"),
            ("https://2852039166/", "cloud metadata"),
            ("https://0xa9.0xfe.0xa9.0xfe/", "cloud metadata"),
            ("https://0251.0376.0251.0376/", "cloud metadata"),
            ("https://169.254.43518/", "cloud metadata"),
            ("https://0xA9FEA9FE/", "cloud metadata"),
            ("https://0.0.0.0/", "unspecified"),
            ("https://0/", "unspecified"),
            ("https://[::]/", "unspecified"),
            ("https://224.0.0.1/", "multicast"),
            ("https://255.255.255.255/", "broadcast"),
            ("http://example.com/hook", "only for a loopback"),
            ("http://10.0.0.1/hook", "only for a loopback"),
            ("http://[2001:db8::1]/", "only for a loopback"),
            ("ftp://127.0.0.1/", "must be https"),
            ("file:///etc/passwd", "must be https"),
            ("127.0.0.1:80/hook", "absolute"),
            ("//127.0.0.1/", "absolute"),
            ("http://user:pw@127.0.0.1/", "credentials"),
            ("http://127.0.0.1@169.254.169.254/", "credentials"),
            ("http://127.0.0.1\\@169.254.169.254/", "backslash"),
            ("http://127.0.0.1 /", "printable"),
            ("http://127.0.0.1/\u{e9}", "printable"),
            ("http://127.0.0.1/#frag", "fragment"),
            ("http://127.0.0.1:0/", "port"),
            ("http://127.0.0.1:65536/", "port"),
            ("http://127.0.0.1:8x/", "port"),
            ("http://127.0.0.1:1:2/", "port"),
            ("http://[::1/", "unclosed"),
            ("http://[::1%25lo]/", "IPv6"),
            ("http://[::1]x/", "after its IPv6"),
            ("http:///hook", "no host"),
            ("http://256.0.0.1/", "invalid IPv4"),
            ("http://1.2.3.4.5/", "invalid IPv4"),
            // Not a number to a URL parser, so a name, and a name over plain http is refused.
            ("http://0x1g/", "only for a loopback"),
            ("http://09.0.0.1/", "invalid IPv4"),
            ("https://-bad.example/", "invalid host name"),
            ("https://under_score.example/", "invalid host name"),
        ];
        for (url, why) in refused {
            let e = check_url(url).map(|w| format!("{w:?}")).expect_err(url);
            assert!(e.contains(why), "{url}: {e}");
        }
        let long = format!("https://a.example/{}", "x".repeat(MAX_URL_BYTES));
        assert!(check_url(&long).is_err());
    }

    #[test]
    fn every_resolved_address_must_pass() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        assert_eq!(
            resolved_refusal(Scheme::Https, "a.example", &[ip("93.184.215.14")]),
            None
        );
        assert_eq!(
            resolved_refusal(Scheme::Http, "a.example", &[ip("127.0.0.1"), ip("::1")]),
            None
        );
        let mixed = [ip("93.184.215.14"), ip("169.254.169.254")];
        assert!(resolved_refusal(Scheme::Https, "a.example", &mixed).is_some_and(|e| e.contains("metadata")));
        assert!(resolved_refusal(Scheme::Http, "a.example", &[ip("10.1.1.1")]).is_some());
        assert!(resolved_refusal(Scheme::Https, "a.example", &[]).is_some_and(|e| e.contains("no address")));
    }

    #[test]
    fn request_urls_name_the_host_as_written() {
        let w = check_url("https://Hooks.Example.com/a?b").expect("ok");
        assert_eq!(w.request_url(), "https://hooks.example.com/a?b");
        let w = check_url("http://0x7f.1:9/").expect("ok");
        assert_eq!(w.request_url(), "http://127.0.0.1:9/");
        let w = check_url("http://[::1]:9").expect("ok");
        assert_eq!(w.request_url(), "http://[::1]:9/");
    }

    #[test]
    fn config_params() {
        let obj = |v: Value| v.as_object().cloned().expect("an object");
        let c = parse_config(
            &obj(
                json!({"taskId": "tsk_1", "id": "c1", "url": "http://127.0.0.1:5/h", "token": "tok-1",
                "authentication": {"scheme": "Bearer", "credentials": "abc def"}}),
            ),
            "",
        )
        .expect("valid");
        assert_eq!(
            (
                c.task_id.as_deref(),
                c.id.as_deref(),
                c.token.as_ref().map(Secret::reveal)
            ),
            (Some("tsk_1"), Some("c1"), Some("tok-1"))
        );
        assert_eq!(
            c.auth,
            Some(Auth {
                scheme: "Bearer".into(),
                credentials: Secret::passed_on("abc def".into())
            })
        );
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("tok-1") && !dbg.contains("abc def"), "{dbg}");
        let c = parse_config(&obj(json!({"url": "http://localhost:5", "id": "", "token": ""})), "").expect("valid");
        assert_eq!((c.id, c.token, c.auth), (None, None, None));
        // ProtoJSON: the proto field name reads as the JSON name.
        let c = parse_config(&obj(json!({"task_id": "tsk_2", "url": "http://localhost:5"})), "").expect("valid");
        assert_eq!(c.task_id.as_deref(), Some("tsk_2"));

        let p = "configuration.taskPushNotificationConfig.";
        let table: &[(Value, &str, &str)] = &[
            (json!({}), "url", "required"),
            (json!({"url": 5}), "url", "string"),
            (json!({"url": "http://169.254.169.254/"}), "url", "metadata"),
            (json!({"url": "http://example.com/hook"}), "url", "loopback"),
            (json!({"url": "http://[fe80::1]/"}), "url", "link-local"),
            (json!({"url": "http://127.0.0.1/", "taskId": 1}), "taskId", "string"),
            (json!({"url": "http://127.0.0.1/", "task_id": 1}), "taskId", "string"),
            (
                json!({"url": "http://127.0.0.1/", "taskId": "a", "task_id": "b"}),
                "taskId",
                "twice",
            ),
            (
                json!({"url": "http://127.0.0.1/", "id": "x".repeat(MAX_ID_BYTES + 1)}),
                "id",
                "bytes",
            ),
            (json!({"url": "http://127.0.0.1/", "id": "a\nb"}), "id", "control"),
            (
                json!({"url": "http://127.0.0.1/", "token": "a\r\nX-Evil: 1"}),
                "token",
                "printable",
            ),
            (
                json!({"url": "http://127.0.0.1/", "token": "t".repeat(MAX_SECRET_BYTES + 1)}),
                "token",
                "bytes",
            ),
            (
                json!({"url": "http://127.0.0.1/", "authentication": []}),
                "authentication",
                "object",
            ),
            (
                json!({"url": "http://127.0.0.1/", "authentication": {"credentials": "x"}}),
                "authentication.scheme",
                "scheme",
            ),
            (
                json!({"url": "http://127.0.0.1/", "authentication": {"scheme": "Bea rer", "credentials": "x"}}),
                "authentication.scheme",
                "scheme",
            ),
            (
                json!({"url": "http://127.0.0.1/", "authentication": {"scheme": "Bearer"}}),
                "authentication.credentials",
                "non-empty",
            ),
            (
                json!({"url": "http://127.0.0.1/", "authentication": {"scheme": "Bearer", "credentials": "a\nb"}}),
                "authentication.credentials",
                "printable",
            ),
        ];
        for (params, field, why) in table {
            let (f, w) = parse_config(&obj(params.clone()), p).expect_err(&params.to_string());
            assert_eq!(f, format!("{p}{field}"), "{params}");
            assert!(w.contains(why), "{params}: {w}");
        }
    }

    #[test]
    fn the_retry_plan() {
        let s = Duration::from_secs;
        let table: &[(u32, Attempt, Next)] = &[
            (1, Attempt::Status(200), Next::Delivered),
            (3, Attempt::Status(204), Next::Delivered),
            (1, Attempt::Status(500), Next::Retry(s(1))),
            (2, Attempt::Status(503), Next::Retry(s(2))),
            (3, Attempt::Failed, Next::Retry(s(4))),
            (4, Attempt::Status(429), Next::Retry(s(8))),
            (4, Attempt::Status(408), Next::Retry(s(8))),
            (5, Attempt::Status(500), Next::GiveUp),
            (9, Attempt::Failed, Next::GiveUp),
            (1, Attempt::Status(302), Next::Retry(s(1))),
            (1, Attempt::Status(404), Next::GiveUp),
            (1, Attempt::Status(401), Next::GiveUp),
            (1, Attempt::Status(100), Next::Retry(s(1))),
        ];
        for (made, attempt, want) in table {
            assert_eq!(next(*made, *attempt), *want, "{made} {attempt:?}");
        }
        // The waits stay within the cap and the attempts within the bound, whatever is asked.
        let total: Duration = (1..ATTEMPTS)
            .map(|n| match next(n, Attempt::Failed) {
                Next::Retry(d) => d,
                other => panic!("{other:?}"),
            })
            .sum();
        assert_eq!(total, s(1 + 2 + 4 + 8));
    }
}
