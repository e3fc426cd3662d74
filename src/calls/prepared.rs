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
//! The launcher is asked on a thread of its own (the authority channel is a blocking lockstep
//! exchange), at most [`MAX_PREPARED`] grants outstanding per task.

use std::collections::HashMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Parent;
use crate::runner::authority::Authority;

/// The most grants prepared and not yet used per task, and the most callees whose grants are
/// all prepared when the task starts.
pub(crate) const MAX_PREPARED: usize = 8;

/// How long after a call settles its callee's next grant is asked for: long enough that a task
/// that ends with its call (most do) asks for none, short beside a model's turn.
const REPLENISH_AFTER: Duration = Duration::from_millis(2);

/// How long a call waits for a grant already asked for: the launcher answers in microseconds,
/// so only a stopped one takes this long (the call then asks itself, and is refused).
const WAIT_FOR_ASKED: Duration = Duration::from_secs(5);

/// The session's asker: one thread, started on first use, that asks the launcher for prepared
/// grants.
#[derive(Debug)]
pub(crate) struct Preparer {
    authority: Arc<Authority>,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// The thread could not be started: nothing is prepared.
    broken: std::sync::atomic::AtomicBool,
}

struct Job {
    task: Arc<TaskGrants>,
    callee: String,
    not_before: Instant,
}

impl Preparer {
    pub fn new(authority: Arc<Authority>) -> Arc<Preparer> {
        Arc::new(Preparer {
            authority,
            jobs: Mutex::new(None),
            broken: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Queues `job`; `false` when there is no thread to run it.
    fn send(&self, job: Job) -> bool {
        if self.broken.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        let mut jobs = crate::sync::lock(&self.jobs);
        if jobs.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let authority = Arc::clone(&self.authority);
            let started = std::thread::Builder::new()
                .name("mur-grants".into())
                .spawn(move || run(&authority, &rx));
            if let Err(e) = started {
                tracing::debug!("grants cannot be prepared: {e}");
                self.broken.store(true, std::sync::atomic::Ordering::Relaxed);
                return false;
            }
            *jobs = Some(tx);
        }
        jobs.as_ref().is_some_and(|tx| tx.send(job).is_ok())
    }
}

/// The thread: runs jobs as they are due, until every sender is gone and nothing waits.
fn run(authority: &Authority, rx: &mpsc::Receiver<Job>) {
    let mut later: Vec<Job> = Vec::new();
    loop {
        let now = Instant::now();
        if let Some(i) = later.iter().position(|j| j.not_before <= now) {
            let job = later.swap_remove(i);
            job.task.ask(authority, &job.callee);
            continue;
        }
        let wait = later.iter().map(|j| j.not_before.saturating_duration_since(now)).min();
        let job = match wait {
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Some(wait) => match rx.recv_timeout(wait) {
                Ok(job) => job,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(wait);
                    continue;
                }
            },
        };
        if job.not_before > Instant::now() {
            later.push(job);
        } else {
            job.task.ask(authority, &job.callee);
        }
    }
}

/// One task's prepared grants, by callee.
#[derive(Debug)]
pub(crate) struct TaskGrants {
    preparer: Arc<Preparer>,
    task_id: String,
    parent: Parent,
    state: Mutex<State>,
    answered: Condvar,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// The task ended, or the launcher refused or could not be reached: nothing more is asked.
    stopped: bool,
}

#[derive(Debug)]
enum Slot {
    /// Asked for, not answered yet.
    Asking,
    /// Ready for one call.
    Ready(String),
}

impl TaskGrants {
    /// The prepared grants of task `task_id`, narrowed from `parent`: every callee's asked for
    /// now when there are at most [`MAX_PREPARED`].
    pub fn start(preparer: &Arc<Preparer>, task_id: &str, parent: Parent, callees: &[String]) -> Arc<TaskGrants> {
        let task = Arc::new(TaskGrants {
            preparer: Arc::clone(preparer),
            task_id: task_id.to_string(),
            parent,
            state: Mutex::new(State::default()),
            answered: Condvar::new(),
        });
        if callees.len() <= MAX_PREPARED {
            for callee in callees {
                task.prepare(callee, Instant::now());
            }
        }
        task
    }

    /// Asks for a grant for `callee` at `not_before`, unless one is ready or asked for, the task
    /// already has [`MAX_PREPARED`], or it stopped.
    fn prepare(self: &Arc<Self>, callee: &str, not_before: Instant) {
        {
            let mut st = crate::sync::lock(&self.state);
            if st.stopped || st.slots.contains_key(callee) || st.slots.len() >= MAX_PREPARED {
                return;
            }
            st.slots.insert(callee.to_string(), Slot::Asking);
        }
        let job = Job {
            task: Arc::clone(self),
            callee: callee.to_string(),
            not_before,
        };
        if !self.preparer.send(job) {
            let mut st = crate::sync::lock(&self.state);
            st.slots.remove(callee);
            st.stopped = true;
            drop(st);
            self.answered.notify_all();
        }
    }

    /// A call to `callee` settled: its next grant is asked for a moment later.
    pub fn replenish(self: &Arc<Self>, callee: &str) {
        self.prepare(callee, Instant::now() + REPLENISH_AFTER);
    }

    /// On the preparer's thread: asks the launcher, unless the task stopped meanwhile.
    fn ask(&self, authority: &Authority, callee: &str) {
        if crate::sync::lock(&self.state).stopped {
            return;
        }
        let got = authority.delegate(self.parent.clone(), &self.task_id, callee, None, None);
        let mut st = crate::sync::lock(&self.state);
        if !st.stopped {
            match got {
                Ok(wire) => {
                    st.slots.insert(callee.to_string(), Slot::Ready(wire));
                }
                // The call asks itself and reports the refusal; nothing more is prepared.
                Err(_) => {
                    st.slots.remove(callee);
                    st.stopped = true;
                }
            }
        }
        drop(st);
        self.answered.notify_all();
    }

    /// The prepared grant for a call to `callee`, taken for it alone; waits for one already
    /// asked for. `None`: none (or one that has expired since), and the call asks itself.
    pub fn take(&self, callee: &str) -> Option<String> {
        let until = Instant::now() + WAIT_FOR_ASKED;
        let mut st = crate::sync::lock(&self.state);
        loop {
            match st.slots.get(callee) {
                None => return None,
                Some(Slot::Ready(_)) => {
                    let Some(Slot::Ready(wire)) = st.slots.remove(callee) else {
                        return None;
                    };
                    return (!expired(&wire)).then_some(wire);
                }
                Some(Slot::Asking) => {
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    st = match self.answered.wait_timeout(st, left) {
                        Ok((st, _)) => st,
                        Err(poisoned) => poisoned.into_inner().0,
                    };
                }
            }
        }
    }

    /// The task ended: unused grants are dropped and nothing more is asked.
    pub fn end(&self) {
        let mut st = crate::sync::lock(&self.state);
        st.stopped = true;
        st.slots.clear();
        drop(st);
        self.answered.notify_all();
    }

    /// How many grants are ready or asked for.
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
