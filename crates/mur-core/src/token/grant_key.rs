//! A member's grant key [ours] (docs/reference/formation.md#grants): 32 random bytes the
//! launcher draws for each member and hands only to it, over its authority channel. The launcher
//! seals each grant with the key of the member that will run under it (HMAC-SHA256), and that
//! member's door opens it with the same key, as a ticket is sealed for its one service: a caller
//! holds no key that seals a grant for anyone else, so it cannot forge one for its callee.
//!
//! A MAC rather than the formation's Ed25519 signature because a grant is made and checked on
//! every call's path, and each is about 1 µs instead of the signature's 20 and the strict
//! verification's 50 (docs/performance.md §8b). What a MAC gives up, verification by anyone
//! holding a public key, no one uses: only the callee reads a grant, and the launcher's own
//! record of every grant it made is what narrows the next one.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use zeroize::Zeroizing;

use super::{b64, random_32, signing_input, split_token, unb64};
use crate::secret::Secret;

type HmacSha256 = Hmac<Sha256>;

/// One member's grant key, wiped on drop; `Debug` shows nothing of it.
#[derive(Clone)]
pub struct GrantKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for GrantKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantKey(<secret>)")
    }
}

impl PartialEq for GrantKey {
    /// In time that does not depend on where the keys differ.
    fn eq(&self, other: &GrantKey) -> bool {
        self.0.iter().zip(other.0.iter()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
    }
}

impl Eq for GrantKey {}

impl GrantKey {
    pub fn generate() -> Result<GrantKey, std::io::Error> {
        random_32().map(GrantKey)
    }

    /// Its spelling on the authority channel: B64, 43 characters. A secret the launcher passes
    /// on to the member it was drawn for, not one it holds as its own credential.
    pub fn to_wire(&self) -> Secret {
        Secret::passed_on(b64(self.0.as_ref()))
    }

    /// Reads [`GrantKey::to_wire`]'s spelling; `None` for anything but 32 bytes.
    pub fn from_wire(s: &str) -> Option<GrantKey> {
        let bytes = Zeroizing::new(unb64(s)?);
        let mut key = Zeroizing::new([0u8; 32]);
        (bytes.len() == 32).then(|| {
            key.copy_from_slice(&bytes);
            GrantKey(key)
        })
    }

    /// `<tag>.<B64(payload)>.<B64(HMAC-SHA256(key, domain 0x1F tag 0x1F B64(payload)))>`.
    pub(crate) fn seal(&self, domain: &str, tag: &str, payload: &[u8]) -> String {
        let payload_b64 = b64(payload);
        let mac = self
            .mac()
            .chain_update(signing_input(domain, Some(tag), &payload_b64))
            .finalize();
        format!("{tag}.{payload_b64}.{}", b64(&mac.into_bytes()))
    }

    /// The payload of a [`GrantKey::seal`]ed string when its MAC is this key's under `domain`
    /// (compared in constant time; a MAC of another length is refused).
    pub(crate) fn open(&self, domain: &str, tag: &str, sealed: &str) -> Option<Vec<u8>> {
        let (payload_b64, payload, mac) = split_token(sealed, tag)?;
        self.mac()
            .chain_update(signing_input(domain, Some(tag), payload_b64))
            .verify_slice(&mac)
            .ok()?;
        Some(payload)
    }

    fn mac(&self) -> HmacSha256 {
        // HMAC takes keys of any length, so this cannot fail; the fallback keeps it panic-free.
        HmacSha256::new_from_slice(self.0.as_ref()).unwrap_or_else(|_| HmacSha256::new(&Default::default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_travels_as_43_characters_and_reads_back_as_itself() {
        let k = GrantKey::generate().unwrap();
        let wire = k.to_wire();
        assert_eq!(wire.reveal().len(), 43);
        assert_eq!(GrantKey::from_wire(wire.reveal()), Some(k.clone()));
        assert!(!format!("{k:?}").contains(wire.reveal()));
        for bad in ["", "AAAA", &wire.reveal()[..42], &format!("{}A", wire.reveal()), "!!!"] {
            assert_eq!(GrantKey::from_wire(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_the_key_that_sealed_opens() {
        let (k, other) = (GrantKey::generate().unwrap(), GrantKey::generate().unwrap());
        let sealed = k.seal("d", "t", b"{}");
        assert_eq!(k.open("d", "t", &sealed), Some(b"{}".to_vec()));
        let (head, mac) = sealed.rsplit_once('.').unwrap();
        let mut flipped = unb64(mac).unwrap();
        flipped[0] ^= 1;
        let table = [
            ("another key", other.open("d", "t", &sealed)),
            ("another domain", k.open("e", "t", &sealed)),
            ("another tag", k.open("d", "u", &sealed)),
            ("a flipped MAC", k.open("d", "t", &format!("{head}.{}", b64(&flipped)))),
            (
                "a short MAC",
                k.open("d", "t", &format!("{head}.{}", b64(&flipped[..16]))),
            ),
            (
                "another payload",
                k.open("d", "t", &format!("t.{}.{mac}", b64(b"{\"a\":1}"))),
            ),
        ];
        for (what, got) in table {
            assert_eq!(got, None, "{what}");
        }
    }
}
