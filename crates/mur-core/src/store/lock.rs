//! `murmur.lock`, the read subset (docs/reference/roster.md#stores-and-murmurlock), and the upsert
//! `mur install` makes.
//!
//! Reading goes through [`crate::yaml`] so `resolved_version: 1.10` keeps its spelling; writing
//! uses serde_yaml_ng over a value tree converted from the same loader, so entries this runtime
//! does not understand survive an upsert with their versions still as text.

use std::path::Path;

use serde_yaml_ng::{Mapping, Value};

use crate::diag::{self, Diagnostic, shown};
use crate::yaml::{self, Node, NodeKind, Resolved};

/// The only lock format read and written.
pub const LOCK_VERSION: i128 = 3;
/// Largest lock read.
pub const MAX_LOCK_BYTES: usize = 1 << 20;

/// What the lock pins for one full artifact name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    pub version: String,
    /// `sha256.any`, lowercase.
    pub sha256: Option<String>,
    /// `sha256.platforms` is pinned without `any`: a shape conflict for this runtime [ours].
    pub platforms_only: bool,
}

impl Pin {
    /// The one rule every reader of the lock applies (admission check 6, `mur run --capsule`
    /// step 5): `full@version`, resolved to bytes hashing to `sha256`, agrees with this pin, or
    /// the E-REG-005 refusal. `subject` opens the message (`roster.yaml: member 'coder': `, or
    /// `capsule 'local/coder@1.2.0' cannot be run: `); `where_pinned` says where a version is
    /// chosen (`in roster.yaml`, `with --capsule-version`) for the hint.
    pub fn check(
        &self,
        subject: &str,
        full: &str,
        version: &str,
        sha256: &str,
        where_pinned: &str,
    ) -> Result<(), Diagnostic> {
        let conflict = |what: String, hint: String| {
            Err(Diagnostic::new(
                diag::E_REG_005,
                format!("{subject}murmur.lock conflict for '{full}': {what}"),
            )
            .with_hint(hint))
        };
        if self.version != version {
            return conflict(
                format!(
                    "pinned {full}@{}, but {full}@{} was resolved",
                    shown(&self.version),
                    shown(version)
                ),
                format!(
                    "pin the locked version ({}) {where_pinned}, or drop the stale entry for '{full}' from murmur.lock",
                    shown(&self.version)
                ),
            );
        }
        // A per-platform hash cannot be compared with the one archive every platform runs, so a
        // pin of only that shape never admits anything.
        if self.platforms_only {
            return conflict(
                format!(
                    "'{full}' is pinned only per platform (sha256.platforms without any), which this runtime cannot compare"
                ),
                format!("pin `sha256: {{any: <64 hex>}}` for '{full}' in murmur.lock, or drop its entry"),
            );
        }
        if let Some(pinned) = &self.sha256
            && !pinned.eq_ignore_ascii_case(sha256)
        {
            return conflict(
                format!(
                    "'{full}' is pinned at sha256 {}, but {sha256} was resolved",
                    shown(pinned)
                ),
                format!(
                    "install the bytes the lock pins for {full}@{}, or drop the stale entry for '{full}' from murmur.lock",
                    shown(version)
                ),
            );
        }
        Ok(())
    }
}

/// A read lock: its entries in file order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Lock {
    entries: Vec<(String, Pin)>,
}

fn invalid(why: impl std::fmt::Display) -> Diagnostic {
    Diagnostic::new(diag::E_RUN_003, format!("invalid murmur.lock: {why}"))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Lock {
    /// Reads the lock at `path`: `None` when absent, E-RUN-003 when unreadable or not
    /// `lock_version: 3`.
    pub fn read(path: &Path) -> Result<Option<Lock>, Diagnostic> {
        let bytes = match yaml::read_capped(path, MAX_LOCK_BYTES) {
            Ok(b) => b,
            Err(yaml::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            Err(e) => return Err(invalid(format!("cannot read {}: {e}", path.display()))),
        };
        Lock::parse(&bytes).map(Some)
    }

    /// Parses lock bytes (E-RUN-003 on any fault).
    pub fn parse(bytes: &[u8]) -> Result<Lock, Diagnostic> {
        let root = load(bytes).map_err(invalid)?;
        let mut entries = Vec::new();
        let Some(list) = root.get("artifacts") else {
            return Ok(Lock { entries });
        };
        let Some(items) = list.as_seq() else {
            return Err(invalid(format!("artifacts: must be a list, found {}", list.shape())));
        };
        for (i, item) in items.iter().enumerate() {
            let at = |key: &str, problem: String| invalid(format!("artifacts[{i}]{key}: {problem}"));
            if item.as_map().is_none() {
                return Err(at("", format!("must be a mapping, found {}", item.shape())));
            }
            let name = match item.get("name") {
                Some(n) => n
                    .as_str()
                    .ok_or_else(|| at(".name", format!("must be a string, found {}", n.shape())))?,
                None => return Err(at(".name", "is required".into())),
            };
            let version = match item.get("resolved_version") {
                Some(Node {
                    kind: NodeKind::Scalar(s),
                    ..
                }) => s.text.clone(),
                Some(n) => {
                    return Err(at(
                        ".resolved_version",
                        format!("must be a version string, found {}", n.shape()),
                    ));
                }
                None => return Err(at(".resolved_version", "is required".into())),
            };
            let (sha256, platforms_only) = match item.get("sha256") {
                None => (None, false),
                Some(sha) if sha.as_map().is_some() => match sha.get("any") {
                    // Any scalar's text: a hash of only digits resolves as an integer.
                    Some(any) => match any.as_scalar().map(|s| s.text.as_str()) {
                        Some(h) if is_sha256(h) => (Some(h.to_ascii_lowercase()), false),
                        _ => return Err(at(".sha256.any", "must be 64 hex digits".into())),
                    },
                    None => (None, sha.get("platforms").is_some()),
                },
                Some(sha) => {
                    return Err(at(".sha256", format!("must be a mapping, found {}", sha.shape())));
                }
            };
            entries.push((
                name.to_string(),
                Pin {
                    version,
                    sha256,
                    platforms_only,
                },
            ));
        }
        Ok(Lock { entries })
    }

    /// The pin for `full_name` (`<scope>/<name>`); the first entry with that name wins [ours].
    pub fn pin(&self, full_name: &str) -> Option<&Pin> {
        self.entries.iter().find(|(n, _)| n == full_name).map(|(_, p)| p)
    }

    /// Every entry, in file order.
    pub fn entries(&self) -> &[(String, Pin)] {
        &self.entries
    }
}

/// Loads lock text as a mapping carrying `lock_version: 3`; the error is the `<why>` of E-RUN-003.
fn load(bytes: &[u8]) -> Result<Node, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "the file is not UTF-8 text".to_string())?;
    let root = yaml::load(
        text,
        yaml::Limits {
            max_bytes: MAX_LOCK_BYTES,
            ..yaml::Limits::default()
        },
    )
    .map_err(|e| format!("YAML syntax error at line {}, column {}: {}", e.line, e.col, e.message))?;
    if root.as_map().is_none() {
        return Err(format!(
            "must be a mapping with `lock_version: 3`, found {}",
            root.shape()
        ));
    }
    match root.get("lock_version") {
        None => Err("lock_version is missing; this build reads lock_version 3".into()),
        Some(v) if v.as_int() == Some(LOCK_VERSION) => Ok(root),
        Some(v) => match v.as_int() {
            Some(n) => Err(format!("lock_version is {n}; this build reads lock_version 3")),
            None => Err(format!("lock_version must be the integer 3, found {}", v.shape())),
        },
    }
}

/// Converts a loaded node to a serde_yaml_ng value for rewriting. Plain numbers other than
/// integers become strings, so a version such as `1.10` is written back as `'1.10'`, not `1.1`.
fn to_value(node: &Node) -> Value {
    match &node.kind {
        NodeKind::Seq(items) => Value::Sequence(items.iter().map(to_value).collect()),
        NodeKind::Map(entries) => Value::Mapping(
            entries
                .iter()
                .map(|(k, v)| (Value::String(k.clone()), to_value(v)))
                .collect(),
        ),
        NodeKind::Scalar(s) => match s.resolve() {
            Resolved::Null => Value::Null,
            Resolved::Bool(b) => Value::Bool(b),
            Resolved::Int(i) => match i64::try_from(i) {
                Ok(i) if s.text.bytes().all(|b| b.is_ascii_digit() || b == b'-') => Value::Number(i.into()),
                _ => Value::String(s.text.clone()),
            },
            Resolved::Float | Resolved::Str => Value::String(s.text.clone()),
        },
    }
}

/// Sets the entry for `full_name` to `version` and `sha256: {any: sha256}`, `origin: operator`,
/// creating the lock (`lock_version: 3`) when absent. The first entry with that name is updated
/// in place, keeping its other keys; other entries and top-level keys are kept. Comments are not.
/// A lock that does not read is left untouched (`InvalidData`). Written to a temporary file and
/// renamed over the lock.
pub fn upsert(path: &Path, full_name: &str, version: &str, sha256: &str) -> std::io::Result<()> {
    let invalid_data =
        |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("invalid murmur.lock: {why}"));
    let mut root = match yaml::read_capped(path, MAX_LOCK_BYTES) {
        Ok(bytes) => match to_value(&load(&bytes).map_err(invalid_data)?) {
            Value::Mapping(m) => m,
            _ => return Err(invalid_data("not a mapping".into())),
        },
        Err(yaml::ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut m = Mapping::new();
            m.insert("lock_version".into(), Value::Number(3.into()));
            m
        }
        Err(yaml::ReadError::Io(e)) => return Err(e),
        Err(e) => return Err(invalid_data(e.to_string())),
    };
    let artifacts = root.entry("artifacts".into()).or_insert(Value::Sequence(Vec::new()));
    if artifacts.is_null() {
        *artifacts = Value::Sequence(Vec::new());
    }
    let Value::Sequence(list) = artifacts else {
        return Err(invalid_data("artifacts: must be a list".into()));
    };
    let name_key = Value::String("name".into());
    let existing = list
        .iter_mut()
        .filter_map(Value::as_mapping_mut)
        .find(|m| m.get(&name_key).and_then(Value::as_str) == Some(full_name));
    let entry = match existing {
        Some(m) => m,
        None => {
            let mut m = Mapping::new();
            m.insert(name_key.clone(), Value::String(full_name.into()));
            list.push(Value::Mapping(m));
            match list.last_mut().and_then(Value::as_mapping_mut) {
                Some(m) => m,
                None => return Err(invalid_data("artifacts: entry vanished".into())),
            }
        }
    };
    let mut hash = Mapping::new();
    hash.insert("any".into(), Value::String(sha256.to_ascii_lowercase()));
    entry.insert("resolved_version".into(), Value::String(version.into()));
    entry.insert("sha256".into(), Value::Mapping(hash));
    entry.insert("origin".into(), Value::String("operator".into()));
    let text = serde_yaml_ng::to_string(&Value::Mapping(root)).map_err(|e| invalid_data(e.to_string()))?;
    crate::file::write_atomic(path, text.as_bytes(), 0o666)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const DIGITS: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const H2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    fn pin(v: &str, sha: Option<&str>, platforms_only: bool) -> Pin {
        Pin {
            version: v.into(),
            sha256: sha.map(String::from),
            platforms_only,
        }
    }

    #[test]
    fn reads() {
        let ok = format!(
            "lock_version: 3\nartifacts:\n  - name: local/coder\n    resolved_version: 1.10\n    sha256: {{any: {}}}\n    origin: operator\n    extra: kept\n  - name: local/coder\n    resolved_version: 9.9.9\n  - name: gh/tool\n    resolved_version: '2'\n    sha256:\n      platforms: {{linux: {H2}}}\n",
            H1.to_uppercase()
        );
        let lock = Lock::parse(ok.as_bytes()).unwrap();
        assert_eq!(
            lock.pin("local/coder"),
            Some(&pin("1.10", Some(H1), false)),
            "first entry wins, version as text"
        );
        assert_eq!(lock.pin("gh/tool"), Some(&pin("2", None, true)));
        assert_eq!(lock.pin("local/other"), None);
        let digits =
            format!("lock_version: 3\nartifacts: [{{name: a/b, resolved_version: 1, sha256: {{any: {DIGITS}}}}}]\n");
        assert_eq!(
            Lock::parse(digits.as_bytes()).unwrap().pin("a/b"),
            Some(&pin("1", Some(DIGITS), false))
        );
        assert_eq!(Lock::parse(b"lock_version: 3\n").unwrap(), Lock::default());
        assert_eq!(Lock::parse(b"lock_version: 3\nartifacts:\n").unwrap(), Lock::default());
    }

    #[test]
    fn one_rule_for_every_reader() {
        let subject = "roster.yaml: member 'c': ";
        let table: &[(Pin, &str, &str, Option<&str>)] = &[
            (pin("1", Some(H1), false), "1", H1, None),
            (pin("1", Some(&H1.to_uppercase()), false), "1", H1, None),
            (pin("1", None, false), "1", H2, None),
            (
                pin("2", Some(H1), false),
                "1",
                H1,
                Some("pinned local/c@2, but local/c@1 was resolved"),
            ),
            (
                pin("1", None, true),
                "1",
                H1,
                Some(
                    "'local/c' is pinned only per platform (sha256.platforms without any), which this runtime cannot compare",
                ),
            ),
            (
                pin("1", Some(H2), false),
                "1",
                H1,
                Some(
                    "'local/c' is pinned at sha256 2222222222222222222222222222222222222222222222222222222222222222, but e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 was resolved",
                ),
            ),
        ];
        for (p, version, sha, want) in table {
            match (p.check(subject, "local/c", version, sha, "in roster.yaml"), want) {
                (Ok(()), None) => {}
                (Err(d), Some(what)) => {
                    assert_eq!(d.code, diag::E_REG_005, "{p:?}");
                    assert_eq!(
                        d.message,
                        format!("{subject}murmur.lock conflict for 'local/c': {what}")
                    );
                    assert!(d.hint().is_some_and(|h| h.contains("murmur.lock")), "{p:?}");
                }
                (got, want) => panic!("{p:?} {version} {sha}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn refusals() {
        let table: &[(&str, &str)] = &[
            (
                "lock_version: 2\n",
                "invalid murmur.lock: lock_version is 2; this build reads lock_version 3",
            ),
            (
                "lock_version: '3'\n",
                "invalid murmur.lock: lock_version must be the integer 3, found a string",
            ),
            (
                "artifacts: []\n",
                "invalid murmur.lock: lock_version is missing; this build reads lock_version 3",
            ),
            (
                "- a\n",
                "invalid murmur.lock: must be a mapping with `lock_version: 3`, found a list",
            ),
            (
                "lock_version: 3\nartifacts: [\n",
                "invalid murmur.lock: YAML syntax error at line 3, column 1: ",
            ),
            (
                "lock_version: 3\nartifacts: {}\n",
                "invalid murmur.lock: artifacts: must be a list, found a mapping",
            ),
            (
                "lock_version: 3\nartifacts: [x]\n",
                "invalid murmur.lock: artifacts[0]: must be a mapping, found a string",
            ),
            (
                "lock_version: 3\nartifacts: [{resolved_version: 1}]\n",
                "invalid murmur.lock: artifacts[0].name: is required",
            ),
            (
                "lock_version: 3\nartifacts: [{name: a/b}]\n",
                "invalid murmur.lock: artifacts[0].resolved_version: is required",
            ),
            (
                "lock_version: 3\nartifacts: [{name: a/b, resolved_version: 1, sha256: {any: abc}}]\n",
                "invalid murmur.lock: artifacts[0].sha256.any: must be 64 hex digits",
            ),
            (
                "lock_version: 3\nartifacts: [{name: a/b, resolved_version: 1, sha256: abc}]\n",
                "invalid murmur.lock: artifacts[0].sha256: must be a mapping, found a string",
            ),
        ];
        for (text, want) in table {
            let d = Lock::parse(text.as_bytes()).unwrap_err();
            assert_eq!(d.code, diag::E_RUN_003, "{text:?}");
            assert!(d.message.starts_with(want), "{text:?}: {:?}", d.message);
        }
    }

    #[test]
    fn read_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("murmur.lock");
        assert_eq!(Lock::read(&path).unwrap(), None, "absent lock pins nothing");
        std::fs::write(&path, "lock_version: 2\n").unwrap();
        assert_eq!(Lock::read(&path).unwrap_err().code, diag::E_RUN_003);
        std::fs::create_dir(dir.path().join("d")).unwrap();
        assert!(
            Lock::read(&dir.path().join("d"))
                .unwrap_err()
                .message
                .starts_with("invalid murmur.lock: cannot read ")
        );
    }

    #[test]
    fn upsert_creates_updates_and_keeps_others() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("murmur.lock");
        upsert(&path, "local/coder", "1.10", H1).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!(
                "lock_version: 3\nartifacts:\n- name: local/coder\n  resolved_version: '1.10'\n  sha256:\n    any: {H1}\n  origin: operator\n"
            )
        );
        std::fs::write(
            &path,
            "lock_version: 3\nextra: 1.20\nartifacts:\n  - name: gh/x\n    resolved_version: 1.10\n  - name: local/coder\n    resolved_version: 0.1.0\n    sha256: {platforms: {linux: abc}}\n    note: kept\n",
        )
        .unwrap();
        upsert(&path, "local/coder", "0.2.0", H2).unwrap();
        upsert(&path, "local/new", "3", H1).unwrap();
        let lock = Lock::read(&path).unwrap().unwrap();
        assert_eq!(
            lock.pin("gh/x"),
            Some(&pin("1.10", None, false)),
            "other entries keep their text"
        );
        assert_eq!(lock.pin("local/coder"), Some(&pin("0.2.0", Some(H2), false)));
        assert_eq!(lock.pin("local/new"), Some(&pin("3", Some(H1), false)));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("extra: '1.20'") && text.contains("note: kept"), "{text}");
        assert_eq!(lock.entries().len(), 3);

        std::fs::write(&path, "lock_version: 2\n").unwrap();
        let e = upsert(&path, "local/coder", "1", H1).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "lock_version: 2\n",
            "a bad lock is never clobbered"
        );
    }
}
