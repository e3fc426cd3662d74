//! The cost a formation budget adds to a model turn (docs/reference/formation.md#budgets): the
//! member's reservation and its settlement, each a line to the launcher's keeper over a real
//! Unix socket pair and its answer back, the keeper running on an actix system as in the
//! launcher. The target is under 100 µs p50 for the pair.

// Dependencies reach this target through the library; the library's own target keeps the rule.
#![allow(unused_crate_dependencies)]

use criterion::{Criterion, criterion_group, criterion_main};
use mur::launcher::budget::BudgetKeeper;
use mur::model::budget::Spending;

fn budget(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let keeper = BudgetKeeper::new(
        mur::budget::MAX_BUDGET_TOKENS,
        vec!["lead".into()],
        dir.path().join("budget.json"),
    );
    let (member, launcher) = std::os::unix::net::UnixStream::pair().expect("socket pair");
    std::thread::spawn(move || {
        actix::System::new().block_on(async move {
            keeper.serve(0, std::os::fd::OwnedFd::from(launcher));
            std::future::pending::<()>().await;
        })
    });
    let spending = std::sync::Arc::new(Spending::new(None, Some(member)));
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
}

criterion_group!(benches, budget);
criterion_main!(benches);
