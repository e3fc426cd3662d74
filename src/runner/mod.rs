//! What every task runner plugs into: the component host (`capsule`), the model agent
//! (`model`), the remote forwarder (`remote`), and the member calls and outgoing-HTTP policy
//! they are handed (`calls`), without any of them depending on another.
//!
//! - this module — [`CancelSignal`], how a task is stopped, and [`BoxFuture`], what the traits
//!   below return;
//! - `member_calls` — [`MemberCalls`], one task's calls to other members as a runner makes them,
//!   and [`CallOutcome`], how each ended (`await-all`, `noAnswerBelow`);
//! - `network` — [`HttpPolicy`], the decision on each outgoing request of a task (a
//!   component's or a WebAssembly tool's), [`NetworkPolicy`], the session's, and the
//!   [`PeerResolver`] that routes a virtual peer address to a member's door.
//!
//! - `authority` — [`authority::Authority`], the member's link to the launcher's authority:
//!   its calls' grants and its model's formation budget.
//!
//! Nothing here hosts WebAssembly, speaks to a provider or a peer, or knows the session: the
//! session implements the traits (`calls`) and the runners consume them.

pub mod authority;
mod member_calls;
mod network;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use self::member_calls::{
    CallLimits, CallOutcome, CallStatus, MemberCalls, NoCallees, no_answer_below, not_a_callee,
};
pub use self::network::{
    AllowList, AllowRule, HttpDecision, HttpPolicy, NetworkPolicy, OutgoingTarget, PeerResolver, Route, RouteHeader,
    RouteValue,
};

/// A boxed, sendable future: what the runners' trait objects return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Cancels a running task: cheap to clone, callable from any thread, sticky once fired.
#[derive(Clone, Default)]
pub struct CancelSignal(Arc<CancelInner>);

#[derive(Default)]
struct CancelInner {
    fired: AtomicBool,
    notify: tokio::sync::Notify,
}

impl std::fmt::Debug for CancelSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CancelSignal({})",
            if self.is_canceled() { "fired" } else { "armed" }
        )
    }
}

impl CancelSignal {
    pub fn new() -> CancelSignal {
        CancelSignal::default()
    }

    /// Fires the signal; a task running under it ends `Canceled` promptly (a component within
    /// about one epoch tick while it computes, any runner at once while it waits).
    pub fn cancel(&self) {
        self.0.fired.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_canceled(&self) -> bool {
        self.0.fired.load(Ordering::SeqCst)
    }

    /// Resolves once the signal has fired.
    pub async fn canceled(&self) {
        loop {
            let notified = self.0.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Register before checking the flag, so a `cancel` in between is not missed.
            notified.as_mut().enable();
            if self.is_canceled() {
                return;
            }
            notified.await;
        }
    }
}
