//! Grants asked for ahead of a task's calls (docs/reference/formation.md#grants), so a call that
//! asks for nothing narrower than its task's grant does not wait for the launcher.
//!
//! When a task of a member with callees starts, one grant per callee is asked for in the
//! background (every callee when there are at most [`MAX_PREPARED`]; otherwise none until a
//! callee is first called). A call with no deadline or budget of its own takes its callee's
//! prepared grant when one is ready, or waits for one already asked for; a call with limits of
//! its own, or with none prepared, asks the launcher itself as before. Each prepared grant is
//! taken by one call at most (a grant's id is one call's), and once a call settles the next one
//! for its callee is asked for, a moment later, so a task that ends with its call asks for none.
//! Unused grants are dropped when the task ends; they hold nothing at the launcher (no tokens are
//! reserved under a grant until its callee's task spends), which forgets them as it forgets any.
//!
//! Preparing is sound because it changes nothing a grant says but its budget: the deadline,
//! origin and chain are the parent's and the caller's, fixed for the task, and a budget narrowed
//! earlier may be larger than the parent has left by the time it is used, but the launcher
//! holds every reservation to every capped grant above it and to the formation's budget, so a
//! stale cap cannot spend more than a fresh one would.
//!
//! The asks are written to the authority channel at once and their answers read when a call
//! needs them (the launcher answers in order; an answer read by another asker meanwhile is kept
//! for its own), so the launcher narrows while the task starts and nothing waits for it but the
//! call. At most [`MAX_PREPARED`] grants are outstanding per task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::Parent;
use crate::runner::authority::{Ahead, Authority};

/// The most grants prepared and not yet used per task, and the most callees whose grants are
/// all prepared when the task starts.
pub(crate) const MAX_PREPARED: usize = 8;

/// How long after a call settles its callee's next grant is asked for: long enough that a task
/// that ends with its call (most do) asks for none, short beside a model's turn.
const REPLENISH_AFTER: Duration = Duration::from_millis(2);

/// One task's prepared grants, by callee.
#[derive(Debug)]
pub(crate) struct TaskGrants {
    authority: Arc<Authority>,
    /// Where a replacement is asked for a moment later; without it none is.
    arbiter: Option<actix_rt::ArbiterHandle>,
    task_id: String,
    parent: Parent,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// The task ended, or the launcher refused or could not be reached: nothing more is asked.
    stopped: bool,
}

#[derive(Debug)]
enum Slot {
    /// Asked for; the answer is read when a call takes it.
    Asked(Ahead),
}

impl TaskGrants {
    /// The prepared grants of task `task_id`, narrowed from `parent`: every callee's asked for
    /// now when there are at most [`MAX_PREPARED`].
    pub fn start(
        authority: &Arc<Authority>,
        arbiter: Option<actix_rt::ArbiterHandle>,
        task_id: &str,
        parent: Parent,
        callees: &[String],
    ) -> Arc<TaskGrants> {
        let task = Arc::new(TaskGrants {
            authority: Arc::clone(authority),
            arbiter,
            task_id: task_id.to_string(),
            parent,
            state: Mutex::new(State::default()),
        });
        if callees.len() <= MAX_PREPARED {
            for callee in callees {
                task.prepare(callee);
            }
        }
        task
    }

    /// Asks for a grant for `callee`, unless one is asked for already, the task has
    /// [`MAX_PREPARED`], or it stopped.
    fn prepare(&self, callee: &str) {
        let mut st = crate::sync::lock(&self.state);
        if st.stopped || st.slots.contains_key(callee) || st.slots.len() >= MAX_PREPARED {
            return;
        }
        match self
            .authority
            .delegate_ahead(self.parent.clone(), &self.task_id, callee)
        {
            Ok(ahead) => {
                st.slots.insert(callee.to_string(), Slot::Asked(ahead));
            }
            Err(_) => st.stopped = true,
        }
    }

    /// A call to `callee` was made: its next grant is asked for a moment later.
    pub fn replenish(self: &Arc<Self>, callee: &str) {
        let Some(arbiter) = &self.arbiter else { return };
        let (task, callee) = (Arc::clone(self), callee.to_string());
        arbiter.spawn_fn(move || {
            actix_rt::spawn(async move {
                actix_rt::time::sleep(REPLENISH_AFTER).await;
                task.prepare(&callee);
            });
        });
    }

    /// The prepared grant for a call to `callee`, taken for it alone; waits for the launcher's
    /// answer when it has not come yet. `None`: none, one the launcher refused (the call then
    /// asks itself and reports the refusal; nothing more is prepared), or one that has expired
    /// since.
    pub fn take(&self, callee: &str) -> Option<String> {
        let Slot::Asked(ahead) = crate::sync::lock(&self.state).slots.remove(callee)?;
        match self.authority.collect(ahead) {
            Ok(wire) => (!expired(&wire)).then_some(wire),
            Err(_) => {
                crate::sync::lock(&self.state).stopped = true;
                None
            }
        }
    }

    /// The task ended: unused grants are dropped and nothing more is asked.
    pub fn end(&self) {
        let slots: Vec<Slot> = {
            let mut st = crate::sync::lock(&self.state);
            st.stopped = true;
            st.slots.drain().map(|(_, s)| s).collect()
        };
        for Slot::Asked(ahead) in slots {
            self.authority.drop_ahead(ahead);
        }
    }

    /// How many grants are asked for and not taken.
    #[cfg(test)]
    pub fn outstanding(&self) -> usize {
        crate::sync::lock(&self.state).slots.len()
    }
}

/// Whether a grant's deadline has passed: a call then asks the launcher, which refuses it as it
/// refuses any call of an expired task.
fn expired(wire: &str) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, crate::timing::millis);
    crate::grant::Grant::read_unchecked(wire)
        .and_then(|g| g.deadline_ms)
        .is_some_and(|d| d <= now)
}
