//! Credentials the runtime holds (a provider key, an MCP server's bearer, a remote agent's key,
//! the edge tokens of calls, the operator token, a push webhook's token and credentials), and the
//! one scrub of what foreign servers say back.
//!
//! Invariants:
//! - **A [`Secret`] cannot be shown by accident.** It has no `Display` and no `Serialize`, so
//!   `format!("{}")` and `serde_json::to_string` do not compile; its `Debug` prints
//!   `[redacted]`; its memory is zeroized when the last clone drops. [`Secret::reveal`] gives the
//!   bytes, for writing the credential header (or the formation channel's line) only, and
//!   [`reveal_in_file`] for the one file that must carry one (the owner-only running record, whose
//!   operator token `mur send` reads).
//! - **What a member holds, it scrubs.** Every live `Secret` made by [`Secret::new`] is in one
//!   member-wide set; [`scrub`] replaces each of them (of [`MIN_SCRUBBED_BYTES`] or more) in a
//!   text with `[redacted]`. It is applied where foreign text is read — an MCP server's replies,
//!   a remote agent's replies, a provider's replies and failures — so a server that echoes the
//!   credential it was sent (in a tool result, an error, a failed status) cannot pass it on to the
//!   model, a caller, a record, a log or a span. A credential this process only passes on
//!   ([`Secret::passed_on`]: the edge tokens the launcher writes into its members' first lines, a
//!   caller's push webhook token) is kept and shown the same way but is not in the set.
//!
//! A dropped `Secret` leaves the set with its last clone: the set holds weak references only.
//!
//! Zeroizing is `zeroize`'s: the `String`'s buffer is overwritten when the last clone drops. No
//! test observes it (reading freed memory is undefined behaviour); copies made before it — a
//! header value, a line written to a pipe — are the writer's, and are not covered.

use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use zeroize::Zeroizing;

/// The shortest credential [`scrub`] replaces: 8 bytes. Every provider's and service's real keys
/// are far longer; a shorter one is a local server's placeholder (`x`, `none`), and replacing it
/// wherever it occurs would mangle the text (`k` in "broke" read `bro[redacted]e`).
pub const MIN_SCRUBBED_BYTES: usize = 8;

/// What a scrubbed credential is replaced with.
pub const REDACTED: &str = "[redacted]";

/// A credential, read once from the environment. Deliberately without `Display` and
/// `Serialize`; `Debug` redacts.
#[derive(Clone)]
pub struct Secret(Arc<Zeroizing<String>>);

/// Every live secret of this process (weak: a secret leaves with its last clone).
static HELD: Mutex<Vec<Weak<Zeroizing<String>>>> = Mutex::new(Vec::new());

impl Secret {
    /// Holds `value`: from now until its last clone drops, [`scrub`] replaces it.
    pub fn new(value: String) -> Secret {
        let inner = Arc::new(Zeroizing::new(value));
        let mut set = crate::sync::lock(&HELD);
        // Dead entries are swept when the set is full, and room is kept for as many entries as
        // are left alive: a member reading a first line of 255 tokens makes 255 secrets, and a
        // sweep at each would be quadratic. A dead entry holds no credential (its string was
        // zeroized and freed with its last clone), only the weak pointer's allocation.
        if set.len() == set.capacity() {
            set.retain(|w| w.strong_count() > 0);
            let live = set.len();
            set.reserve(live.max(16));
        }
        set.push(Arc::downgrade(&inner));
        Secret(inner)
    }

    /// Keeps `value`, a credential this process passes on rather than holds as its own, without
    /// adding it to the set [`scrub`] reads: the edge tokens the launcher mints into its members'
    /// first lines (each member holds its own when it reads its line), and a push webhook's token
    /// and credentials, which a caller chose (its choice must not change what this member's
    /// foreign text reads).
    pub fn passed_on(value: String) -> Secret {
        Secret(Arc::new(Zeroizing::new(value)))
    }

    /// The credential's bytes, for the header that carries it and nowhere else.
    pub fn reveal(&self) -> &str {
        &self.0
    }

    /// Whether it is empty (an unset credential reads as none).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl PartialEq for Secret {
    /// Compared in time that depends on the lengths only.
    fn eq(&self, other: &Secret) -> bool {
        let (a, b) = (self.reveal().as_bytes(), other.reveal().as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
    }
}

impl Eq for Secret {}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        let value = Zeroizing::new(<String as serde::Deserialize>::deserialize(d)?);
        Ok(Secret::new(value.as_str().to_string()))
    }
}

/// Writes a field's secret as its plain string: `#[serde(serialize_with = …)]` of the one file
/// that must carry it. Nothing else serializes a [`Secret`].
pub fn reveal_in_file<S: serde::Serializer>(secret: &Option<Secret>, s: S) -> Result<S::Ok, S::Error> {
    match secret {
        Some(v) => s.serialize_some(v.reveal()),
        None => s.serialize_none(),
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// `text` with every occurrence of every credential this member holds replaced by
/// [`REDACTED`]: the one scrub of foreign text. Apply it before the text is cut or quoted, so
/// no bound leaves a credential whole.
pub fn scrub(text: String) -> String {
    let held = held();
    scrub_each(text, &long_enough(&held))
}

/// Every string of `value` (object keys included) scrubbed as [`scrub`] does; nothing is
/// touched when the member holds no credential or none occurs.
pub fn scrub_json(value: &mut Value) {
    let held = held();
    let secrets = long_enough(&held);
    if !secrets.is_empty() {
        scrub_value(value, &secrets);
    }
}

/// Copies (zeroized when dropped) of the live secrets of the set, made under its lock, dropping
/// the dead ones' entries. No strong reference leaves the lock, so a secret dropped by one
/// thread is gone from every later scrub, whatever other threads are scrubbing.
fn held() -> Vec<Zeroizing<String>> {
    let mut set = crate::sync::lock(&HELD);
    set.retain(|w| w.strong_count() > 0);
    set.iter()
        .filter_map(Weak::upgrade)
        .map(|s| Zeroizing::new(s.as_str().to_string()))
        .collect()
}

/// Those of `held` long enough to be scrubbed, longest first (so a credential that holds another
/// is replaced whole).
fn long_enough(held: &[Zeroizing<String>]) -> Vec<&str> {
    let mut long: Vec<&str> = held
        .iter()
        .map(|s| s.as_str())
        .filter(|s| s.len() >= MIN_SCRUBBED_BYTES)
        .collect();
    long.sort_by_key(|s| std::cmp::Reverse(s.len()));
    long
}

fn scrub_value(value: &mut Value, secrets: &[&str]) {
    let occurs = |t: &str| secrets.iter().any(|s| t.contains(s));
    match value {
        Value::String(s) if occurs(s) => *s = scrub_each(std::mem::take(s), secrets),
        Value::Array(items) => items.iter_mut().for_each(|v| scrub_value(v, secrets)),
        Value::Object(map) if map.keys().any(|k| occurs(k)) => {
            for (k, mut v) in std::mem::take(map) {
                scrub_value(&mut v, secrets);
                map.insert(scrub_each(k, secrets), v);
            }
        }
        Value::Object(map) => map.values_mut().for_each(|v| scrub_value(v, secrets)),
        Value::String(_) | Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `text` with each of `secrets` (already filtered and ordered, [`long_enough`]) replaced.
fn scrub_each(text: String, secrets: &[&str]) -> String {
    secrets
        .iter()
        .fold(text, |t, s| if t.contains(s) { t.replace(s, REDACTED) } else { t })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_has_no_display_nor_serialize_and_its_debug_redacts() {
        // Compiles only while `Secret` has no `Display` and no `Serialize`: with either, `check`
        // has two candidate impls and the call below is ambiguous, a compile error. (Checked on
        // the concrete type: in a generic function the bounded impls would never be candidates.)
        trait Ambiguous<A> {
            fn check() {}
        }
        impl<T: ?Sized> Ambiguous<()> for T {}
        struct ByDisplay;
        impl<T: ?Sized + std::fmt::Display> Ambiguous<ByDisplay> for T {}
        struct BySerialize;
        impl<T: ?Sized + serde::Serialize> Ambiguous<BySerialize> for T {}
        <Secret as Ambiguous<_>>::check();

        let s = Secret::new("sk-debug-0123456789".into());
        let shown = format!("{s:?} {:?}", Some(s.clone()));
        assert_eq!(shown, "Secret([redacted]) Some(Secret([redacted]))");
        assert_eq!(s.reveal(), "sk-debug-0123456789");
    }

    #[test]
    fn secrets_compare_by_value_and_read_back_from_json() {
        let a = Secret::new("tok-compare-0123456".into());
        assert_eq!(a, a.clone());
        assert_eq!(a, Secret::passed_on("tok-compare-0123456".into()));
        assert_ne!(a, Secret::new("tok-compare-0123457".into()));
        assert_ne!(a, Secret::new("tok-compare-012345".into()));
        assert_ne!(a, Secret::new(String::new()));
        assert!(Secret::new(String::new()).is_empty() && !a.is_empty());

        let read: Secret = serde_json::from_str("\"tok-read-0123456\"").expect("a JSON string");
        assert_eq!(read.reveal(), "tok-read-0123456");
        assert!(serde_json::from_str::<Secret>("7").is_err());
    }

    #[test]
    fn only_the_running_record_writes_a_secret_and_it_writes_it_plain() {
        #[derive(serde::Serialize)]
        struct Record {
            #[serde(serialize_with = "reveal_in_file")]
            token: Option<Secret>,
        }
        let held = Record {
            token: Some(Secret::new("mdt1.in-file-0123".into())),
        };
        let none = Record { token: None };
        assert_eq!(
            serde_json::to_string(&held).ok().as_deref(),
            Some(r#"{"token":"mdt1.in-file-0123"}"#)
        );
        assert_eq!(serde_json::to_string(&none).ok().as_deref(), Some(r#"{"token":null}"#));
    }

    #[test]
    fn a_passed_on_secret_redacts_but_is_not_scrubbed() {
        let passed = Secret::passed_on("push-passed-token-4e1f".into());
        assert_eq!(format!("{passed:?}"), "Secret([redacted])");
        assert_eq!(passed.reveal(), "push-passed-token-4e1f");
        let text = "a reply naming push-passed-token-4e1f".to_string();
        assert_eq!(scrub(text.clone()), text);
    }

    #[test]
    fn only_credentials_long_enough_to_be_secrets_are_scrubbed() {
        // (text, credentials, scrubbed)
        let table: &[(&str, &[&str], &str)] = &[
            ("the stream broke off", &["k"], "the stream broke off"),
            ("none of it: none", &["none"], "none of it: none"),
            ("key 1234567 shown", &["1234567"], "key 1234567 shown"),
            ("key 12345678 shown", &["12345678"], "key [redacted] shown"),
            (
                "sk-live-abcdefgh and sk-live-abcdefgh",
                &["sk-live-abcdefgh"],
                "[redacted] and [redacted]",
            ),
            ("no key", &[""], "no key"),
            ("no key", &[], "no key"),
            // Two credentials, one inside the other: the longer goes whole.
            (
                "Bearer abcdefgh-12345678 then abcdefgh",
                &["abcdefgh", "abcdefgh-12345678"],
                "Bearer [redacted] then [redacted]",
            ),
            (
                "mcp-key-0001 and far-key-0002",
                &["far-key-0002", "mcp-key-0001"],
                "[redacted] and [redacted]",
            ),
        ];
        for (text, secrets, want) in table {
            let held: Vec<Zeroizing<String>> = secrets.iter().map(|s| Zeroizing::new(s.to_string())).collect();
            assert_eq!(
                scrub_each(text.to_string(), &long_enough(&held)),
                *want,
                "{text:?} {secrets:?}"
            );
        }
    }

    #[test]
    fn the_member_wide_set_scrubs_what_is_held_and_forgets_what_was_dropped() {
        // Values no other test holds: the set is the process's.
        let provider = Secret::new("sk-held-provider-7f1e".into());
        let bearer = Secret::new("mcp-held-bearer-92ab".into());
        let copy = bearer.clone();
        let text = "echo: sk-held-provider-7f1e, Bearer mcp-held-bearer-92ab".to_string();
        assert_eq!(scrub(text.clone()), "echo: [redacted], Bearer [redacted]");
        drop(provider);
        drop(bearer);
        // The clone still holds the bearer; the provider key is gone from the set.
        assert_eq!(scrub(text.clone()), "echo: sk-held-provider-7f1e, Bearer [redacted]");
        drop(copy);
        assert_eq!(scrub(text.clone()), text);

        let held = Secret::new("far-held-key-30c5d1".into());
        let mut v = serde_json::json!({
            "error": {"message": "bad key far-held-key-30c5d1", "far-held-key-30c5d1": [1, "far-held-key-30c5d1"]}
        });
        scrub_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"error": {"message": "bad key [redacted]", "[redacted]": [1, "[redacted]"]}})
        );
        drop(held);
    }
}
