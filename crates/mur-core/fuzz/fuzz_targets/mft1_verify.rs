//! Fuzzes `mft1` parsing and verification (docs/reference/door.md#formation-tokens) at the door of
//! `reviewer` in one formation.
//!
//! The key is random per process, so the fuzzer cannot forge; the property is exact: the only
//! strings that get past "invalid" are the genuine tokens minted below, byte for byte. Anything
//! else — altered payloads, swapped signatures, re-encodings, another formation's token — is
//! `Invalid`. The first input byte picks how the rest is applied to a genuine token, so the
//! mutations stay close to real tokens instead of being random text.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
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
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (base, _) = &f.genuine[usize::from(mode >> 4) % f.genuine.len()];
    let text = String::from_utf8_lossy(rest);
    let candidate = match mode & 0x0f {
        // The bytes as a token.
        0 => text.into_owned(),
        // Splice the bytes into a genuine token at a position the first of them picks.
        1 => {
            let at = rest.first().map_or(0, |b| usize::from(*b)) % (base.len() + 1);
            let at = (0..=at).rev().find(|i| base.is_char_boundary(*i)).unwrap_or(0);
            format!("{}{}{}", &base[..at], text, &base[at..])
        }
        // Overwrite one byte of a genuine token.
        2 => {
            let mut b = base.clone().into_bytes();
            if let [pos, val, ..] = rest {
                let i = usize::from(*pos) % b.len();
                b[i] = *val;
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        // Keep the genuine payload, replace the signature segment.
        3 => {
            let head = base.rsplit_once('.').map_or(base.as_str(), |(h, _)| h);
            format!("{head}.{text}")
        }
        // Keep the genuine signature, replace the payload segment.
        4 => {
            let sig = base.rsplit_once('.').map_or("", |(_, s)| s);
            format!("mft1.{text}.{sig}")
        }
        // Swap one genuine token's signature onto another's payload.
        _ => {
            let other = &f.genuine[usize::from(mode) % f.genuine.len()].0;
            let head = base.rsplit_once('.').map_or(base.as_str(), |(h, _)| h);
            let sig = other.rsplit_once('.').map_or("", |(_, s)| s);
            format!("{head}.{sig}{text}")
        }
    };
    let got = verify(&f.key, &candidate, FORMATION, "reviewer");
    let expected = f
        .genuine
        .iter()
        .find(|(t, _)| *t == candidate)
        .map_or(Verdict::Invalid, |(_, v)| v.clone());
    assert_eq!(got, expected, "{candidate:?}");
});
