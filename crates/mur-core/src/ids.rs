//! The one place ids are minted and recognised (docs/reference/formation.md#identifiers).
//!
//! Every id is a kind prefix and the 32 lowercase hex digits of a UUIDv7, so lexical order is mint
//! order and the first 48 bits carry the mint time in Unix milliseconds (retention reads it).

use uuid::Uuid;

/// The kinds of id the runtime mints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    Formation,
    Session,
    Task,
    Context,
    Call,
    Event,
    /// A delegation's grant (`crate::grant`) [ours].
    Grant,
}

impl IdKind {
    pub const fn prefix(self) -> &'static str {
        match self {
            IdKind::Formation => "frm_",
            IdKind::Session => "ses_",
            IdKind::Task => "tsk_",
            IdKind::Context => "ctx_",
            IdKind::Call => "mcl_",
            IdKind::Event => "evt_",
            IdKind::Grant => "grt_",
        }
    }
}

/// Mints a fresh id of `kind`.
pub fn mint(kind: IdKind) -> String {
    format!("{}{}", kind.prefix(), Uuid::now_v7().simple())
}

/// Why a string is not an id of the expected kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("it does not start with `{0}`")]
    Prefix(&'static str),
    #[error("it needs exactly 32 hex digits after `{0}`, found {1}")]
    Length(&'static str, usize),
    #[error("its digits must be lowercase hex (0-9, a-f)")]
    Digits,
}

/// Checks that `s` has the form `<prefix><32 lowercase hex>`.
pub fn check(kind: IdKind, s: &str) -> Result<(), IdError> {
    let prefix = kind.prefix();
    let rest = s.strip_prefix(prefix).ok_or(IdError::Prefix(prefix))?;
    if rest.len() != 32 {
        return Err(IdError::Length(prefix, rest.chars().count()));
    }
    if !rest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(IdError::Digits);
    }
    Ok(())
}

/// True when `s` is a well-formed id of `kind`.
pub fn is(kind: IdKind, s: &str) -> bool {
    check(kind, s).is_ok()
}

/// The mint time of a well-formed id, in Unix milliseconds (its first 48 bits).
pub fn mint_time_ms(kind: IdKind, s: &str) -> Option<u64> {
    check(kind, s).ok()?;
    u64::from_str_radix(&s[kind.prefix().len()..kind.prefix().len() + 12], 16).ok()
}

/// The shortest prefix of formation id `id`, at least `frm_` and 12 digits, that no other of
/// `all` starts with: the short id listings print and commands resolve.
pub fn shortest_prefix(id: &str, all: &[String]) -> String {
    let min = IdKind::Formation.prefix().len() + 12;
    (min..id.len())
        .filter_map(|n| id.get(..n))
        .find(|p| !all.iter().any(|other| other != id && other.starts_with(p)))
        .unwrap_or(id)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_check_and_sort_in_mint_order() {
        let a = mint(IdKind::Formation);
        let b = mint(IdKind::Formation);
        assert!(is(IdKind::Formation, &a));
        assert!(a < b, "{a} then {b}");
        let now = chrono::Utc::now().timestamp_millis() as u64;
        let t = mint_time_ms(IdKind::Formation, &a).unwrap();
        assert!(now.abs_diff(t) < 60_000);
    }

    #[test]
    fn malformed_ids_are_refused_with_their_reason() {
        let table: &[(&str, IdError)] = &[
            ("ses_0199c4e2f1b7712a9d3e4f5061728394", IdError::Prefix("frm_")),
            ("frm_0199c4e2f1b7712a9d3e4f506172839", IdError::Length("frm_", 31)),
            ("frm_0199C4E2F1B7712A9D3E4F5061728394", IdError::Digits),
            ("frm_0199c4e2f1b7712a9d3e4f506172839g", IdError::Digits),
        ];
        for (s, want) in table {
            assert_eq!(check(IdKind::Formation, s).as_ref(), Err(want), "{s}");
        }
        assert_eq!(
            mint_time_ms(IdKind::Formation, "frm_0199c4e2f1b7712a9d3e4f5061728394"),
            Some(0x0199c4e2f1b7)
        );
    }
}
