//! The door token `mdt1` (docs/reference/door.md#authentication): minted and verified by one
//! session's door with a per-session key held only in memory, so the MAC input is not an interop
//! surface.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::{OPERATOR_SCOPES, b64, json_str, random_32, signing_input, split_token};

const TAG: &str = "mdt1";
const DOMAIN: &str = "murmur-door-token-v1";

type HmacSha256 = Hmac<Sha256>;

/// 32 random bytes, wiped on drop; neither `Clone` nor `Debug`-revealing.
pub struct DoorKey(zeroize::Zeroizing<[u8; 32]>);

impl std::fmt::Debug for DoorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DoorKey(<secret>)")
    }
}

/// A door credential a valid `mdt1` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoorCredential {
    /// `"operator"` for the operator token.
    pub credential: String,
    pub scopes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    credential: String,
    scopes: Vec<String>,
}

impl DoorKey {
    pub fn generate() -> Result<DoorKey, std::io::Error> {
        random_32().map(DoorKey)
    }

    /// The operator token: `{"credential":"operator","scopes":[every door scope]}`.
    pub fn mint_operator(&self) -> String {
        let scopes: Vec<String> = OPERATOR_SCOPES.iter().map(|s| json_str(s)).collect();
        let payload = format!("{{\"credential\":\"operator\",\"scopes\":[{}]}}", scopes.join(","));
        let payload_b64 = b64(payload.as_bytes());
        let mac = self
            .mac()
            .chain_update(signing_input(DOMAIN, None, &payload_b64))
            .finalize();
        format!("{TAG}.{payload_b64}.{}", b64(&mac.into_bytes()))
    }

    /// The credential of a token this key minted; `None` for anything else.
    pub fn verify(&self, token: &str) -> Option<DoorCredential> {
        let (payload_b64, payload, mac) = split_token(token, TAG)?;
        // verify_slice compares in constant time and refuses a MAC of the wrong length.
        self.mac()
            .chain_update(signing_input(DOMAIN, None, payload_b64))
            .verify_slice(&mac)
            .ok()?;
        if payload.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return None;
        }
        let p: Payload = serde_json::from_slice(&payload).ok()?;
        (!p.credential.is_empty()).then_some(DoorCredential {
            credential: p.credential,
            scopes: p.scopes,
        })
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length, so this cannot fail; the fallback keeps it panic-free.
        HmacSha256::new_from_slice(self.0.as_ref()).unwrap_or_else(|_| HmacSha256::new(&Default::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::unb64;

    fn forge(key: &DoorKey, payload: &str) -> String {
        let p = b64(payload.as_bytes());
        let mac = key.mac().chain_update(signing_input(DOMAIN, None, &p)).finalize();
        format!("mdt1.{p}.{}", b64(&mac.into_bytes()))
    }

    #[test]
    fn operator_token_round_trip_and_layout() {
        let k = DoorKey::generate().unwrap();
        let t = k.mint_operator();
        let segs: Vec<&str> = t.split('.').collect();
        assert_eq!(segs[0], "mdt1");
        assert_eq!(
            String::from_utf8(unb64(segs[1]).unwrap()).unwrap(),
            r#"{"credential":"operator","scopes":["SendMessage","SendStreamingMessage","murmur.WatchSession","GetTask","ListTasks","CancelTask","SubscribeToTask","murmur.StopSession","resources/files","CreateTaskPushNotificationConfig","GetTaskPushNotificationConfig","ListTaskPushNotificationConfigs","DeleteTaskPushNotificationConfig"]}"#
        );
        assert_eq!(unb64(segs[2]).unwrap().len(), 32);
        let mut input = b"murmur-door-token-v1\x1f".to_vec();
        input.extend_from_slice(segs[1].as_bytes());
        let want = HmacSha256::new_from_slice(k.0.as_ref())
            .unwrap()
            .chain_update(&input)
            .finalize();
        assert_eq!(segs[2], b64(&want.into_bytes()));
        let cred = k.verify(&t).unwrap();
        assert_eq!(cred.credential, "operator");
        assert_eq!(cred.scopes, OPERATOR_SCOPES.map(String::from).to_vec());
        assert!(!format!("{k:?}").contains(segs[2]));
    }

    #[test]
    fn tampered_or_foreign_tokens_are_refused() {
        let k = DoorKey::generate().unwrap();
        let t = k.mint_operator();
        let segs: Vec<&str> = t.split('.').collect();
        let (p, m) = (segs[1], segs[2]);
        let mac = unb64(m).unwrap();
        let mut flipped = mac.clone();
        flipped[0] ^= 0x80;
        let narrowed = b64(br#"{"credential":"operator","scopes":["resources/files"]}"#);
        let table: Vec<(&str, String)> = vec![
            ("other door", DoorKey::generate().unwrap().mint_operator()),
            ("formation tag", format!("mft1.{p}.{m}")),
            ("two segments", format!("mdt1.{p}")),
            ("four segments", format!("{t}.x")),
            ("flipped mac", format!("mdt1.{p}.{}", b64(&flipped))),
            ("short mac", format!("mdt1.{p}.{}", b64(&mac[..31]))),
            ("empty mac", format!("mdt1.{p}.")),
            ("empty payload", format!("mdt1..{m}")),
            ("swapped payload", format!("mdt1.{narrowed}.{m}")),
            ("bad b64", format!("mdt1.{p}.{m}=")),
            ("mac-valid array", forge(&k, r#"["operator",[]]"#)),
            (
                "mac-valid extra key",
                forge(&k, r#"{"credential":"operator","scopes":[],"x":1}"#),
            ),
            ("mac-valid missing scopes", forge(&k, r#"{"credential":"operator"}"#)),
            (
                "mac-valid non-string scope",
                forge(&k, r#"{"credential":"operator","scopes":[1]}"#),
            ),
            (
                "mac-valid empty credential",
                forge(&k, r#"{"credential":"","scopes":[]}"#),
            ),
        ];
        for (why, tok) in &table {
            assert_eq!(k.verify(tok), None, "{why}");
        }
    }
}
