//! Agent card signatures (A2A v1.0 §8.4, `AgentCardSignature`): a JWS (RFC 7515) over the JCS
//! form (RFC 8785, [`crate::jcs`]) of the card without its `signatures`, signed with Ed25519
//! (`"alg":"EdDSA"`, RFC 8037), its `kid` the key's RFC 7638 thumbprint.
//!
//! `protected` is the base64url of the canonical header `{"alg":"EdDSA","kid":…,"typ":"JOSE"}`,
//! `signature` the base64url of the Ed25519 signature of `protected || "." ||
//! base64url(JCS(card))`; the unprotected `header` carries the public key as a JWK, which tells
//! a reader which key signed but proves nothing: a caller verifies with the key it learned from
//! its launcher (docs/reference/door.md#agent-card).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _, VerifyingKey};
use serde_json::{Map, Value, json};
use sha2::{Digest as _, Sha256};

use crate::jcs;

/// A member's card signing key. The secret is zeroized on drop (ed25519-dalek's `zeroize`).
pub struct CardKey(SigningKey);

impl std::fmt::Debug for CardKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        write!(f, "CardKey({})", self.public().kid())
    }
}

/// Where a door serves its public agent card (A2A v1.0 §8.2, the well-known URI).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// The public half of a card key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CardVerifyKey(VerifyingKey);

/// Why a card's signature does not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CardSigError {
    #[error("the card carries no signatures")]
    Unsigned,
    #[error("the card's signature is malformed: {0}")]
    Malformed(&'static str),
    #[error("no signature of the card is by this key")]
    OtherKey,
    #[error("the card's signature does not match its contents")]
    Mismatch,
}

impl CardKey {
    /// A fresh key from the operating system's randomness.
    pub fn generate() -> Result<CardKey, getrandom::Error> {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::getrandom(seed.as_mut())?;
        Ok(CardKey::from_seed(&seed))
    }

    pub fn from_seed(seed: &[u8; 32]) -> CardKey {
        CardKey(SigningKey::from_bytes(seed))
    }

    pub fn public(&self) -> CardVerifyKey {
        CardVerifyKey(self.0.verifying_key())
    }

    /// `card` with `signatures` set to this key's one signature of the rest of it.
    pub fn sign(&self, card: &Value) -> Value {
        let mut card = card.clone();
        let bare = without_signatures(&card);
        let public = self.public();
        let protected = URL_SAFE_NO_PAD.encode(jcs::canonical(
            &json!({"alg": "EdDSA", "kid": public.kid(), "typ": "JOSE"}),
        ));
        let signature = self.0.sign(&signing_input(&protected, &bare));
        let entry = json!({
            "header": {"jwk": public.jwk()},
            "protected": protected,
            "signature": URL_SAFE_NO_PAD.encode(signature.to_bytes()),
        });
        if let Value::Object(o) = &mut card {
            o.insert("signatures".into(), Value::Array(vec![entry]));
        }
        card
    }
}

impl CardVerifyKey {
    /// The key as 32 raw bytes in base64url without padding (43 characters), as the formation
    /// channel carries verify keys.
    pub fn to_b64(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.0.as_bytes())
    }

    pub fn from_b64(s: &str) -> Option<CardVerifyKey> {
        let bytes = URL_SAFE_NO_PAD.decode(s).ok()?;
        let bytes: [u8; 32] = bytes.try_into().ok()?;
        VerifyingKey::from_bytes(&bytes).ok().map(CardVerifyKey)
    }

    /// `{"crv":"Ed25519","kty":"OKP","x":…}` (RFC 8037 §2).
    pub fn jwk(&self) -> Value {
        json!({"crv": "Ed25519", "kty": "OKP", "x": self.to_b64()})
    }

    /// The RFC 7638 thumbprint: base64url(SHA-256(the JWK's required members, canonical)).
    pub fn kid(&self) -> String {
        URL_SAFE_NO_PAD.encode(Sha256::digest(jcs::canonical(&self.jwk())))
    }
}

/// The card as signed: every member but `signatures`.
fn without_signatures(card: &Value) -> Value {
    match card {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| k.as_str() != "signatures")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// JWS signing input (RFC 7515 §5.1): `protected || "." || base64url(JCS(card))`.
fn signing_input(protected: &str, bare: &Value) -> Vec<u8> {
    let mut input = protected.as_bytes().to_vec();
    input.push(b'.');
    input.extend_from_slice(URL_SAFE_NO_PAD.encode(jcs::canonical(bare)).as_bytes());
    input
}

/// The key a card's first signature names in its unprotected header, if it names one. It says
/// which key signed, not that the card is genuine: check it against a key learned elsewhere.
pub fn named_key(card: &Value) -> Option<CardVerifyKey> {
    let jwk = card.get("signatures")?.get(0)?.get("header")?.get("jwk")?;
    if jwk.get("kty")? != "OKP" || jwk.get("crv")? != "Ed25519" {
        return None;
    }
    CardVerifyKey::from_b64(jwk.get("x")?.as_str()?)
}

/// Checks that `card` carries a signature by `key` over exactly its other members.
pub fn verify(card: &Value, key: &CardVerifyKey) -> Result<(), CardSigError> {
    let Some(Value::Array(sigs)) = card.get("signatures") else {
        return Err(CardSigError::Unsigned);
    };
    if sigs.is_empty() {
        return Err(CardSigError::Unsigned);
    }
    let bare = without_signatures(card);
    let kid = key.kid();
    let mut outcome = CardSigError::OtherKey;
    // A card may carry several signatures (one per key); only those naming this key count.
    for sig in sigs {
        let (Some(protected), Some(signature)) = (
            sig.get("protected").and_then(Value::as_str),
            sig.get("signature").and_then(Value::as_str),
        ) else {
            return Err(CardSigError::Malformed("a signature lacks `protected` or `signature`"));
        };
        let header: Value = URL_SAFE_NO_PAD
            .decode(protected)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or(CardSigError::Malformed("`protected` is not base64url JSON"))?;
        if header.get("kid").and_then(Value::as_str) != Some(kid.as_str()) {
            continue;
        }
        if header.get("alg").and_then(Value::as_str) != Some("EdDSA") {
            return Err(CardSigError::Malformed("`alg` is not EdDSA"));
        }
        let bytes: [u8; 64] = URL_SAFE_NO_PAD
            .decode(signature)
            .ok()
            .and_then(|b| b.try_into().ok())
            .ok_or(CardSigError::Malformed("`signature` is not 64 bytes of base64url"))?;
        let signature = ed25519_dalek::Signature::from_bytes(&bytes);
        match key.0.verify(&signing_input(protected, &bare), &signature) {
            Ok(()) => return Ok(()),
            Err(_) => outcome = CardSigError::Mismatch,
        }
    }
    Err(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card() -> Value {
        json!({
            "capabilities": {"streaming": true},
            "description": "writes code",
            "name": "local/coder",
            "skills": [{"id": "coder", "name": "local/coder", "tags": ["coder"], "description": "d"}],
            "version": "1.2.0",
        })
    }

    /// RFC 8037 Appendix A.3: the thumbprint of the RFC's Ed25519 key.
    #[test]
    fn the_kid_is_the_rfc_7638_thumbprint() {
        let x = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";
        let key = CardVerifyKey::from_b64(x).expect("key");
        assert_eq!(key.kid(), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
        assert_eq!(key.to_b64(), x);
    }

    #[test]
    fn a_signed_card_verifies_and_a_changed_byte_does_not() {
        let key = CardKey::from_seed(&[7; 32]);
        let signed = key.sign(&card());
        assert_eq!(verify(&signed, &key.public()), Ok(()));
        assert_eq!(named_key(&signed), Some(key.public()));
        // Signing is deterministic (Ed25519) and ignores signatures already there.
        assert_eq!(key.sign(&signed), signed);
        let sig = &signed["signatures"][0];
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(sig["protected"].as_str().unwrap_or_default())
                .unwrap_or_default(),
        )
        .expect("header");
        assert_eq!(
            header,
            json!({"alg": "EdDSA", "kid": key.public().kid(), "typ": "JOSE"})
        );

        // Member order does not matter (JCS); a changed value, member or signature does.
        let reordered: Value = serde_json::from_str(&serde_json::to_string(&signed).expect("json")).expect("json");
        assert_eq!(verify(&reordered, &key.public()), Ok(()));
        let mut changed = signed.clone();
        changed["version"] = json!("1.2.1");
        assert_eq!(verify(&changed, &key.public()), Err(CardSigError::Mismatch));
        let mut added = signed.clone();
        added["url"] = json!("http://elsewhere");
        assert_eq!(verify(&added, &key.public()), Err(CardSigError::Mismatch));
        let text = serde_json::to_string(&signed).expect("json");
        let flipped = text.replacen("writes code", "writes cone", 1);
        assert_eq!(
            verify(&serde_json::from_str(&flipped).expect("json"), &key.public()),
            Err(CardSigError::Mismatch)
        );

        let other = CardKey::from_seed(&[8; 32]);
        assert_eq!(verify(&signed, &other.public()), Err(CardSigError::OtherKey));
        assert_eq!(verify(&card(), &key.public()), Err(CardSigError::Unsigned));
        let mut bad = signed.clone();
        bad["signatures"][0]["signature"] = json!("AAAA");
        assert!(matches!(verify(&bad, &key.public()), Err(CardSigError::Malformed(_))));
        let mut no_protected = signed;
        no_protected["signatures"][0]["protected"] = json!("!!");
        assert!(matches!(
            verify(&no_protected, &key.public()),
            Err(CardSigError::Malformed(_))
        ));
    }
}
