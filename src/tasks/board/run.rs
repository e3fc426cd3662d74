//! The executor's side: the FIFO it drains, the running slot, and a task's progress to its end.

use super::*;

/// One task handed to the executor. Dropping it without `Board::finish` fails the task and frees
/// the running slot, so an executor fault never wedges the queue.
#[derive(Debug)]
pub struct Work {
    pub task_id: String,
    pub context_id: String,
    pub text: String,
    /// The context's earlier exchanges this task's owner may see, oldest first, within
    /// [`CONTEXT_TURNS`] and [`CONTEXT_BYTES`].
    pub context: Vec<ContextTurn>,
    pub trust: Trust,
    pub origin: Origin,
    pub owner: Option<String>,
    /// The caller's W3C `traceparent` (well-formed, as the door kept it): where a task forwarded
    /// elsewhere continues the caller's trace.
    pub traceparent: Option<String>,
    /// The grant the task runs under (docs/reference/formation.md#grants): its deadline, and
    /// what its own calls are narrowed from. `None` for a task that came with none.
    pub grant: Option<Arc<crate::grant::Grant>>,
    /// A client's limits sent with the task (docs/reference/formation.md#limits-across-the-formations-edge):
    /// what its grant is narrowed to when it came with none.
    pub limits: Option<crate::wire::limits::Limits>,
    pub cancel: Cancel,
    _slot: Slot,
}

#[derive(Debug)]
struct Slot {
    pub(super) board: Arc<Board>,
    pub(super) task_id: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.board.release(&self.task_id);
    }
}

impl Board {
    /// The next task to run, in FIFO order, once no task is running; `None` once the board is
    /// closed and nothing is left to run. Cancel-safe: dropping the future takes nothing.
    pub async fn next_work(self: &Arc<Self>) -> Option<Work> {
        let mut rx = self.changes.subscribe();
        loop {
            rx.borrow_and_update();
            if let Some(w) = self.take_work() {
                return w;
            }
            if rx.changed().await.is_err() {
                return None;
            }
        }
    }

    /// `Some(None)` = closed and drained; `None` = nothing yet.
    pub(super) fn take_work(self: &Arc<Self>) -> Option<Option<Work>> {
        // Look before mutating: `mutate` wakes every waiter, `next_work` included, so taking
        // nothing through it would make an idle executor spin on its own notification.
        {
            let st = self.lock();
            if st.running.is_some() || st.queue.is_empty() {
                return (st.running.is_none() && st.closing).then_some(None);
            }
        }
        self.mutate(|st, _, now| {
            if st.running.is_some() {
                return None;
            }
            let Some(id) = st.queue.pop_front() else {
                return st.closing.then_some(None);
            };
            st.seq += 1;
            let seq = st.seq;
            let context = context_turns(st, &id);
            let e = st.tasks.get_mut(&id)?;
            e.snap.state = TaskState::Working;
            e.snap.timestamp = now;
            reorder(&mut st.order, &mut e.snap, seq);
            let work = Work {
                task_id: id.clone(),
                context_id: e.snap.context_id.clone(),
                // Nothing reads the offer again once it runs.
                // The history keeps the caller's message; the executor gets its own copy.
                text: std::mem::replace(&mut e.text, Arc::from("")).to_string(),
                context,
                trust: e.snap.trust,
                origin: e.snap.origin,
                owner: e.snap.owner.clone(),
                traceparent: e.traceparent.take(),
                grant: e.grant.take(),
                limits: e.limits.take(),
                cancel: Cancel(e.cancel.subscribe()),
                _slot: Slot {
                    board: Arc::clone(self),
                    task_id: id.clone(),
                },
            };
            st.running = Some(id);
            Some(Some(work))
        })
    }

    /// A WORKING status change with an optional note, e.g. `continuing with 2 member answer(s)`.
    /// Ignored for a task that is not live.
    pub fn set_working(&self, task_id: &str, note: Option<&str>) {
        self.mutate(|st, _, now| {
            st.seq += 1;
            let seq = st.seq;
            if let Some(e) = st.tasks.get_mut(task_id)
                && !e.snap.state.is_terminal()
            {
                e.snap.state = TaskState::Working;
                e.snap.timestamp = now;
                reorder(&mut st.order, &mut e.snap, seq);
                e.snap.status_text = note.map(str::to_string);
                e.snap.status_message_id = note.map(|n| note_history(&mut e.snap, n));
            }
        });
    }

    /// Sets what a task and its calls spent, before it ends (`metadata.murmur.subtreeCost`).
    pub fn set_cost(&self, task_id: &str, cost: crate::cost::Cost) {
        self.mutate(|st, _, _| {
            if let Some(e) = st.tasks.get_mut(task_id) {
                e.snap.cost = Some(Box::new(cost));
            }
        });
    }

    /// Ends a task with the executor's outcome and frees the running slot. A task already ended
    /// (e.g. cancelled meanwhile) keeps its state. Returns the task as it ends.
    pub fn finish(&self, task_id: &str, outcome: TaskOutcome) -> Option<TaskSnapshot> {
        self.mutate(|st, ev, now| {
            if st.running.as_deref() == Some(task_id) {
                st.running = None;
            }
            st.queue.retain(|q| q != task_id);
            st.seq += 1;
            let seq = st.seq;
            let e = st.tasks.get_mut(task_id)?;
            if !e.snap.state.is_terminal() {
                let (state, text, reason) = match outcome {
                    TaskOutcome::Completed(answer) => {
                        e.snap.answer = Some(answer);
                        // The agent's final message is its answer, kept once.
                        push_history(&mut e.snap, Role::Agent, mint_message_id(), HistoryText::Answer);
                        (TaskState::Completed, None, None)
                    }
                    TaskOutcome::Failed(msg) => (TaskState::Failed, Some(msg.clone()), Some(msg)),
                    TaskOutcome::NoAnswer { reason, below } => {
                        e.snap.no_answer_below = Some(below);
                        (TaskState::Failed, Some(reason.clone()), Some(reason))
                    }
                    TaskOutcome::Canceled => (TaskState::Canceled, None, None),
                    TaskOutcome::Rejected(msg) => (TaskState::Rejected, Some(msg.clone()), Some(msg)),
                };
                end(e, &mut st.order, state, text, seq, now, ev);
                let _ = e.cancel.send_replace(state == TaskState::Canceled);
                ev.push(BoardEvent::Ended {
                    task_id: task_id.to_string(),
                    state,
                    no_answer: e.snap.no_answer_below.is_some(),
                    reason,
                    answer: e.snap.answer.clone().filter(|_| state == TaskState::Completed),
                });
            }
            Some(e.snap.clone())
        })
    }

    /// Frees the slot of a `Work` dropped without `finish`.
    pub(super) fn release(&self, task_id: &str) {
        let live = self
            .lock()
            .tasks
            .get(task_id)
            .is_some_and(|e| !e.snap.state.is_terminal());
        if live {
            self.finish(task_id, TaskOutcome::Failed(LOST.to_string()));
        } else {
            self.mutate(|st, _, _| {
                if st.running.as_deref() == Some(task_id) {
                    st.running = None;
                }
            });
        }
    }
}
