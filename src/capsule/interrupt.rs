//! How the host stops a guest (a component's task or a tool's call): at each epoch tick the
//! store's callback stops the guest if the task was cancelled or ran past its budget, and
//! otherwise yields to the async executor. The yield is what lets the select of [`within`] notice
//! a cancellation while a guest spins; the select's own branches cover a guest that is waiting on
//! the host (a member call, a clock, an HTTP response). Kept apart from `engine` (which runs a
//! task) and `host_state` (whose `ask` pauses the budget and stops a guest left unanswered), so
//! neither imports the other.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use crate::runner::CancelSignal;

/// `budget` from now; a budget too large to add is no budget at all, and a year stands in for it.
fn deadline_after(budget: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(budget).unwrap_or(now + crate::timing::MAX_KNOB)
}

/// A guest's time budget, which runs from the start of the task except while the task waits for
/// its caller's answer (`request-input`, docs/reference/door.md#asking): a person's time to
/// answer is bounded by `lifecycle.input_timeout_secs`, not by the capsule's budget.
pub(super) struct Budget {
    state: std::sync::Mutex<BudgetState>,
    resumed: tokio::sync::Notify,
}

struct BudgetState {
    deadline: Instant,
    /// Since when the budget stands still, while a question is open.
    paused_at: Option<Instant>,
}

/// The budget stands still while this lives; dropping it moves the deadline on by the pause.
pub(super) struct Paused(Arc<Budget>);

impl Drop for Paused {
    fn drop(&mut self) {
        let mut st = crate::sync::lock(&self.0.state);
        if let Some(at) = st.paused_at.take() {
            st.deadline = st.deadline.checked_add(at.elapsed()).unwrap_or(st.deadline);
        }
        drop(st);
        self.0.resumed.notify_waiters();
    }
}

impl Budget {
    pub(super) fn new(budget: Duration) -> Arc<Budget> {
        Arc::new(Budget {
            state: std::sync::Mutex::new(BudgetState {
                deadline: deadline_after(budget),
                paused_at: None,
            }),
            resumed: tokio::sync::Notify::new(),
        })
    }

    /// Stops the budget until the guard is dropped.
    pub(super) fn pause(self: &Arc<Self>) -> Paused {
        crate::sync::lock(&self.state)
            .paused_at
            .get_or_insert_with(Instant::now);
        Paused(Arc::clone(self))
    }

    /// The deadline, `None` while the budget stands still.
    fn running_deadline(&self) -> Option<Instant> {
        let st = crate::sync::lock(&self.state);
        st.paused_at.is_none().then_some(st.deadline)
    }

    fn spent(&self) -> bool {
        self.running_deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Resolves once the budget is spent.
    async fn exhausted(&self) {
        loop {
            let resumed = self.resumed.notified();
            let mut resumed = std::pin::pin!(resumed);
            // Register before reading the state, so a resume in between is not missed.
            resumed.as_mut().enable();
            match self.running_deadline() {
                None => resumed.await,
                Some(deadline) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline.into()) => {
                            if self.spent() {
                                return;
                            }
                        }
                        _ = resumed => {}
                    }
                }
            }
        }
    }
}

/// Arms `store` so that, at each epoch tick, a guest that runs is stopped once `cancel` fired or
/// its budget is spent, and otherwise yields to the executor (so the select of [`within`] can see
/// a cancellation while a guest spins).
pub(super) fn arm<T>(store: &mut Store<T>, cancel: &CancelSignal, budget: &Arc<Budget>) {
    store.set_epoch_deadline(1);
    let cancel = cancel.clone();
    let budget = Arc::clone(budget);
    store.epoch_deadline_callback(move |_| {
        if cancel.is_canceled() {
            return Err(Stop::Canceled.into());
        }
        if budget.spent() {
            return Err(Stop::OverBudget.into());
        }
        Ok(UpdateDeadline::Yield(1))
    });
}

/// `work` (a guest's instantiation and call), ended early with a [`Stop`] when `cancel` fires or
/// the budget is spent while the guest waits on the host (a member call, a clock, an HTTP reply).
pub(super) async fn within<R>(
    cancel: &CancelSignal,
    budget: &Budget,
    work: impl Future<Output = wasmtime::Result<R>>,
) -> wasmtime::Result<R> {
    tokio::select! {
        biased;
        _ = cancel.canceled() => Err(Stop::Canceled.into()),
        _ = budget.exhausted() => Err(Stop::OverBudget.into()),
        r = work => r,
    }
}

/// A question the guest asked got no answer within `lifecycle.input_timeout_secs`: the task fails
/// with E-ASK-001, whatever the guest would do next, so it travels as a trap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Unanswered(pub(super) Duration);

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the guest's question got no answer in time")
    }
}

impl std::error::Error for Unanswered {}

/// Why the host stopped a guest; travels as the error of the interrupted call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    Canceled,
    OverBudget,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Canceled => "the guest was canceled",
            Stop::OverBudget => "the guest ran out of time",
        })
    }
}

impl std::error::Error for Stop {}
