//! Check 1 of admission: reading `roster.yaml` and refusing every shape fault with E-ROS-001.
//!
//! Messages are the [compatible] texts of docs/reference/roster.md#admission-in-order. The first
//! fault wins, in the order YAML syntax → top-level shape → top-level unknown keys →
//! `roster_version` → `members` → each member (unknown keys, `name`, `capsule`, `version`, `entry`)
//! → `reachability` (each rule: shape, unknown keys, `from`, `to`, self-call). Nothing here reads a
//! store.

use std::fmt::Display;
use std::io::Read;
use std::path::Path;

use super::{MemberDecl, Reachability, Roster, Rule};
use crate::diag::{Diagnostic, E_ROS_001, shown};
use crate::names::{self, ArtifactName, ArtifactNameError};
use crate::yaml::{self, Limits, Node, NodeKind};

/// The largest roster.yaml read; a real roster is a few hundred bytes.
pub const MAX_BYTES: usize = 1 << 20;

const TOP_KEYS: &[&str] = &["members", "reachability", "roster_version"];
const MEMBER_KEYS: &[&str] = &["capsule", "entry", "name", "version"];
const RULE_KEYS: &[&str] = &["from", "to"];
const ALIASES: &[&str] = &["latest", "stable", "edge"];

/// Reads and parses the roster file at `path`.
///
/// Anything that is not a readable regular file (absent, a directory, a dangling symlink, a FIFO,
/// unreadable, larger than [`MAX_BYTES`]) is refused with E-ROS-001 without blocking.
pub fn read(path: &Path) -> Result<super::Roster, Diagnostic> {
    parse(&read_bytes(path)?)
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, Diagnostic> {
    let failed = |why: &dyn Display| {
        Diagnostic::new(
            E_ROS_001,
            format!("failed to read roster.yaml at {}: {why}", path.display()),
        )
    };
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                Diagnostic::new(E_ROS_001, format!("roster.yaml not found at {}", path.display())).with_hint(
                    "run the command in the directory that holds roster.yaml, give its path (`--roster PATH`), \
                 or scaffold a formation with `mur new --roster NAME`",
                ),
            );
        }
        Err(e) => return Err(failed(&e)),
        Ok(meta) if meta.file_type().is_symlink() && std::fs::metadata(path).is_err() => {
            // A dangling link is listed by `ls`, so "not found" would mislead; name its target.
            let target = std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            return Err(failed(&format!(
                "it is a symbolic link to {target}, which does not exist"
            )));
        }
        Ok(_) => {}
    }
    // O_NONBLOCK so that a FIFO named roster.yaml cannot hang the open; the type is then checked
    // on the opened descriptor, so a swap between the check and the read changes nothing.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
            .map_err(|e| failed(&e))?
    };
    let meta = file.metadata().map_err(|e| failed(&e))?;
    if meta.is_dir() {
        return Err(failed(&"it is a directory"));
    }
    if !meta.is_file() {
        return Err(failed(&"it is not a regular file"));
    }
    let mut buf = Vec::new();
    file.take(MAX_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| failed(&e))?;
    if buf.len() > MAX_BYTES {
        return Err(failed(&format!("the file is larger than {MAX_BYTES} bytes")));
    }
    Ok(buf)
}

/// Parses roster.yaml bytes (check 1). Never panics; every refusal is E-ROS-001.
pub fn parse(bytes: &[u8]) -> Result<Roster, Diagnostic> {
    if bytes.len() > MAX_BYTES {
        return Err(syntax(1, 1, &format!("the file is larger than {MAX_BYTES} bytes")));
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(e) => {
            let (line, col) = position(&bytes[..e.valid_up_to()]);
            return Err(syntax(line, col, "the file is not UTF-8 text"));
        }
    };
    // YAML allows only printable characters in a stream; the parser would stop at a NUL and
    // silently ignore the rest of the file, so a raw control character is refused here.
    if let Some((at, c)) = text.char_indices().find(|&(_, c)| !printable(c)) {
        let (line, col) = position(&bytes[..at]);
        return Err(syntax(
            line,
            col,
            &format!(
                "the file holds the control character U+{:04X}, which YAML does not allow",
                c as u32
            ),
        ));
    }
    let limits = Limits {
        max_bytes: MAX_BYTES,
        ..Limits::default()
    };
    let root = yaml::load(text, limits).map_err(|e| syntax(e.line, e.col, &e.message))?;
    let Some(top) = root.as_map() else {
        return Err(Diagnostic::new(
            E_ROS_001,
            format!(
                "roster.yaml: must be a mapping with `roster_version` and `members`, found {}",
                root.shape()
            ),
        ));
    };
    if let Some(key) = first_unknown(top, TOP_KEYS) {
        return Err(fault(&shown(key), None, unknown_key("the top level", TOP_KEYS)));
    }
    roster_version(&root)?;
    let members = members(&root)?;
    let reachability = reachability(&root)?;
    Ok(Roster { members, reachability })
}

/// YAML 1.2 `c-printable`.
fn printable(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | ' '..='~' | '\u{85}' | '\u{A0}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        || c >= '\u{10000}'
}

/// 1-based line and column just after `prefix` (the valid part before a bad byte).
fn position(prefix: &[u8]) -> (usize, usize) {
    let text = std::str::from_utf8(prefix).unwrap_or("");
    let line = text.matches('\n').count() + 1;
    let col = text.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn syntax(line: usize, col: usize, err: &str) -> Diagnostic {
    Diagnostic::new(
        E_ROS_001,
        format!("roster.yaml: YAML syntax error at line {line}, column {col}: {err}"),
    )
}

/// `roster.yaml: <key path>[ (member '<name>')]: <problem>`.
fn fault(path: &str, member: Option<&str>, problem: impl Display) -> Diagnostic {
    let label = member.map(|m| format!(" (member '{m}')")).unwrap_or_default();
    Diagnostic::new(E_ROS_001, format!("roster.yaml: {path}{label}: {problem}"))
}

fn unknown_key(block: &str, accepted: &[&str]) -> String {
    let list: Vec<String> = accepted.iter().map(|k| format!("`{k}`")).collect();
    format!("unknown key; {block} accepts only {}", list.join(", "))
}

/// The alphabetically first key not in `accepted` (which is itself sorted for the message).
fn first_unknown<'a>(entries: &'a [(String, Node)], accepted: &[&str]) -> Option<&'a str> {
    entries
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| !accepted.contains(k))
        .min()
}

fn roster_version(root: &Node) -> Result<(), Diagnostic> {
    match root.get("roster_version") {
        None => Err(fault("roster_version", None, "is required")),
        Some(v) if v.as_int() == Some(1) => Ok(()),
        Some(v) => Err(fault(
            "roster_version",
            None,
            format!(
                "must be 1, the only roster format this build reads; found {}",
                v.shape()
            ),
        )),
    }
}

fn members(root: &Node) -> Result<Vec<MemberDecl>, Diagnostic> {
    let node = root
        .get("members")
        .ok_or_else(|| fault("members", None, "is required"))?;
    let Some(items) = node.as_seq() else {
        return Err(fault(
            "members",
            None,
            format!("must be a list of members, found {}", node.shape()),
        ));
    };
    if items.is_empty() {
        return Err(fault("members", None, "must list at least one member"));
    }
    items.iter().enumerate().map(|(i, item)| member(i, item)).collect()
}

fn member(i: usize, item: &Node) -> Result<MemberDecl, Diagnostic> {
    let at = |key: &str| format!("members[{i}].{key}");
    let Some(entries) = item.as_map() else {
        return Err(fault(
            &format!("members[{i}]"),
            None,
            format!(
                "must be a mapping with `name`, `capsule` and `version`, found {}",
                item.shape()
            ),
        ));
    };
    // The label names the member only once its name is one a reader can trust.
    let label = item.get("name").and_then(Node::as_str).filter(|n| names::is_member(n));
    if let Some(key) = first_unknown(entries, MEMBER_KEYS) {
        return Err(fault(
            &at(&shown(key)),
            label,
            unknown_key(&format!("`members[{i}]`"), MEMBER_KEYS),
        ));
    }

    let name = match item.get("name") {
        None => return Err(fault(&at("name"), None, "is required")),
        Some(n) => match n.as_str() {
            None => {
                return Err(fault(
                    &at("name"),
                    None,
                    format!("must be a member name, found {}", n.shape()),
                ));
            }
            Some(s) => match names::check_member(s) {
                Ok(()) => s.to_string(),
                Err(why) => {
                    return Err(fault(
                        &at("name"),
                        None,
                        format!("'{}' {why}; a member name matches ^[a-z][a-z0-9-]{{0,31}}$", shown(s)),
                    ));
                }
            },
        },
    };
    let label = Some(name.as_str());

    let capsule = match item.get("capsule") {
        None => return Err(fault(&at("capsule"), label, "is required")),
        Some(c) => match c.as_str() {
            None => {
                return Err(fault(
                    &at("capsule"),
                    label,
                    format!("must be a full artifact name, found {}", c.shape()),
                ));
            }
            Some(s) => capsule(s).map_err(|(problem, hint)| {
                let d = fault(&at("capsule"), label, problem);
                match hint {
                    Some(h) => d.with_hint(h),
                    None => d,
                }
            })?,
        },
    };

    let version = match item.get("version") {
        None => return Err(fault(&at("version"), label, "is required")),
        Some(v) => match v.as_scalar() {
            // Numbers and booleans keep their source spelling: `1.10` stays `1.10`.
            Some(s) => s.text.clone(),
            None => {
                return Err(fault(
                    &at("version"),
                    label,
                    format!("must be a version string, found {}", v.shape()),
                ));
            }
        },
    };
    if version.trim().is_empty() {
        return Err(fault(
            &at("version"),
            label,
            "must not be blank; a member pins an exact version",
        ));
    }
    if ALIASES.iter().any(|a| version.trim().eq_ignore_ascii_case(a)) {
        return Err(fault(
            &at("version"),
            label,
            format!(
                "'{}' is a reserved alias, not an exact version; pin the version the member runs",
                shown(&version)
            ),
        ));
    }

    let entry = match item.get("entry") {
        None => false,
        Some(e) => match e.as_bool() {
            Some(b) => b,
            None => {
                return Err(fault(
                    &at("entry"),
                    label,
                    format!("must be true or false, found {}", e.shape()),
                ));
            }
        },
    };

    Ok(MemberDecl {
        name,
        capsule,
        version,
        entry,
    })
}

/// A `capsule` value, or the problem text and (for a bare name) its own hint.
fn capsule(s: &str) -> Result<ArtifactName, (String, Option<String>)> {
    match ArtifactName::parse(s) {
        Ok(n) => Ok(n),
        Err(ArtifactNameError::Slashes) if !s.contains('/') && names::check_part(s).is_ok() => {
            let murmur = s.strip_prefix("murmur-").unwrap_or(s);
            Err((
                format!("'{s}' is not a full artifact name: an artifact is named <scope>/<name>"),
                Some(format!(
                    "name it with its scope: 'murmur/{murmur}' for a Murmur default artifact, '<owner>/{s}' for one \
                     published from github.com/<owner>, or 'local/{s}' for one installed from a .mur.zip file"
                )),
            ))
        }
        Err(why) => Err((format!("'{}' is not a full artifact name: {why}", shown(s)), None)),
    }
}

fn reachability(root: &Node) -> Result<Reachability, Diagnostic> {
    let Some(node) = root.get("reachability") else {
        return Ok(Reachability::None);
    };
    let rules = match &node.kind {
        NodeKind::Seq(rules) => rules,
        NodeKind::Scalar(_) => match node.as_str() {
            Some("all") => return Ok(Reachability::All),
            Some(word) => {
                return Err(fault(
                    "reachability",
                    None,
                    format!(
                        "'{}' is not a reachability; write `all` or a list of rules",
                        shown(word)
                    ),
                ));
            }
            None => return Err(reach_shape(node)),
        },
        NodeKind::Map(_) => return Err(reach_shape(node)),
    };
    rules
        .iter()
        .enumerate()
        .map(|(j, r)| rule(j, r))
        .collect::<Result<Vec<_>, _>>()
        .map(Reachability::Rules)
}

fn reach_shape(node: &Node) -> Diagnostic {
    fault(
        "reachability",
        None,
        format!("must be `all` or a list of rules, found {}", node.shape()),
    )
}

fn rule(j: usize, node: &Node) -> Result<Rule, Diagnostic> {
    let at = |key: &str| format!("reachability[{j}].{key}");
    let Some(entries) = node.as_map() else {
        return Err(fault(
            &format!("reachability[{j}]"),
            None,
            format!("must be a rule with `from` and `to`, found {}", node.shape()),
        ));
    };
    if let Some(key) = first_unknown(entries, RULE_KEYS) {
        return Err(fault(
            &at(&shown(key)),
            None,
            unknown_key(&format!("`reachability[{j}]`"), RULE_KEYS),
        ));
    }
    let from = match node.get("from") {
        None => return Err(fault(&at("from"), None, "is required")),
        Some(f) => match f.as_str() {
            Some(s) => s.to_string(),
            None => {
                return Err(fault(
                    &at("from"),
                    None,
                    format!("must be a member name, found {}", f.shape()),
                ));
            }
        },
    };
    let to_node = node.get("to").ok_or_else(|| fault(&at("to"), None, "is required"))?;
    let Some(items) = to_node.as_seq() else {
        return Err(fault(
            &at("to"),
            None,
            format!("must be a list of member names, found {}", to_node.shape()),
        ));
    };
    if items.is_empty() {
        return Err(fault(&at("to"), None, "must list at least one member"));
    }
    let mut to = Vec::with_capacity(items.len());
    for (k, item) in items.iter().enumerate() {
        match item.as_str() {
            Some(s) => to.push(s.to_string()),
            None => {
                return Err(fault(
                    &at(&format!("to[{k}]")),
                    None,
                    format!("must be a member name, found {}", item.shape()),
                ));
            }
        }
    }
    if let Some(k) = to.iter().position(|t| *t == from) {
        return Err(fault(
            &at(&format!("to[{k}]")),
            None,
            format!(
                "lists '{}', the rule's own `from`; a member never calls itself",
                shown(&from)
            ),
        ));
    }
    // Duplicates inside one `to` are kept here and merged when edges are built
    // (docs/reference/roster.md#admission-in-order).
    Ok(Rule { from, to })
}
