//! Fuzzes `mft1` parsing and verification (docs/reference/door.md#formation-tokens) at the door of
//! `reviewer` in one formation.
//!
//! The key is random per process, so the fuzzer cannot forge; the property is exact: the only
//! strings that get past "invalid" are the genuine tokens minted below, byte for byte. Anything
//! else — altered payloads, swapped signatures, re-encodings, another formation's token — is
//! `Invalid`. The inputs are genuine tokens changed as `near_genuine` says.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../src/near_genuine.rs"]
mod near_genuine;
use mur_core::token::formation::{SigningKey, Verdict, VerifyKey, verify};

const FORMATION: &str = "frm_0123456789abcdef0123456789abcdef";
const OTHER: &str = "frm_fedcba9876543210fedcba9876543210";

struct Fixture {
    key: VerifyKey,
    /// (token, the verdict at reviewer's door in FORMATION).
    genuine: Vec<(String, Verdict)>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let Ok(sk) = SigningKey::generate() else {
            panic!("the OS CSPRNG is unavailable");
        };
        let genuine = vec![
            (
                sk.mint(FORMATION, "coder", "reviewer"),
                Verdict::Member { from: "coder".into() },
            ),
            (
                sk.mint(FORMATION, "reviewer", "coder"),
                Verdict::NotPermitted {
                    from: "reviewer".into(),
                },
            ),
            (sk.mint(OTHER, "coder", "reviewer"), Verdict::Invalid),
        ];
        Fixture {
            key: sk.verify_key(),
            genuine,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let genuine: Vec<&str> = f.genuine.iter().map(|(s, _)| s.as_str()).collect();
    let Some(candidate) = near_genuine::candidate(&genuine, "mft1", data) else {
        return;
    };
    let got = verify(&f.key, &candidate, FORMATION, "reviewer");
    let expected = f
        .genuine
        .iter()
        .find(|(t, _)| *t == candidate)
        .map_or(Verdict::Invalid, |(_, v)| v.clone());
    assert_eq!(got, expected, "{candidate:?}");
});
