//! Token path costs (issue: door auth throughput): an `mft1` verified on first sight (parse +
//! Ed25519), the same token answered from the door's verify cache, a forged token (one verify,
//! then refused), and the HMAC `mdt1` operator token. Last, the whole per-request cost of
//! FormationAuth on a door for a remembered token (header, `Bearer` parse, cache key, lookup): the
//! only work an authenticated request does that a public one does not. And the per-edge costs
//! of a launch: one `mft1` minted, and a member's first line of 255 calls checked in one batch.
//! And a call's grant: sealed at the launcher, opened at the callee's door.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use actix_web::http::header;
use actix_web::test::TestRequest;
use criterion::{Criterion, black_box, criterion_group, criterion_main};
use mur::door::FormationTrust;
use mur::door::auth::DoorAuthenticator;
use mur::token::formation::{SigningKey, Verdict, verify, verify_issued};
use mur::token::{DoorKey, VerifyCache};

const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";

fn tokens(c: &mut Criterion) {
    let key = SigningKey::generate().expect("key");
    let vk = key.verify_key();
    let token = key.mint(FRM, "planner", "coder");
    let forged = SigningKey::generate().expect("key").mint(FRM, "planner", "coder");

    c.bench_function("mft1 verify, first sight (parse + ed25519)", |b| {
        b.iter(|| verify(black_box(&vk), black_box(&token), FRM, "coder"))
    });
    let cache: VerifyCache<Verdict> = VerifyCache::with_lasting(1024, |v| matches!(v, Verdict::Member { .. }));
    cache.get_or_insert_with(&token, || verify(&vk, &token, FRM, "coder"));
    c.bench_function("mft1 verify, remembered (cache hit)", |b| {
        b.iter(|| cache.get_or_insert_with(black_box(&token), || verify(&vk, &token, FRM, "coder")))
    });
    // The two per-edge costs of a launch: the launcher signs each edge's token, and each member
    // checks the tokens of its first line (255 at 256 members with `reachability: all`).
    c.bench_function("mft1 mint (one Ed25519 signature)", |b| {
        b.iter(|| key.mint(black_box(FRM), "planner", "coder"))
    });
    let callees: Vec<String> = (0..255).map(|i| format!("w{i:03}")).collect();
    let edges: Vec<(&str, &str)> = callees.iter().map(|c| ("lead", c.as_str())).collect();
    c.bench_function("mft1 mint_many, 255 edges (per line)", |b| {
        b.iter(|| key.mint_many(black_box(FRM), &edges))
    });
    let calls: Vec<(String, String)> = (0..255)
        .map(|i| {
            let callee = format!("w{i:03}");
            let t = key.mint(FRM, "lead", &callee);
            (callee, t)
        })
        .collect();
    c.bench_function("first line of 255 calls, checked in one batch (per line)", |b| {
        b.iter(|| verify_issued(&vk, FRM, "lead", calls.iter().map(|(c, t)| (c.as_str(), t.as_str()))))
    });
    // The whole intake of such a first line: parsing it, then the batched check.
    let line = mur::channel::line::FirstLine {
        formation_id: FRM.into(),
        member: "lead".into(),
        launcher: None,
        entry: false,
        verify_key: vk.to_b64(),
        calls: calls
            .iter()
            .map(|(c, t)| mur::channel::line::Call {
                name: c.clone(),
                token: mur::secret::Secret::new(t.clone()),
            })
            .collect(),
    }
    .to_line();
    c.bench_function("first line of 255 calls, parsed (per line)", |b| {
        b.iter(|| mur::channel::line::FirstLine::parse(black_box(line.trim_end())))
    });
    c.bench_function("mft1 forged (one verify, refused)", |b| {
        b.iter(|| verify(black_box(&vk), black_box(&forged), FRM, "coder"))
    });
    let door = DoorKey::generate().expect("door key");
    let operator = door.mint_operator();
    c.bench_function("mdt1 verify (HMAC-SHA256)", |b| {
        b.iter(|| door.verify(black_box(&operator)))
    });

    let trust = FormationTrust {
        formation_id: FRM.into(),
        member: "coder".into(),
        verify_key: vk.clone(),
        grant_key: None,
    };
    let authority = DoorAuthenticator::new("local/coder", door, Some(trust));
    let req = TestRequest::post()
        .insert_header((header::AUTHORIZATION, format!("Bearer {token}")))
        .to_http_request();
    let _ = authority.check(&req);
    c.bench_function("door FormationAuth check, remembered mft1 (per request)", |b| {
        b.iter(|| authority.check(black_box(&req)))
    });
    // A call's grant at its callee: sealed by the launcher with the callee's key, opened by the
    // callee's door (HMAC-SHA256 and the payload's checks), on every call's path once.
    let grant_key = mur::token::GrantKey::generate().expect("grant key");
    let root = mur::grant::Grant::root(
        FRM,
        "grt_0199c4e2f1b7712a9d3e4f5061728390".into(),
        "planner",
        mur::grant::Origin::Operator,
        None,
        None,
    );
    let ask = mur::grant::Request {
        caller: "planner".into(),
        task: "tsk_0199c4e2f1b7712a9d3e4f5061728394".into(),
        callee: "coder".into(),
        deadline_ms: None,
        budget: None,
    };
    let grant =
        mur::grant::narrow(&root, None, &ask, 0, "grt_0199c4e2f1b7712a9d3e4f5061728391".into()).expect("narrowed");
    c.bench_function("grant seal (the launcher's, HMAC-SHA256)", |b| {
        b.iter(|| black_box(&grant).seal(&grant_key))
    });
    let sealed = grant.seal(&grant_key).expect("sealed");
    c.bench_function("grant open at the callee's door (HMAC-SHA256 + payload checks)", |b| {
        b.iter(|| mur::grant::Grant::verify(&grant_key, black_box(&sealed), FRM, "coder", "planner"))
    });
    // Before the cached caller was shared, each remembered request also cloned it twice (cache,
    // then pipeline): a name and five scope strings each time.
    let caller = mur::door::Caller::member("planner");
    c.bench_function("clone of a member Caller (paid twice per request before)", |b| {
        b.iter(|| black_box(&caller).clone())
    });
}

criterion_group!(benches, tokens);
criterion_main!(benches);
