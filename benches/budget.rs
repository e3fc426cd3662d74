//! What the authority channel adds (docs/reference/formation.md#the-authority-channel), each a
//! line to the launcher's keeper over a real Unix socket pair and its answer back, the keeper and
//! the token authority running on an actix system as in the launcher:
//!
//! - to a model turn, the formation budget's reservation and settlement
//!   (docs/reference/formation.md#budgets); target under 100 µs p50 for the pair;
//! - to a member call, its grant (docs/reference/formation.md#grants): the delegation (narrowed
//!   and sealed with the callee's grant key by the launcher) and the callee door's check of it;
//!   target under 100 µs p50 for the two.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use actix::Actor as _;
use criterion::{Criterion, criterion_group, criterion_main};
use mur::grant::{Grant, Origin};
use mur::launcher::authority::{Mint, TokenAuthority};
use mur::launcher::budget::{BudgetKeeper, Delegation};
use mur::model::budget::Spending;
use mur::runner::authority::Authority;
use mur::wire::authority_line::Parent;

const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
const TSK: &str = "tsk_0199c4e2f1b7712a9d3e4f5061728394";

fn budget(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (member, launcher) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    // The callee's own channel, which brings it its grant key.
    let (worker, worker_end) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    let (served_tx, served_rx) = std::sync::mpsc::channel();
    let file = dir.path().join("budget.json");
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            let authority = TokenAuthority::default().start();
            authority
                .send(Mint {
                    formation_id: FRM.into(),
                    members: vec!["lead".into(), "worker".into()],
                    edges: vec![(0, 1)],
                })
                .await
                .expect("the authority answers")
                .expect("minted");
            let keeper = BudgetKeeper::new(
                Some(mur::budget::MAX_BUDGET_TOKENS),
                vec!["lead".into(), "worker".into()],
                file,
                Delegation {
                    formation_id: FRM.into(),
                    callees: vec![vec!["worker".into()], vec![]],
                    deadline_ms: None,
                    authority: Some(authority),
                },
            );
            keeper.serve(0, std::os::fd::OwnedFd::from(launcher));
            keeper.serve(1, std::os::fd::OwnedFd::from(worker_end));
            let _ = served_tx.send(());
            std::future::pending::<()>().await;
        })
    });
    served_rx.recv().expect("served");
    let workers_key = Authority::new(worker).grant_key().expect("the worker's grant key");
    let link = std::sync::Arc::new(Authority::new(member));
    let spending = std::sync::Arc::new(Spending::new(None, Some(std::sync::Arc::clone(&link))));
    c.bench_function("budget: reserve + settle one model turn (launcher round trips)", |b| {
        b.iter(|| {
            let hold = spending.reserve(5_000).expect("granted");
            hold.settle(1_200)
        })
    });
    let session = std::sync::Arc::new(Spending::new(Some(mur::budget::MAX_BUDGET_TOKENS), None));
    c.bench_function("budget: reserve + settle, session budget only (in process)", |b| {
        b.iter(|| {
            let hold = session.reserve(5_000).expect("granted");
            hold.settle(1_200)
        })
    });
    c.bench_function(
        "grant: delegate one call (launcher round trip, narrowed and sealed)",
        |b| {
            b.iter(|| {
                link.delegate(Parent::Root(Origin::Operator), TSK, "worker", None, None)
                    .expect("granted")
            })
        },
    );
    let wire = link
        .delegate(Parent::Root(Origin::Operator), TSK, "worker", None, None)
        .expect("granted");
    c.bench_function("grant: the callee door's check (uncached)", |b| {
        b.iter(|| Grant::verify(&workers_key, &wire, FRM, "worker", "lead").expect("genuine"))
    });
    c.bench_function("grant: delegate + verify, what a call adds", |b| {
        b.iter(|| {
            let wire = link
                .delegate(Parent::Root(Origin::Operator), TSK, "worker", None, None)
                .expect("granted");
            Grant::verify(&workers_key, &wire, FRM, "worker", "lead").expect("genuine")
        })
    });
}

criterion_group!(benches, budget);
criterion_main!(benches);
