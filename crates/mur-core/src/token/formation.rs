//! The formation token `mft1` (docs/reference/door.md#formation-tokens).
//!
//! The launcher's `SigningKey` signs one token per edge; every member's door holds only the
//! `VerifyKey`, which cannot sign. Tokens never expire: the key dies with the formation.

use ed25519_dalek::{Signature, Signer as _};
use serde::Deserialize;

use super::{b64, json_str, random_32, signing_input, split_token, unb64};
use crate::names;

const TAG: &str = "mft1";
const DOMAIN: &str = "murmur-formation-token-v1";

/// The formation's signing key. Lives only in the launcher's memory; the inner key zeroizes itself
/// on drop (ed25519-dalek's `zeroize` feature). Deliberately neither `Clone` nor `Debug`-revealing.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(<secret>)")
    }
}

impl SigningKey {
    /// 32 bytes from the OS CSPRNG.
    pub fn generate() -> Result<SigningKey, std::io::Error> {
        let seed = random_32()?;
        Ok(SigningKey(ed25519_dalek::SigningKey::from_bytes(&seed)))
    }

    pub fn verify_key(&self) -> VerifyKey {
        VerifyKey(self.0.verifying_key())
    }

    /// `mft1.<B64(payload)>.<B64(signature)>` for the edge `from → to` in `formation`.
    /// The caller passes a formation id and member names that admission already checked.
    pub fn mint(&self, formation: &str, from: &str, to: &str) -> String {
        let payload_b64 = b64(payload_bytes(formation, from, to).as_bytes());
        let sig = self.0.sign(&signing_input(DOMAIN, Some(TAG), &payload_b64));
        format!("{TAG}.{payload_b64}.{}", b64(&sig.to_bytes()))
    }

    /// The token of each edge `(from, to)`, byte for byte what [`SigningKey::mint`] gives
    /// (Ed25519 signatures are deterministic), at about four fifths of its cost.
    ///
    /// Most of a signature is computing `R = r·B` and compressing it, and compressing takes a
    /// field inversion (a fifth of the whole). Here the `R`s of a run of edges are compressed
    /// together, sharing one inversion (curve25519-dalek's `compress_batch_alloc`); the rest is
    /// RFC 8032's signing as ed25519-dalek does it, from the same expanded key. The nonces `r`
    /// are secret like the key, and are zeroized with it.
    pub fn mint_many<'a>(&self, formation: &str, edges: &[(&'a str, &'a str)]) -> Vec<String> {
        use curve25519_dalek::{EdwardsPoint, Scalar};
        use sha2::{Digest as _, Sha512};
        use zeroize::Zeroizing;

        let expanded = ed25519_dalek::hazmat::ExpandedSecretKey::from(self.0.as_bytes());
        let public = self.0.verifying_key();
        let mut out = Vec::with_capacity(edges.len());
        // A run long enough that its one inversion is negligible, short enough to stay in cache.
        for run in edges.chunks(MINT_RUN) {
            let payloads: Vec<String> = run
                .iter()
                .map(|(from, to)| b64(payload_bytes(formation, from, to).as_bytes()))
                .collect();
            let messages: Vec<Vec<u8>> = payloads.iter().map(|p| signing_input(DOMAIN, Some(TAG), p)).collect();
            let nonces: Zeroizing<Vec<Scalar>> = Zeroizing::new(
                messages
                    .iter()
                    .map(|m| {
                        let h: [u8; 64] = Sha512::new()
                            .chain_update(expanded.hash_prefix)
                            .chain_update(m)
                            .finalize()
                            .into();
                        Scalar::from_bytes_mod_order_wide(&h)
                    })
                    .collect(),
            );
            let commitments: Vec<EdwardsPoint> = nonces.iter().map(EdwardsPoint::mul_base).collect();
            let compressed = EdwardsPoint::compress_batch_alloc(&commitments);
            for ((payload, message), (r, big_r)) in payloads.iter().zip(&messages).zip(nonces.iter().zip(&compressed)) {
                let h: [u8; 64] = Sha512::new()
                    .chain_update(big_r.as_bytes())
                    .chain_update(public.as_bytes())
                    .chain_update(message)
                    .finalize()
                    .into();
                let s = Scalar::from_bytes_mod_order_wide(&h) * expanded.scalar + r;
                let mut sig = [0u8; 64];
                sig[..32].copy_from_slice(big_r.as_bytes());
                sig[32..].copy_from_slice(s.as_bytes());
                out.push(format!("{TAG}.{payload}.{}", b64(&sig)));
            }
        }
        out
    }
}

/// Edges whose `R`s [`SigningKey::mint_many`] compresses together.
const MINT_RUN: usize = 64;

/// Compact payload, keys in ascending byte order (docs/reference/cli.md#conventions).
fn payload_bytes(formation: &str, from: &str, to: &str) -> String {
    format!(
        "{{\"formation\":{},\"from\":{},\"to\":{}}}",
        json_str(formation),
        json_str(from),
        json_str(to)
    )
}

/// The public half, handed to every member on its channel.
#[derive(Clone, PartialEq, Eq)]
pub struct VerifyKey(ed25519_dalek::VerifyingKey);

impl std::fmt::Debug for VerifyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyKey({})", self.to_b64())
    }
}

impl VerifyKey {
    /// The 32 raw bytes as B64: 43 characters.
    pub fn to_b64(&self) -> String {
        b64(self.0.as_bytes())
    }

    /// Refuses anything but 43 B64 characters that decode to a valid curve point.
    pub fn from_b64(s: &str) -> Option<VerifyKey> {
        let bytes: [u8; 32] = unb64(s)?.try_into().ok()?;
        ed25519_dalek::VerifyingKey::from_bytes(&bytes).ok().map(VerifyKey)
    }
}

/// What a door makes of a formation token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Forged, altered, malformed or another formation's: 401 `invalid_token`.
    Invalid,
    /// Genuine, but issued for another member's door: 403 `not_permitted` naming `from`.
    NotPermitted { from: String },
    /// The credential `member:<from>` with `FORMATION_SCOPES`.
    Member { from: String },
}

/// Exactly these three string keys; `deny_unknown_fields` also refuses duplicated keys.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    formation: String,
    from: String,
    to: String,
}

/// docs/reference/door.md#formation-tokens checks 1–6, at the door of `door_member` in `formation`.
pub fn verify(key: &VerifyKey, token: &str, formation: &str, door_member: &str) -> Verdict {
    let Some(payload) = verified_payload(key, token) else {
        return Verdict::Invalid;
    };
    if payload.formation != formation {
        return Verdict::Invalid;
    }
    if payload.to != door_member {
        return Verdict::NotPermitted { from: payload.from };
    }
    Verdict::Member { from: payload.from }
}

/// Checks 1–3: shape, signature over the transmitted payload bytes, payload shape.
fn verified_payload(key: &VerifyKey, token: &str) -> Option<Payload> {
    let (signed, sig, p) = unverified(token)?;
    // Strict verification refuses malleable signatures and weak keys; honest ones always pass.
    key.0.verify_strict(&signed, &sig).ok()?;
    Some(p)
}

/// Checks 1 and 3 without the signature: the signed bytes, the signature and the payload.
fn unverified(token: &str) -> Option<(Vec<u8>, Signature, Payload)> {
    let (payload_b64, payload, sig) = split_token(token, TAG)?;
    let sig = Signature::from_slice(&sig).ok()?;
    // serde would also read a struct from a JSON array; the payload must be an object.
    if payload.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let p: Payload = serde_json::from_slice(&payload).ok()?;
    (names::is_member(&p.from) && names::is_member(&p.to))
        .then(|| (signing_input(DOMAIN, Some(TAG), payload_b64), sig, p))
}

/// Whether every `(callee, token)` of a member's first line is a token of `formation` issued to
/// `member` for that callee under `key` (docs/reference/door.md#formation-tokens); `Err(i)` names the first that is not,
/// exactly as [`verify`] would judge it.
///
/// A member of a 256-member `reachability: all` formation holds 255 tokens, and every member
/// checks its own before it starts: one Ed25519 verification each (~50 µs) made that the largest
/// cost of launching such a formation. All of them share one key, so they are checked in one
/// batch ([`batch_under_one_key`], a fifth of the work per token at this size). A batch
/// that fails is checked token by token to name the culprit. Like any randomized batch, it may
/// accept (with a probability the random weights set) a signature whose error is a small-order
/// point, which [`verify`] refuses; only the holder of the signing key (the launcher that wrote
/// the line) can make one, and every door still verifies each presented token strictly.
pub fn verify_issued<'a>(
    key: &VerifyKey,
    formation: &str,
    member: &str,
    calls: impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
) -> Result<(), usize> {
    let one_by_one = |calls: &mut dyn Iterator<Item = (&'a str, &'a str)>| {
        for (i, (callee, token)) in calls.enumerate() {
            match verify(key, token, formation, callee) {
                Verdict::Member { from } if from == member => {}
                _ => return Err(i),
            }
        }
        Ok(())
    };
    if calls.len() < BATCH_FROM {
        return one_by_one(&mut calls.clone());
    }
    let mut signed = Vec::with_capacity(calls.len());
    let mut sigs = Vec::with_capacity(calls.len());
    for (callee, token) in calls.clone() {
        match unverified(token) {
            Some((m, sig, p)) if p.formation == formation && p.from == member && p.to == callee => {
                signed.push(m);
                sigs.push(sig);
            }
            // The claims are wrong: the token-by-token pass names it.
            _ => return one_by_one(&mut calls.clone()),
        }
    }
    // A weak key is refused as `verify_strict` refuses it; the batch does not look.
    if !key.0.is_weak() && batch_under_one_key(&key.0, &signed, &sigs) {
        return Ok(());
    }
    one_by_one(&mut calls.clone())
}

/// ed25519-dalek's `verify_batch` equation, for signatures that all share one key:
/// `−(∑ zᵢsᵢ)·B + ∑ zᵢ·Rᵢ + (∑ zᵢhᵢ)·A = 0`, with `hᵢ = H(Rᵢ ‖ A ‖ Mᵢ)` and random 128-bit
/// weights `zᵢ`. `verify_batch` takes one key per signature and so multiplies `A` once per
/// signature (2n + 1 points); with one key its terms add up to a single one (n + 2 points),
/// about half the multiscalar work. The weights come from the OS's random source, drawn after
/// the signatures are fixed, so a signer cannot aim at them. A non-canonical `s` or an `R` that
/// is not a point fails the batch, as there.
fn batch_under_one_key(key: &ed25519_dalek::VerifyingKey, messages: &[Vec<u8>], sigs: &[Signature]) -> bool {
    use curve25519_dalek::traits::{IsIdentity as _, VartimeMultiscalarMul as _};
    use curve25519_dalek::{EdwardsPoint, Scalar, constants::ED25519_BASEPOINT_POINT, edwards::CompressedEdwardsY};
    use sha2::{Digest as _, Sha512};

    let mut weights = vec![0u8; 16 * sigs.len()];
    if getrandom::getrandom(&mut weights).is_err() {
        return false;
    }
    let a = key.as_bytes();
    let (mut b_coefficient, mut a_coefficient) = (Scalar::ZERO, Scalar::ZERO);
    let mut scalars = Vec::with_capacity(sigs.len() + 2);
    let mut points = Vec::with_capacity(sigs.len() + 2);
    for ((message, sig), w) in messages.iter().zip(sigs).zip(weights.chunks_exact(16)) {
        let mut z = [0u8; 32];
        z[..16].copy_from_slice(w);
        let z = Scalar::from_bytes_mod_order(z);
        let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(*sig.s_bytes())) else {
            return false;
        };
        let Some(r) = CompressedEdwardsY(*sig.r_bytes()).decompress() else {
            return false;
        };
        let hram: [u8; 64] = Sha512::new()
            .chain_update(sig.r_bytes())
            .chain_update(a)
            .chain_update(message)
            .finalize()
            .into();
        b_coefficient += z * s;
        a_coefficient += z * Scalar::from_bytes_mod_order_wide(&hram);
        scalars.push(z);
        points.push(r);
    }
    scalars.push(-b_coefficient);
    points.push(ED25519_BASEPOINT_POINT);
    scalars.push(a_coefficient);
    points.push(key.to_edwards());
    EdwardsPoint::vartime_multiscalar_mul(scalars, points).is_identity()
}

/// Tokens from which one batch is cheaper than one verification each.
const BATCH_FROM: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
    const OTHER_FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728395";

    /// Signs arbitrary payload bytes under `key`, as a forger holding the key could.
    fn sign_raw(key: &SigningKey, tag: &str, payload: &[u8]) -> String {
        let p = b64(payload);
        let sig = key.0.sign(&signing_input(DOMAIN, Some(TAG), &p));
        format!("{tag}.{p}.{}", b64(&sig.to_bytes()))
    }

    #[test]
    fn the_one_key_batch_accepts_exactly_what_single_verification_accepts() {
        // The batch alone (verify_issued falls back to one by one, which would hide a batch that
        // refuses genuine signatures): genuine sets pass, any single bad signature fails it.
        let k = SigningKey::generate().unwrap();
        let other = SigningKey::generate().unwrap();
        let input = |i: usize| signing_input(DOMAIN, Some(TAG), &format!("payload {i}"));
        let set = |n: usize| -> (Vec<Vec<u8>>, Vec<Signature>) {
            let messages: Vec<Vec<u8>> = (0..n).map(input).collect();
            let sigs = messages.iter().map(|m| k.0.sign(m)).collect();
            (messages, sigs)
        };
        let key = k.verify_key().0;
        for n in [1, 2, 8, 255] {
            let (messages, sigs) = set(n);
            assert!(batch_under_one_key(&key, &messages, &sigs), "{n} genuine signatures");
        }
        type Spoil = fn(&SigningKey, &mut Vec<Vec<u8>>, &mut Vec<Signature>);
        let table: [(&str, Spoil); 5] = [
            ("another key's signature", |o, m, s| s[17] = o.0.sign(&m[17])),
            ("another message", |_, m, _| m[40].push(b'x')),
            ("two signatures swapped", |_, _, s| s.swap(3, 4)),
            ("s not canonical", |_, _, s| {
                let mut b = s[9].to_bytes();
                b[63] |= 0xf0;
                s[9] = Signature::from_bytes(&b);
            }),
            ("R not a point", |_, _, s| {
                let mut b = s[60].to_bytes();
                // The first small y that names no point of the curve.
                let y = (2u8..)
                    .map(|y| {
                        let mut r = [0u8; 32];
                        r[0] = y;
                        r
                    })
                    .find(|r| curve25519_dalek::edwards::CompressedEdwardsY(*r).decompress().is_none())
                    .unwrap();
                b[..32].copy_from_slice(&y);
                s[60] = Signature::from_bytes(&b);
            }),
        ];
        for (what, spoil) in table {
            let (mut messages, mut sigs) = set(64);
            spoil(&other, &mut messages, &mut sigs);
            assert!(!batch_under_one_key(&key, &messages, &sigs), "{what}");
        }
        // Under another key than the one that signed.
        let (messages, sigs) = set(64);
        assert!(!batch_under_one_key(&other.verify_key().0, &messages, &sigs));
    }

    #[test]
    fn a_first_lines_tokens_are_checked_in_one_batch_and_a_bad_one_is_named() {
        let k = SigningKey::generate().unwrap();
        let other = SigningKey::generate().unwrap();
        let vk = k.verify_key();
        let callees: Vec<String> = (0..40).map(|i| format!("w{i:02}")).collect();
        let genuine = |n: usize| -> Vec<(String, String)> {
            callees[..n]
                .iter()
                .map(|c| (c.clone(), k.mint(FRM, "lead", c)))
                .collect()
        };
        // (the formation's key, another key, the calls)
        type Spoil = fn(&SigningKey, &SigningKey, &mut Vec<(String, String)>);
        // (calls, how one is spoiled, the index named)
        let table: Vec<(usize, Spoil, Result<(), usize>)> = vec![
            (40, |_, _, _| {}, Ok(())),
            (3, |_, _, _| {}, Ok(())),
            (0, |_, _, _| {}, Ok(())),
            // Signed by another key: only the signature is wrong, so the batch fails.
            (40, |_, o, c| c[13].1 = o.mint(FRM, "lead", &c[13].0), Err(13)),
            (3, |_, o, c| c[2].1 = o.mint(FRM, "lead", &c[2].0), Err(2)),
            // Genuine tokens with the wrong claims: another callee's, another caller's, another
            // formation's.
            (
                40,
                |_, _, c| {
                    let seventh = std::mem::take(&mut c[7].1);
                    c[7].1 = std::mem::replace(&mut c[8].1, seventh);
                },
                Err(7),
            ),
            (40, |k, _, c| c[39].1 = k.mint(FRM, "w05", &c[39].0), Err(39)),
            (40, |k, _, c| c[0].1 = k.mint(OTHER_FRM, "lead", &c[0].0), Err(0)),
            // One flipped signature byte, and garbage.
            (
                40,
                |_, _, c| {
                    // Keys are random per run: pick a byte other than the one there, or nothing flips.
                    let t = &mut c[21].1;
                    let at = t.len() - 2;
                    let other = if &t[at..at + 1] == "A" { "B" } else { "A" };
                    t.replace_range(at..at + 1, other);
                },
                Err(21),
            ),
            (40, |_, _, c| c[30].1 = "mft1.e30.AAAA".into(), Err(30)),
        ];
        for (n, spoil, want) in table {
            let mut calls = genuine(n);
            spoil(&k, &other, &mut calls);
            let got = verify_issued(&vk, FRM, "lead", calls.iter().map(|(c, t)| (c.as_str(), t.as_str())));
            assert_eq!(got, want, "{n} calls");
        }
    }

    #[test]
    fn minting_many_gives_exactly_the_tokens_of_minting_one_by_one() {
        // Ed25519 is deterministic: sharing the inversions must not change a single byte. Runs
        // shorter than, equal to and longer than MINT_RUN, and
        // several keys (including fixed ones, so a failure can be replayed).
        let names = ["planner", "coder", "a", "b-2", "x-y", "reviewer"];
        let mut keys: Vec<SigningKey> = [[0u8; 32], [7u8; 32], [0xff; 32]]
            .iter()
            .map(|seed| SigningKey(ed25519_dalek::SigningKey::from_bytes(seed)))
            .collect();
        keys.push(SigningKey::generate().unwrap());
        for key in &keys {
            for n in [0, 1, 5, MINT_RUN, MINT_RUN + 1, 3 * MINT_RUN + 7] {
                let edges: Vec<(&str, &str)> = (0..n)
                    .map(|i| (names[i % names.len()], names[(i / names.len() + 1 + i) % names.len()]))
                    .collect();
                let many = key.mint_many(FRM, &edges);
                assert_eq!(many.len(), n);
                for ((from, to), token) in edges.iter().zip(&many) {
                    assert_eq!(token, &key.mint(FRM, from, to), "{n} edges, {from} → {to}");
                    assert_eq!(
                        verify(&key.verify_key(), token, FRM, to),
                        Verdict::Member { from: from.to_string() }
                    );
                }
            }
        }
    }

    #[test]
    fn mint_verify_round_trip() {
        let k = SigningKey::generate().unwrap();
        let t = k.mint(FRM, "planner", "coder");
        let vk = k.verify_key();
        assert_eq!(
            verify(&vk, &t, FRM, "coder"),
            Verdict::Member { from: "planner".into() }
        );
        assert_eq!(
            verify(&vk, &t, FRM, "reviewer"),
            Verdict::NotPermitted { from: "planner".into() }
        );
        assert_eq!(verify(&vk, &t, OTHER_FRM, "coder"), Verdict::Invalid);
        let other = SigningKey::generate().unwrap().verify_key();
        assert_eq!(verify(&other, &t, FRM, "coder"), Verdict::Invalid);
        assert_ne!(vk, other);
    }

    #[test]
    fn token_layout_and_signing_input_are_exact() {
        let k = SigningKey(ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]));
        let t = k.mint(FRM, "planner", "coder");
        let segs: Vec<&str> = t.split('.').collect();
        assert_eq!(segs.len(), 3);
        assert_eq!(segs[0], "mft1");
        let payload = unb64(segs[1]).unwrap();
        assert_eq!(
            String::from_utf8(payload).unwrap(),
            format!(r#"{{"formation":"{FRM}","from":"planner","to":"coder"}}"#)
        );
        let sig = unb64(segs[2]).unwrap();
        assert_eq!(sig.len(), 64);
        let mut input = b"murmur-formation-token-v1\x1fmft1\x1f".to_vec();
        input.extend_from_slice(segs[1].as_bytes());
        let sig = Signature::from_slice(&sig).unwrap();
        assert!(k.verify_key().0.verify_strict(&input, &sig).is_ok());
        // Ed25519 is deterministic: the same key and edge give the same token.
        assert_eq!(t, k.mint(FRM, "planner", "coder"));
    }

    #[test]
    fn verify_key_wire_form() {
        let vk = SigningKey::generate().unwrap().verify_key();
        let s = vk.to_b64();
        assert_eq!(s.len(), 43);
        assert_eq!(VerifyKey::from_b64(&s), Some(vk));
        let table: &[&str] = &["", "AAAA", &format!("{s}="), &s[..42], &format!("{s}A")];
        for bad in table {
            assert_eq!(VerifyKey::from_b64(bad), None, "{bad:?}");
        }
        assert!(!format!("{:?}", SigningKey::generate().unwrap()).contains(&s));
    }

    #[test]
    fn every_malformed_or_forged_token_is_invalid() {
        let k = SigningKey::generate().unwrap();
        let vk = k.verify_key();
        let good = k.mint(FRM, "planner", "coder");
        let segs: Vec<&str> = good.split('.').collect();
        let (p, s) = (segs[1], segs[2]);
        let sig = unb64(s).unwrap();
        let mut flipped = sig.clone();
        flipped[10] ^= 1;
        let other_key = SigningKey::generate().unwrap();
        let altered = b64(format!(r#"{{"formation":"{FRM}","from":"planner","to":"coderx"}}"#).as_bytes());
        let table: Vec<(&str, String)> = vec![
            ("two segments", format!("mft1.{p}")),
            ("four segments", format!("{good}.x")),
            ("wrong tag", format!("mdt1.{p}.{s}")),
            ("upper tag", format!("MFT1.{p}.{s}")),
            ("bad payload b64", format!("mft1.{p}*.{s}")),
            ("padded payload", format!("mft1.{p}=.{s}")),
            ("bad signature b64", format!("mft1.{p}.{s}!")),
            ("empty payload", format!("mft1..{s}")),
            ("empty signature", format!("mft1.{p}.")),
            ("63-byte signature", format!("mft1.{p}.{}", b64(&sig[..63]))),
            (
                "65-byte signature",
                format!("mft1.{p}.{}", b64(&[sig.as_slice(), &[0]].concat())),
            ),
            ("flipped signature", format!("mft1.{p}.{}", b64(&flipped))),
            ("altered payload", format!("mft1.{altered}.{s}")),
            ("other key", other_key.mint(FRM, "planner", "coder")),
            ("whitespace", format!(" {good}")),
            ("empty", String::new()),
        ];
        for (why, t) in &table {
            assert_eq!(verify(&vk, t, FRM, "coder"), Verdict::Invalid, "{why}");
        }
    }

    #[test]
    fn signed_payloads_of_the_wrong_shape_are_invalid() {
        let k = SigningKey::generate().unwrap();
        let vk = k.verify_key();
        let table: &[(&str, String)] = &[
            (
                "extra key",
                format!(r#"{{"formation":"{FRM}","from":"a","to":"coder","x":"y"}}"#),
            ),
            ("missing to", format!(r#"{{"formation":"{FRM}","from":"a"}}"#)),
            (
                "duplicate key",
                format!(r#"{{"formation":"{FRM}","from":"a","to":"coder","to":"coder"}}"#),
            ),
            (
                "number value",
                format!(r#"{{"formation":"{FRM}","from":1,"to":"coder"}}"#),
            ),
            ("null value", r#"{"formation":null,"from":"a","to":"coder"}"#.into()),
            ("array payload", format!(r#"["{FRM}","a","coder"]"#)),
            ("not json", "formation=x".into()),
            (
                "trailing data",
                format!(r#"{{"formation":"{FRM}","from":"a","to":"coder"}}x"#),
            ),
            (
                "bad from",
                format!(r#"{{"formation":"{FRM}","from":"A","to":"coder"}}"#),
            ),
            (
                "empty from",
                format!(r#"{{"formation":"{FRM}","from":"","to":"coder"}}"#),
            ),
            (
                "long from",
                format!(r#"{{"formation":"{FRM}","from":"{}","to":"coder"}}"#, "a".repeat(33)),
            ),
            ("bad to", format!(r#"{{"formation":"{FRM}","from":"a","to":"Coder"}}"#)),
            (
                "other formation",
                format!(r#"{{"formation":"{OTHER_FRM}","from":"a","to":"coder"}}"#),
            ),
        ];
        for (why, payload) in table {
            let t = sign_raw(&k, "mft1", payload.as_bytes());
            assert_eq!(verify(&vk, &t, FRM, "coder"), Verdict::Invalid, "{why}");
        }
        // Key order is not a verifier's concern: it works on the transmitted bytes.
        let reordered = format!(r#"{{ "to":"coder","from":"a","formation":"{FRM}"}}"#);
        let t = sign_raw(&k, "mft1", reordered.as_bytes());
        assert_eq!(verify(&vk, &t, FRM, "coder"), Verdict::Member { from: "a".into() });
    }

    #[test]
    fn names_needing_escapes_stay_inside_their_strings() {
        // mint trusts its caller, but even a hostile name cannot inject a key.
        let k = SigningKey::generate().unwrap();
        let t = k.mint(FRM, "a\",\"to\":\"coder", "b");
        assert_eq!(verify(&k.verify_key(), &t, FRM, "coder"), Verdict::Invalid);
    }
}
