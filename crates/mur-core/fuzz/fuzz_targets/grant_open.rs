//! Fuzzes a grant's opening (docs/reference/formation.md#grants) at the door of `reviewer`, called
//! by `coder`, in one formation.
//!
//! The grant keys are random per process, so the fuzzer cannot seal; the property is exact: the
//! only strings `Grant::verify` accepts are the genuine grants sealed below, byte for byte, and
//! each is refused or accepted as its own claims say. Anything else (altered payloads, replaced or
//! swapped MACs, another member's key, re-encodings) is refused; a string over the bound is
//! `Oversize`. The inputs are genuine grants changed as `near_genuine`
//! says.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

#[path = "../src/near_genuine.rs"]
mod near_genuine;
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
    let genuine: Vec<&str> = f.genuine.iter().map(|(s, _)| s.as_str()).collect();
    let Some(candidate) = near_genuine::candidate(&genuine, "mgr2", data) else {
        return;
    };
    let got = Grant::verify(&f.reviewers, &candidate, FORMATION, "reviewer", "coder");
    let expected = match f.genuine.iter().find(|(g, _)| *g == candidate) {
        Some((_, verdict)) => verdict.clone(),
        None if candidate.len() > mur_core::grant::MAX_GRANT_BYTES => Err(Refusal::Oversize),
        None => Err(Refusal::Invalid),
    };
    assert_eq!(got, expected, "{candidate:?}");
});
