//! Formation channel lines (docs/reference/formation.md#the-formation-channel). Pure.
//!
//! Error texts are the `<reason>` of E-RUN-046 (docs/reference/formation.md#member-intake) or the
//! `<why>` of an ignored address line. They never quote a token, and quote other values only
//! briefly.

use serde_json::{Map, Value};

use crate::ids::{self, IdKind};
use crate::names;
use crate::secret::Secret;
use crate::token::{self, VerifyKey};

/// Longest line the channel carries, without its `\n`.
pub const MAX_LINE: usize = 1 << 20;

/// The launcher's identity, for `mur stop` to re-verify it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LauncherId {
    pub pid: u32,
    /// Clock ticks since boot, as procfs reports it; non-empty.
    pub process_start: String,
}

/// One member this member may call, with the formation token for that edge: a [`Secret`],
/// revealed only to write the line ([`FirstLine::to_line`]), check it and send it in a call's
/// `Authorization`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    pub token: Secret,
}

/// The first line: the member's credentials (every token a [`Secret`], so `Debug` shows none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FirstLine {
    pub formation_id: String,
    pub member: String,
    /// Absent when the launcher could not read its own start time.
    pub launcher: Option<LauncherId>,
    pub entry: bool,
    /// The formation's verify key as B64 (43 characters). A public key, not a credential: it
    /// only checks tokens, and it may be shown; so it is a plain string, not a [`Secret`].
    pub verify_key: String,
    /// Callees in roster order.
    pub calls: Vec<Call>,
}

/// `pid` bound of docs/reference/formation.md#member-intake.
const MAX_PID: u64 = (1 << 31) - 1;

/// The refusal of a first line whose `verify_key` does not decode, when it is read and when its
/// tokens are checked.
const BAD_VERIFY_KEY: &str = "its first line's `verify_key` is not a verification key (43 base64url characters)";

impl FirstLine {
    /// The names of the members this one may call, in roster order: the one place a session
    /// learns its callees.
    pub fn callees(&self) -> Vec<String> {
        self.calls.iter().map(|c| c.name.clone()).collect()
    }

    /// Its callees' names ([`FirstLine::callees`]), or none outside a formation.
    pub fn callees_of(first: Option<&FirstLine>) -> Vec<String> {
        first.map(FirstLine::callees).unwrap_or_default()
    }

    /// The fixed key order of docs/reference/formation.md#the-formation-channel, compact, with its
    /// `\n`.
    pub fn to_line(&self) -> String {
        let mut s = String::with_capacity(256 + self.calls.len() * 256);
        s.push_str("{\"formation_id\":");
        s.push_str(&json_str(&self.formation_id));
        s.push_str(",\"member\":");
        s.push_str(&json_str(&self.member));
        if let Some(l) = &self.launcher {
            s.push_str(&format!(
                ",\"launcher\":{{\"pid\":{},\"process_start\":{}}}",
                l.pid,
                json_str(&l.process_start)
            ));
        }
        if self.entry {
            s.push_str(",\"entry\":true");
        }
        s.push_str(",\"verify_key\":");
        s.push_str(&json_str(&self.verify_key));
        s.push_str(",\"calls\":[");
        for (i, c) in self.calls.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            s.push_str(&format!(
                "{{\"name\":{},\"token\":{}}}",
                json_str(&c.name),
                json_str(c.token.reveal())
            ));
        }
        s.push_str("]}\n");
        s
    }

    /// Reads a first line (its `\n` and a trailing `\r` optional). Key order is not checked;
    /// unknown keys are ignored. Tokens are only checked by [`FirstLine::check_tokens`].
    pub fn parse(line: &str) -> Result<FirstLine, String> {
        let obj = parse_object(line).map_err(|why| format!("its first line {why}"))?;
        let formation_id = req_str(&obj, "formation_id")?;
        ids::check(IdKind::Formation, formation_id)
            .map_err(|e| format!("its first line's `formation_id` is not a formation id: {e}"))?;
        let member = req_str(&obj, "member")?;
        names::check_member(member).map_err(|e| format!("its first line's `member` is not a member name: it {e}"))?;
        let launcher = match obj.get("launcher") {
            None | Some(Value::Null) => None,
            Some(Value::Object(l)) => Some(parse_launcher(l)?),
            Some(_) => {
                return Err("its first line's `launcher` must be an object with `pid` and `process_start`".into());
            }
        };
        let entry = match obj.get("entry") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err("its first line's `entry` must be true or false".into()),
        };
        let verify_key = req_str(&obj, "verify_key")?;
        if VerifyKey::from_b64(verify_key).is_none() {
            return Err(BAD_VERIFY_KEY.into());
        }
        let calls = match obj.get("calls") {
            Some(Value::Array(a)) => a,
            None | Some(Value::Null) => return Err("its first line has no `calls`".into()),
            Some(_) => return Err("its first line's `calls` must be a list".into()),
        };
        let mut out = Vec::with_capacity(calls.len());
        // A member of a 256-member `all` formation has 255 calls: looking each name up among the
        // earlier ones would be 32 000 comparisons.
        let mut seen = std::collections::HashSet::with_capacity(calls.len());
        for (i, c) in calls.iter().enumerate() {
            let c = c
                .as_object()
                .ok_or_else(|| format!("its first line's `calls[{i}]` must be an object"))?;
            let Some(Value::String(name)) = c.get("name") else {
                return Err(format!("its first line's `calls[{i}].name` must be a string"));
            };
            names::check_member(name)
                .map_err(|e| format!("its first line's `calls[{i}].name` is not a member name: it {e}"))?;
            if !seen.insert(name.as_str()) {
                return Err(format!("its first line's `calls[{i}].name` repeats '{name}'"));
            }
            let Some(Value::String(tok)) = c.get("token") else {
                return Err(format!("its first line's `calls[{i}].token` must be a string"));
            };
            // The member holds its tokens from here: its scrub replaces them in foreign text.
            out.push(Call {
                name: name.clone(),
                token: Secret::new(tok.clone()),
            });
        }
        Ok(FirstLine {
            formation_id: formation_id.into(),
            member: member.into(),
            launcher,
            entry,
            verify_key: verify_key.into(),
            calls: out,
        })
    }

    /// The verify key, decoded.
    pub fn key(&self) -> Option<VerifyKey> {
        VerifyKey::from_b64(&self.verify_key)
    }

    /// docs/reference/formation.md#member-intake: every call token verifies under the line's own
    /// key, with `formation` = `formation_id`, `from` = `member`, `to` = the call's `name`.
    pub fn check_tokens(&self) -> Result<(), String> {
        let key = self.key().ok_or(BAD_VERIFY_KEY)?;
        let calls = self.calls.iter().map(|c| (c.name.as_str(), c.token.reveal()));
        token::formation::verify_issued(&key, &self.formation_id, &self.member, calls).map_err(|i| {
            format!(
                "its first line's calls[{i}].token was not issued to this member for that callee under the line's own key"
            )
        })
    }
}

fn parse_launcher(l: &Map<String, Value>) -> Result<LauncherId, String> {
    let pid = l
        .get("pid")
        .and_then(Value::as_u64)
        .filter(|p| (1..=MAX_PID).contains(p))
        .and_then(|p| u32::try_from(p).ok())
        .ok_or_else(|| format!("its first line's `launcher.pid` must be an integer from 1 to {MAX_PID}"))?;
    let process_start = match l.get("process_start") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ => {
            return Err("its first line's `launcher.process_start` must be a non-empty string".into());
        }
    };
    Ok(LauncherId { pid, process_start })
}

fn req_str<'a>(obj: &'a Map<String, Value>, key: &str) -> Result<&'a str, String> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(format!("its first line has no `{key}`")),
        Some(_) => Err(format!("its first line's `{key}` must be a string")),
    }
}

/// One door address a member may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    pub name: String,
    /// `http://host:port`.
    pub url: String,
    /// The door's identity as the launcher vouches for it [ours], when it sent one: callers then
    /// reach the door only through its Unix socket, served by exactly that process.
    pub door: Option<DoorIdentity>,
    /// The public half of the key the door signs its agent card with, as the launcher's
    /// readiness probe learned it from the member's own process [ours]: 43 characters of
    /// base64url, as `verify_key` (docs/reference/door.md#agent-card).
    pub card_key: Option<String>,
}

/// Where a peer's door listens inside the formation's owner-only directory, and the process
/// that must serve it (pid and start token, so a reused pid is not taken for it).
///
/// A TCP port on 127.0.0.1 is anyone's to bind once its member exits; a Unix socket in a 0700
/// directory is not reachable by another user, and its server's pid is the kernel's to tell
/// (`SO_PEERCRED`), so a caller that checks it sends its token and task to that member only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorIdentity {
    /// Absolute path of the door's Unix socket.
    pub socket: String,
    pub pid: u32,
    /// The process's start token (`procinfo::process_start`); empty when it could not be read.
    pub start: String,
}

/// An address line as read: door addresses, and members withdrawn because their process ended
/// while the formation goes on [ours].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddressLine {
    pub addresses: Vec<Address>,
    pub withdrawn: Vec<String>,
}

/// `{"addresses":[{"name":…,"url":…},…]}` with its `\n`, in the order given. An address with a
/// door identity adds `"door":{"socket":…,"pid":…,"start":…}`, one with a card key
/// `"card_key":…`; a member's runtime that does not know a key reads the address as before.
pub fn address_line(addrs: &[Address]) -> String {
    withdrawal_line(addrs, &[])
}

/// An address line that also withdraws `gone` (`"withdrawn":[…]` after the list, which stays
/// present, so a runtime that does not know the key reads an ordinary line).
pub fn withdrawal_line(addrs: &[Address], gone: &[&str]) -> String {
    let items: Vec<String> = addrs
        .iter()
        .map(|a| {
            let door = a.door.as_ref().map_or(String::new(), |d| {
                format!(
                    ",\"door\":{{\"pid\":{},\"socket\":{},\"start\":{}}}",
                    d.pid,
                    json_str(&d.socket),
                    json_str(&d.start)
                )
            });
            let card_key = a
                .card_key
                .as_ref()
                .map_or(String::new(), |k| format!(",\"card_key\":{}", json_str(k)));
            format!(
                "{{\"name\":{},\"url\":{}{door}{card_key}}}",
                json_str(&a.name),
                json_str(&a.url)
            )
        })
        .collect();
    if gone.is_empty() {
        return format!("{{\"addresses\":[{}]}}\n", items.join(","));
    }
    let gone: Vec<String> = gone.iter().map(|g| json_str(g)).collect();
    format!(
        "{{\"addresses\":[{}],\"withdrawn\":[{}]}}\n",
        items.join(","),
        gone.join(",")
    )
}

/// Reads an address line. One bad entry makes the whole line unreadable (the caller logs and
/// ignores it). Names are not checked here: names that are not callees are ignored by the caller.
pub fn parse_address_line(line: &str) -> Result<AddressLine, String> {
    let obj = parse_object(line).map_err(|why| format!("the line {why}"))?;
    let Some(Value::Array(list)) = obj.get("addresses") else {
        return Err("the line has no `addresses` list".into());
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, a) in list.iter().enumerate() {
        let (Some(Value::String(name)), Some(Value::String(url))) = (a.get("name"), a.get("url")) else {
            return Err(format!(
                "`addresses[{i}]` is not an object with a string `name` and `url`"
            ));
        };
        if !is_door_url(url) {
            return Err(format!("`addresses[{i}].url` {} is not http://host:port", brief(url)));
        }
        let door = match a.get("door") {
            None | Some(Value::Null) => None,
            Some(d) => Some(parse_door(d).ok_or_else(|| {
                format!("`addresses[{i}].door` is not an object with an absolute `socket`, a `pid` and a `start`")
            })?),
        };
        let card_key = match a.get("card_key") {
            None | Some(Value::Null) => None,
            Some(Value::String(k)) if crate::card_sig::CardVerifyKey::from_b64(k).is_some() => Some(k.clone()),
            Some(_) => {
                return Err(format!(
                    "`addresses[{i}].card_key` is not an Ed25519 public key in base64url"
                ));
            }
        };
        out.push(Address {
            name: name.clone(),
            url: url.clone(),
            door,
            card_key,
        });
    }
    let withdrawn = match obj.get("withdrawn") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| n.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>()
            .ok_or("`withdrawn` is not a list of names")?,
        Some(_) => return Err("`withdrawn` is not a list of names".into()),
    };
    Ok(AddressLine {
        addresses: out,
        withdrawn,
    })
}

fn parse_door(d: &Value) -> Option<DoorIdentity> {
    let socket = d.get("socket")?.as_str()?;
    let pid = u32::try_from(d.get("pid")?.as_u64()?).ok().filter(|&p| p > 0)?;
    let start = d.get("start")?.as_str()?;
    // A Unix socket path is at most a few hundred bytes, never relative, and never a NUL.
    let path_ok = socket.starts_with('/') && socket.len() <= 4096 && !socket.contains('\0');
    let start_ok = start.len() <= 32 && start.bytes().all(|b| b.is_ascii_digit());
    (path_ok && start_ok).then(|| DoorIdentity {
        socket: socket.to_string(),
        pid,
        start: start.to_string(),
    })
}

/// `http://host:port`: port 1–65535; host of letters, digits, `.`, `-`, or a bracketed IP.
fn is_door_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (host_ok, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((ip, after)) = bracketed.split_once(']') else {
            return false;
        };
        let Some(port) = after.strip_prefix(':') else {
            return false;
        };
        (ip.parse::<std::net::IpAddr>().is_ok(), port)
    } else {
        let Some((host, port)) = rest.split_once(':') else {
            return false;
        };
        let ok = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
        (ok, port)
    };
    let port_ok = (1..=5).contains(&port.len())
        && port.bytes().all(|b| b.is_ascii_digit())
        && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p));
    host_ok && port_ok
}

/// The socket a door URL names, for a client to connect to without resolving a name.
///
/// Doors bind 127.0.0.1 but are advertised as `localhost` (readiness line, address lines). A
/// client that resolved `localhost` would, where /etc/hosts lists `::1` first, dial `[::1]:P`,
/// where any local user may listen and receive the bearer token and the task. So every client
/// dials the socket this returns: `http://localhost:P` and `http://127.0.0.1:P` are 127.0.0.1:P,
/// and anything else is not a door a formation serves (`None`).
pub fn door_socket(url: &str) -> Option<std::net::SocketAddr> {
    let rest = url.strip_prefix("http://")?;
    let (host, port) = rest.split_once(':')?;
    if host != "localhost" && host != "127.0.0.1" {
        return None;
    }
    if !(1..=5).contains(&port.len()) || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let port = port.parse::<u16>().ok().filter(|&p| p != 0)?;
    Some(std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port)))
}

/// A `\n`-terminated (or bare) line as a JSON object; the error reads after "its first line" /
/// "the line".
fn parse_object(line: &str) -> Result<Map<String, Value>, String> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err("is longer than 1 MiB".into());
    }
    // serde_json's syntax errors name a position, never the text, so no token leaks through them.
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("is not a JSON object".into()),
        Err(e) => Err(format!("is not JSON ({e})")),
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A value quoted for a message, cut short so a hostile line cannot flood the log.
fn brief(s: &str) -> String {
    const MAX: usize = 80;
    if s.chars().count() <= MAX {
        format!("'{s}'")
    } else {
        format!("'{}…'", s.chars().take(MAX).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::SigningKey;

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";

    fn sample(key: &SigningKey) -> FirstLine {
        FirstLine {
            formation_id: FRM.into(),
            member: "planner".into(),
            launcher: Some(LauncherId {
                pid: 4242,
                process_start: "123456".into(),
            }),
            entry: true,
            verify_key: key.verify_key().to_b64(),
            calls: vec![
                Call {
                    name: "coder".into(),
                    token: Secret::new(key.mint(FRM, "planner", "coder")),
                },
                Call {
                    name: "reviewer".into(),
                    token: Secret::new(key.mint(FRM, "planner", "reviewer")),
                },
            ],
        }
    }

    #[test]
    fn first_line_layout_is_the_fixed_order() {
        let key = SigningKey::generate().unwrap();
        let mut fl = sample(&key);
        fl.calls.truncate(1);
        let want = format!(
            r#"{{"formation_id":"{FRM}","member":"planner","launcher":{{"pid":4242,"process_start":"123456"}},"entry":true,"verify_key":"{}","calls":[{{"name":"coder","token":"{}"}}]}}"#,
            fl.verify_key,
            fl.calls[0].token.reveal()
        ) + "\n";
        assert_eq!(fl.to_line(), want);
        fl.launcher = None;
        fl.entry = false;
        fl.calls.clear();
        assert_eq!(
            fl.to_line(),
            format!(
                r#"{{"formation_id":"{FRM}","member":"planner","verify_key":"{}","calls":[]}}"#,
                fl.verify_key
            ) + "\n"
        );
    }

    #[test]
    fn first_line_round_trip_and_token_check() {
        let key = SigningKey::generate().unwrap();
        let fl = sample(&key);
        let back = FirstLine::parse(&fl.to_line()).unwrap();
        assert_eq!(back, fl);
        assert_eq!(back.check_tokens(), Ok(()));
        let crlf = fl.to_line().replace('\n', "\r\n");
        assert_eq!(FirstLine::parse(&crlf).unwrap(), fl);
        // Reordered keys and an unknown key are read all the same.
        let reordered = format!(
            r#"{{"calls":[],"verify_key":"{}","x":1,"member":"planner","formation_id":"{FRM}","entry":false}}"#,
            fl.verify_key
        );
        let r = FirstLine::parse(&reordered).unwrap();
        assert!(!r.entry && r.launcher.is_none() && r.calls.is_empty());
    }

    #[test]
    fn debug_redacts_tokens() {
        let key = SigningKey::generate().unwrap();
        let fl = sample(&key);
        let dbg = format!("{fl:?}");
        assert!(!dbg.contains("mft1"), "{dbg}");
        assert!(dbg.contains("Secret([redacted])") && dbg.contains("coder"));
    }

    #[test]
    fn malformed_first_lines_give_their_reason() {
        let key = SigningKey::generate().unwrap();
        let vk = key.verify_key().to_b64();
        let line = |body: &str| format!(r#"{{"formation_id":"{FRM}","member":"planner","verify_key":"{vk}"{body}}}"#);
        let big = format!(r#"{{"x":"{}"}}"#, "a".repeat(MAX_LINE));
        let table: Vec<(String, &str)> = vec![
            (
                "not json".into(),
                "its first line is not JSON (expected ident at line 1 column 2)",
            ),
            ("[1]".into(), "its first line is not a JSON object"),
            (big, "its first line is longer than 1 MiB"),
            (r#"{"member":"a"}"#.into(), "its first line has no `formation_id`"),
            (
                r#"{"formation_id":1}"#.into(),
                "its first line's `formation_id` must be a string",
            ),
            (
                r#"{"formation_id":"ses_0199c4e2f1b7712a9d3e4f5061728394"}"#.into(),
                "its first line's `formation_id` is not a formation id: it does not start with `frm_`",
            ),
            (
                format!(r#"{{"formation_id":"{FRM}","member":"Planner"}}"#),
                "its first line's `member` is not a member name: it must start with a lowercase letter",
            ),
            (
                line(r#","calls":[]"#).replace(&vk, "abc"),
                "its first line's `verify_key` is not a verification key (43 base64url characters)",
            ),
            (line(""), "its first line has no `calls`"),
            (line(r#","calls":{}"#), "its first line's `calls` must be a list"),
            (
                line(r#","calls":["coder"]"#),
                "its first line's `calls[0]` must be an object",
            ),
            (
                line(r#","calls":[{"token":"t"}]"#),
                "its first line's `calls[0].name` must be a string",
            ),
            (
                line(r#","calls":[{"name":"a_b","token":"t"}]"#),
                "its first line's `calls[0].name` is not a member name: it may hold only lowercase letters, digits and '-'",
            ),
            (
                line(r#","calls":[{"name":"a","token":"t"},{"name":"a","token":"u"}]"#),
                "its first line's `calls[1].name` repeats 'a'",
            ),
            (
                line(r#","calls":[{"name":"a","token":5}]"#),
                "its first line's `calls[0].token` must be a string",
            ),
            (
                line(r#","calls":[],"entry":"yes""#),
                "its first line's `entry` must be true or false",
            ),
            (
                line(r#","calls":[],"launcher":5"#),
                "its first line's `launcher` must be an object with `pid` and `process_start`",
            ),
            (
                line(r#","calls":[],"launcher":{"pid":0,"process_start":"1"}"#),
                "its first line's `launcher.pid` must be an integer from 1 to 2147483647",
            ),
            (
                line(r#","calls":[],"launcher":{"pid":2147483648,"process_start":"1"}"#),
                "its first line's `launcher.pid` must be an integer from 1 to 2147483647",
            ),
            (
                line(r#","calls":[],"launcher":{"pid":-1,"process_start":"1"}"#),
                "its first line's `launcher.pid` must be an integer from 1 to 2147483647",
            ),
            (
                line(r#","calls":[],"launcher":{"pid":1,"process_start":""}"#),
                "its first line's `launcher.process_start` must be a non-empty string",
            ),
        ];
        for (l, want) in &table {
            assert_eq!(
                FirstLine::parse(l).as_ref().map(|_| ()),
                Err(&want.to_string()),
                "{}",
                &l[..l.len().min(120)]
            );
        }
        assert!(
            FirstLine::parse(&line(
                r#","calls":[],"launcher":{"pid":2147483647,"process_start":"1"}"#
            ))
            .is_ok()
        );
    }

    #[test]
    fn tokens_not_issued_to_this_member_are_refused() {
        let key = SigningKey::generate().unwrap();
        let other = SigningKey::generate().unwrap();
        let reason = |i: usize| {
            format!(
                "its first line's calls[{i}].token was not issued to this member for that callee under the line's own key"
            )
        };
        let cases: Vec<(&str, String, usize)> = vec![
            ("another caller's token", key.mint(FRM, "reviewer", "coder"), 0),
            ("token for another callee", key.mint(FRM, "planner", "reviewer"), 0),
            (
                "another formation",
                key.mint("frm_0199c4e2f1b7712a9d3e4f5061728395", "planner", "coder"),
                0,
            ),
            ("another key", other.mint(FRM, "planner", "coder"), 0),
            ("garbage", "mft1.x.y".into(), 0),
        ];
        for (why, tok, i) in cases {
            let mut fl = sample(&key);
            fl.calls[i].token = Secret::new(tok);
            assert_eq!(fl.check_tokens(), Err(reason(i)), "{why}");
        }
        let mut fl = sample(&key);
        fl.calls[1].token = Secret::new(key.mint(FRM, "planner", "coder"));
        assert_eq!(fl.check_tokens(), Err(reason(1)));
    }

    #[test]
    fn address_lines() {
        let addrs = vec![
            Address {
                name: "coder".into(),
                url: "http://localhost:41873".into(),
                door: None,
                card_key: None,
            },
            Address {
                name: "reviewer".into(),
                url: "http://[::1]:8080".into(),
                door: None,
                card_key: None,
            },
        ];
        let l = address_line(&addrs);
        assert_eq!(
            l,
            "{\"addresses\":[{\"name\":\"coder\",\"url\":\"http://localhost:41873\"},{\"name\":\"reviewer\",\"url\":\"http://[::1]:8080\"}]}\n"
        );
        let read = |l: &str| parse_address_line(l).map(|a| a.addresses);
        assert_eq!(read(&l), Ok(addrs));
        assert_eq!(read("{\"addresses\":[]}\r\n"), Ok(vec![]));
        assert_eq!(address_line(&[]), "{\"addresses\":[]}\n");
    }

    /// A callee's card key [ours] (docs/reference/door.md#agent-card) rides on its address and
    /// reads back; anything but an Ed25519 key in base64url makes the line unreadable.
    #[test]
    fn card_keys_ride_on_addresses() {
        let key = crate::card_sig::CardKey::from_seed(&[5; 32]).public().to_b64();
        let coder = Address {
            name: "coder".into(),
            url: "http://localhost:41873".into(),
            door: None,
            card_key: Some(key.clone()),
        };
        let l = address_line(std::slice::from_ref(&coder));
        assert_eq!(
            l,
            format!(
                "{{\"addresses\":[{{\"name\":\"coder\",\"url\":\"http://localhost:41873\",\"card_key\":\"{key}\"}}]}}\n"
            )
        );
        assert_eq!(parse_address_line(&l).map(|a| a.addresses), Ok(vec![coder]));
        for bad in ["\"x\"", "3", "\"AAAA\""] {
            let l =
                format!("{{\"addresses\":[{{\"name\":\"coder\",\"url\":\"http://localhost:1\",\"card_key\":{bad}}}]}}");
            assert!(parse_address_line(&l).is_err(), "{bad}");
        }
    }

    #[test]
    fn vouched_doors_and_withdrawals_round_trip() {
        let coder = Address {
            name: "coder".into(),
            url: "http://localhost:41873".into(),
            door: Some(DoorIdentity {
                socket: "/home/u/.murmur/formations/frm_1/.doors/coder.sock".into(),
                pid: 4242,
                start: "918273".into(),
            }),
            card_key: None,
        };
        let l = withdrawal_line(std::slice::from_ref(&coder), &["reviewer"]);
        assert_eq!(
            l,
            "{\"addresses\":[{\"name\":\"coder\",\"url\":\"http://localhost:41873\",\"door\":{\"pid\":4242,\"socket\":\"/home/u/.murmur/formations/frm_1/.doors/coder.sock\",\"start\":\"918273\"}}],\"withdrawn\":[\"reviewer\"]}\n"
        );
        assert_eq!(
            parse_address_line(&l),
            Ok(AddressLine {
                addresses: vec![coder],
                withdrawn: vec!["reviewer".into()],
            })
        );
        let bad_doors = [
            "{\"pid\":1,\"socket\":\"relative.sock\",\"start\":\"1\"}",
            "{\"pid\":0,\"socket\":\"/a.sock\",\"start\":\"1\"}",
            "{\"pid\":-3,\"socket\":\"/a.sock\",\"start\":\"1\"}",
            "{\"pid\":1,\"socket\":\"/a.sock\",\"start\":\"x1\"}",
            "{\"pid\":1,\"socket\":\"/a.sock\"}",
            "\"/a.sock\"",
        ];
        for d in bad_doors {
            let l = format!("{{\"addresses\":[{{\"name\":\"a\",\"url\":\"http://localhost:1\",\"door\":{d}}}]}}");
            assert_eq!(
                parse_address_line(&l),
                Err("`addresses[0].door` is not an object with an absolute `socket`, a `pid` and a `start`".into()),
                "{d}"
            );
        }
        assert_eq!(
            parse_address_line("{\"addresses\":[],\"withdrawn\":[1]}"),
            Err("`withdrawn` is not a list of names".into())
        );
    }

    #[test]
    fn door_urls() {
        let good = [
            "http://localhost:1",
            "http://127.0.0.1:65535",
            "http://a-b.c:80",
            "http://[::1]:9",
            "http://[127.0.0.1]:9",
        ];
        for u in good {
            assert!(is_door_url(u), "{u}");
        }
        let bad = [
            "https://localhost:1",
            "http://localhost",
            "http://localhost:0",
            "http://localhost:65536",
            "http://localhost:+80",
            "http://localhost:080808",
            "http://:80",
            "http://local_host:80",
            "http://localhost:80/",
            "http://user@localhost:80",
            "http://[::1:80",
            "http://[nope]:80",
            "http://[::1]80",
            "HTTP://localhost:80",
        ];
        for u in bad {
            assert!(!is_door_url(u), "{u}");
        }
    }

    #[test]
    fn door_urls_are_dialled_at_127_0_0_1() {
        let at = |p: u16| Some(std::net::SocketAddr::from(([127, 0, 0, 1], p)));
        let table: &[(&str, Option<std::net::SocketAddr>)] = &[
            ("http://localhost:4242", at(4242)),
            ("http://127.0.0.1:4242", at(4242)),
            ("http://localhost:1", at(1)),
            ("http://localhost:65535", at(65535)),
            ("http://localhost:08080", at(8080)),
            // Never a name to resolve, never another loopback address.
            ("http://[::1]:4242", None),
            ("http://[127.0.0.1]:4242", None),
            ("http://127.0.0.2:4242", None),
            ("http://127.1:4242", None),
            ("http://LOCALHOST:4242", None),
            ("http://localhost.:4242", None),
            ("http://localhost.example.com:4242", None),
            ("http://example.com:4242", None),
            ("http://a-b.c:80", None),
            // Not http://host:port.
            ("https://localhost:4242", None),
            ("HTTP://localhost:4242", None),
            ("localhost:4242", None),
            ("http://localhost", None),
            ("http://localhost:", None),
            ("http://localhost:0", None),
            ("http://localhost:65536", None),
            ("http://localhost:123456", None),
            ("http://localhost:+80", None),
            ("http://localhost:80/", None),
            ("http://localhost:80:80", None),
            ("http://user@localhost:80", None),
            ("", None),
        ];
        for (url, want) in table {
            assert_eq!(door_socket(url), *want, "{url}");
        }
    }

    #[test]
    fn unreadable_address_lines_give_their_reason() {
        let long = format!("ftp://{}:1", "a".repeat(100));
        let table: Vec<(String, String)> = vec![
            (
                "nope".into(),
                "the line is not JSON (expected ident at line 1 column 2)".into(),
            ),
            ("[]".into(), "the line is not a JSON object".into()),
            ("{\"addr\":[]}".into(), "the line has no `addresses` list".into()),
            (
                "{\"addresses\":[{\"name\":\"a\"}]}".into(),
                "`addresses[0]` is not an object with a string `name` and `url`".into(),
            ),
            (
                "{\"addresses\":[{\"name\":\"a\",\"url\":\"http://x:1\"},{\"name\":\"b\",\"url\":\"ftp://x:1\"}]}"
                    .into(),
                "`addresses[1].url` 'ftp://x:1' is not http://host:port".into(),
            ),
            (
                format!("{{\"addresses\":[{{\"name\":\"a\",\"url\":\"{long}\"}}]}}"),
                format!("`addresses[0].url` '{}…' is not http://host:port", &long[..80]),
            ),
        ];
        for (l, want) in &table {
            assert_eq!(parse_address_line(l).as_ref(), Err(want), "{l}");
        }
    }
}
