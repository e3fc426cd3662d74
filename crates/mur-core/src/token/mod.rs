//! Tokens and credentials (docs/reference/door.md#authentication): the formation token `mft1`
//! (Ed25519, minted by the launcher for each edge), the door token `mdt1` (HMAC, minted and checked
//! by one door), each member's grant key (HMAC, `crate::grant`), and a bounded verification
//! cache for doors.
//!
//! Pure: no actix, HTTP or process code. Secrets are zeroized on drop and never printed: no type
//! here has a `Debug` that shows a key, and callers must not log a token.

pub mod cache;
pub mod door;
pub mod formation;
pub mod grant_key;

pub use cache::VerifyCache;
pub use door::{DoorCredential, DoorKey};
pub use formation::{SigningKey, Verdict, VerifyKey, verify};
pub use grant_key::GrantKey;

use crate::wire::jsonrpc::Method;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The scopes a formation token carries (docs/reference/door.md#formation-tokens row 6), in that
/// order: the methods whose `ScopeRule` is `Formation`.
pub const FORMATION_SCOPES: [&str; 5] = [
    Method::SendMessage.name(),
    Method::GetTask.name(),
    Method::CancelTask.name(),
    Method::ListTasks.name(),
    Method::SubscribeToTask.name(),
];

/// The scope of the door's file routes, `/resources/…` (not a JSON-RPC method) [ours].
pub const FILES_SCOPE: &str = "resources/files";

/// The scopes of the operator door token (docs/reference/door.md#authentication), in that order:
/// every method with a scope and the file routes', the push-notification methods' last [ours].
pub const OPERATOR_SCOPES: [&str; 13] = [
    Method::SendMessage.name(),
    Method::SendStreamingMessage.name(),
    Method::WatchSession.name(),
    Method::GetTask.name(),
    Method::ListTasks.name(),
    Method::CancelTask.name(),
    Method::SubscribeToTask.name(),
    Method::StopSession.name(),
    FILES_SCOPE,
    Method::CreatePushConfig.name(),
    Method::GetPushConfig.name(),
    Method::ListPushConfigs.name(),
    Method::DeletePushConfig.name(),
];

/// Base64url without padding, the `B64` of docs/reference/door.md#authentication.
pub fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes `B64`. Refuses padding, characters outside the url-safe alphabet and non-canonical
/// trailing bits, so each byte string has exactly one accepted spelling.
pub fn unb64(s: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(s).ok()
}

/// Splits `<tag>.<a>.<b>` into its two decoded, non-empty segments
/// (docs/reference/door.md#formation-tokens row 1, shared by `mdt1`). Returns the payload segment
/// as transmitted too, since signatures cover its ASCII spelling.
fn split_token<'t>(token: &'t str, tag: &str) -> Option<(&'t str, Vec<u8>, Vec<u8>)> {
    let mut parts = token.split('.');
    let (t, payload_b64, sig_b64) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || t != tag {
        return None;
    }
    let payload = unb64(payload_b64)?;
    let sig = unb64(sig_b64)?;
    if payload.is_empty() || sig.is_empty() {
        return None;
    }
    Some((payload_b64, payload, sig))
}

/// The payload of `<tag>.<B64(payload)>.<B64(signature)>`, its signature not checked.
pub(crate) fn payload_unchecked(signed: &str, tag: &str) -> Option<Vec<u8>> {
    split_token(signed, tag).map(|(_, payload, _)| payload)
}

/// `"<domain>" 0x1F ["<tag>" 0x1F] <B64(payload)>`: the bytes a signature or MAC covers.
fn signing_input(domain: &str, tag: Option<&str>, payload_b64: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(domain.len() + payload_b64.len() + 8);
    v.extend_from_slice(domain.as_bytes());
    v.push(0x1F);
    if let Some(tag) = tag {
        v.extend_from_slice(tag.as_bytes());
        v.push(0x1F);
    }
    v.extend_from_slice(payload_b64.as_bytes());
    v
}

/// A JSON string literal for `s` (payloads are built by hand so their byte layout is pinned).
fn json_str(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// 32 bytes from the OS CSPRNG, in a buffer that is wiped when dropped.
fn random_32() -> Result<zeroize::Zeroizing<[u8; 32]>, std::io::Error> {
    let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
    getrandom::getrandom(bytes.as_mut()).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::jsonrpc::ScopeRule;

    #[test]
    fn b64_is_url_safe_without_padding_and_strict() {
        assert_eq!(b64(&[0xfb, 0xff]), "-_8");
        assert_eq!(unb64("-_8"), Some(vec![0xfb, 0xff]));
        let table: &[&str] = &[
            "-_8=",  // padding
            "+/8",   // standard alphabet
            "-_9",   // non-canonical trailing bits
            "a",     // impossible length
            "ab cd", // space
        ];
        for s in table {
            assert_eq!(unb64(s), None, "{s:?}");
        }
        assert_eq!(unb64(""), Some(vec![]));
    }

    #[test]
    fn scope_lists_hold_exactly_the_methods_their_rule_names() {
        for m in Method::ALL {
            let (formation, operator) = match m.scope_rule() {
                ScopeRule::TokenOnly => (false, false),
                ScopeRule::Formation => (true, true),
                ScopeRule::Operator => (false, true),
            };
            assert_eq!(FORMATION_SCOPES.contains(&m.name()), formation, "{m:?}");
            assert_eq!(OPERATOR_SCOPES.contains(&m.name()), operator, "{m:?}");
        }
        let methods = OPERATOR_SCOPES.iter().filter(|s| Method::resolve(s).is_some()).count();
        assert_eq!(
            methods + 1,
            OPERATOR_SCOPES.len(),
            "only the file routes' scope is not a method"
        );
    }

    #[test]
    fn scope_lists_match_the_spec() {
        assert_eq!(
            FORMATION_SCOPES.join(","),
            "SendMessage,GetTask,CancelTask,ListTasks,SubscribeToTask"
        );
        assert_eq!(
            OPERATOR_SCOPES.join(","),
            "SendMessage,SendStreamingMessage,murmur.WatchSession,GetTask,ListTasks,CancelTask,\
             SubscribeToTask,murmur.StopSession,resources/files,CreateTaskPushNotificationConfig,\
             GetTaskPushNotificationConfig,ListTaskPushNotificationConfigs,DeleteTaskPushNotificationConfig"
        );
    }
}
