//! Fuzzes a grant's opening (docs/reference/formation.md#grants) at the door of `reviewer`, called
//! by `coder`, in one formation.
//!
//! The grant keys are random per process, so the fuzzer cannot seal; the property is exact: the
//! only strings `Grant::verify` accepts are the genuine grants sealed below, byte for byte, and
//! each is refused or accepted as its own claims say. Anything else (altered payloads, replaced or
//! swapped MACs, another member's key, re-encodings) is refused; a string over the bound is
//! `Oversize`. The first input byte picks how the rest is applied to a genuine grant.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mur_core::grant::{Grant, Origin, Refusal, Request, narrow};
use mur_core::token::GrantKey;

const FORMATION: &str = "frm_0123456789abcdef0123456789abcdef";
const OTHER: &str = "frm_fedcba9876543210fedcba9876543210";
const TASK: &str = "tsk_0123456789abcdef0123456789abcdef";

struct Fixture {
    reviewers: GrantKey,
    /// (wire, what `verify` says of it at reviewer's door when coder calls).
    genuine: Vec<(String, Result<Grant, Refusal>)>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let (Ok(reviewers), Ok(writers)) = (GrantKey::generate(), GrantKey::generate()) else {
            panic!("the OS CSPRNG is unavailable");
        };
        let grant = |formation: &str, caller: &str, callee: &str| {
            let root = Grant::root(
                formation,
                "grt_0123456789abcdef0123456789abcdef".into(),
                caller,
                Origin::Operator,
                Some(4_000_000_000_000),
                Some(500),
            );
            let ask = Request {
                caller: caller.into(),
                task: TASK.into(),
                callee: callee.into(),
                deadline_ms: None,
                budget: Some(40),
            };
            let Ok(g) = narrow(&root, None, &ask, 0, "grt_fedcba9876543210fedcba9876543210".into()) else {
                panic!("the fixture's grant narrows");
            };
            g
        };
        let seal = |g: &Grant, key: &GrantKey| g.seal(key).unwrap_or_default();
        let to_reviewer = grant(FORMATION, "coder", "reviewer");
        let genuine = vec![
            (seal(&to_reviewer, &reviewers), Ok(to_reviewer.clone())),
            (
                seal(&grant(FORMATION, "writer", "reviewer"), &reviewers),
                Err(Refusal::NotTheCaller),
            ),
            (
                seal(&grant(FORMATION, "coder", "writer"), &reviewers),
                Err(Refusal::NotForThisMember),
            ),
            (
                seal(&grant(OTHER, "coder", "reviewer"), &reviewers),
                Err(Refusal::OtherFormation),
            ),
            // Sealed for another member: never opens here.
            (seal(&to_reviewer, &writers), Err(Refusal::Invalid)),
        ];
        Fixture { reviewers, genuine }
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
        // The bytes as a grant.
        0 => text.into_owned(),
        // Splice the bytes into a genuine grant at a position the first of them picks.
        1 => {
            let at = rest.first().map_or(0, |b| usize::from(*b)) % (base.len() + 1);
            let at = (0..=at).rev().find(|i| base.is_char_boundary(*i)).unwrap_or(0);
            format!("{}{}{}", &base[..at], text, &base[at..])
        }
        // Overwrite one byte of a genuine grant.
        2 => {
            let mut b = base.clone().into_bytes();
            if let [pos, val, ..] = rest {
                let i = usize::from(*pos) % b.len().max(1);
                if let Some(byte) = b.get_mut(i) {
                    *byte = *val;
                }
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        // Keep the genuine payload, replace the MAC segment.
        3 => {
            let head = base.rsplit_once('.').map_or(base.as_str(), |(h, _)| h);
            format!("{head}.{text}")
        }
        // Keep the genuine MAC, replace the payload segment.
        4 => {
            let mac = base.rsplit_once('.').map_or("", |(_, s)| s);
            format!("mgr2.{text}.{mac}")
        }
        // One genuine grant's MAC on another's payload.
        _ => {
            let other = &f.genuine[usize::from(mode) % f.genuine.len()].0;
            let head = base.rsplit_once('.').map_or(base.as_str(), |(h, _)| h);
            let mac = other.rsplit_once('.').map_or("", |(_, s)| s);
            format!("{head}.{mac}{text}")
        }
    };
    let got = Grant::verify(&f.reviewers, &candidate, FORMATION, "reviewer", "coder");
    let expected = match f.genuine.iter().find(|(g, _)| *g == candidate) {
        Some((_, verdict)) => verdict.clone(),
        None if candidate.len() > mur_core::grant::MAX_GRANT_BYTES => Err(Refusal::Oversize),
        None => Err(Refusal::Invalid),
    };
    assert_eq!(got, expected, "{candidate:?}");
});
