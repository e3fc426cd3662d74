//! Cancelling a task, every live task, or the whole board as the session closes.

use super::*;

/// Resolves when the task it belongs to is cancelled (CancelTask, `cancel_all_live`, `close`).
#[derive(Debug, Clone)]
pub struct Cancel(pub(super) watch::Receiver<bool>);

impl Cancel {
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Completes once cancellation is requested (also when the board is gone).
    pub async fn cancelled(&self) {
        let mut rx = self.0.clone();
        let _ = rx.wait_for(|c| *c).await;
    }
}

impl Board {
    /// Cancels one task: a queued one leaves the queue, a running one is told through its
    /// `Cancel` (its slot stays taken until the executor lets go). Either way it shows
    /// `TASK_STATE_CANCELED` at once.
    pub fn cancel(&self, task_id: &str, reason: &str) -> CancelResult {
        self.mutate(|st, ev, now| {
            st.seq += 1;
            let seq = st.seq;
            let Some(e) = st.tasks.get_mut(task_id) else {
                return CancelResult::NotFound;
            };
            if e.snap.state.is_terminal() {
                return CancelResult::NotCancelable(e.snap.clone());
            }
            end(e, &mut st.order, TaskState::Canceled, None, seq, now, ev);
            let _ = e.cancel.send_replace(true);
            let snap = e.snap.clone();
            st.queue.retain(|q| q != task_id);
            ev.push(BoardEvent::Ended {
                task_id: task_id.to_string(),
                state: TaskState::Canceled,
                no_answer: false,
                reason: Some(reason.to_string()),
                answer: None,
            });
            CancelResult::Canceled(snap)
        })
    }

    /// Cancels every live task, queued and running, without closing the board.
    pub fn cancel_all_live(&self, reason: &str) {
        self.mutate(|st, ev, now| {
            let live: Vec<String> = st.running.iter().chain(st.queue.iter()).cloned().collect();
            st.queue.clear();
            for id in live {
                st.seq += 1;
                let seq = st.seq;
                if let Some(e) = st.tasks.get_mut(&id)
                    && !e.snap.state.is_terminal()
                {
                    end(e, &mut st.order, TaskState::Canceled, None, seq, now, ev);
                    let _ = e.cancel.send_replace(true);
                    ev.push(BoardEvent::Ended {
                        task_id: id,
                        state: TaskState::Canceled,
                        no_answer: false,
                        reason: Some(reason.to_string()),
                        answer: None,
                    });
                }
            }
        });
    }

    /// The session is ending: admit nothing more, reject every queued task with
    /// `task rejected: the session is closing`, and cancel the running one. `next_work` then
    /// returns `None`. Idempotent.
    pub fn close(&self) {
        self.mutate(|st, ev, now| {
            st.closing = true;
            let queued: Vec<String> = st.queue.drain(..).collect();
            for id in queued {
                st.seq += 1;
                let seq = st.seq;
                if let Some(e) = st.tasks.get_mut(&id)
                    && !e.snap.state.is_terminal()
                {
                    end(
                        e,
                        &mut st.order,
                        TaskState::Rejected,
                        Some(REJECT_CLOSING.to_string()),
                        seq,
                        now,
                        ev,
                    );
                    let _ = e.cancel.send_replace(true);
                    ev.push(BoardEvent::Ended {
                        task_id: id,
                        state: TaskState::Rejected,
                        no_answer: false,
                        reason: Some(REJECT_CLOSING.to_string()),
                        answer: None,
                    });
                }
            }
            st.seq += 1;
            let seq = st.seq;
            if let Some(id) = st.running.clone()
                && let Some(e) = st.tasks.get_mut(&id)
                && !e.snap.state.is_terminal()
            {
                end(e, &mut st.order, TaskState::Canceled, None, seq, now, ev);
                let _ = e.cancel.send_replace(true);
                ev.push(BoardEvent::Ended {
                    task_id: id,
                    state: TaskState::Canceled,
                    no_answer: false,
                    reason: Some("the session is closing".to_string()),
                    answer: None,
                });
            }
        });
    }

    pub fn is_closing(&self) -> bool {
        self.lock().closing
    }

    /// No task is running or queued.
    pub fn is_idle(&self) -> bool {
        let st = self.lock();
        st.running.is_none() && st.queue.is_empty()
    }
}
