//! A restarted peer's board, taken back from its task store
//! (docs/reference/formation.md#tasks-across-a-restart): ended tasks as they ended, waiting ones
//! queued again in the order they came, and a task that was running run again from its start
//! only when the capsule says its tasks may be repeated; otherwise it ends `failed` (E-RST-002).

use super::*;
use crate::tasks::store::{Kept, TaskStore};

/// What a board took back from its store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Ended tasks, answered as they ended.
    pub ended: usize,
    /// Tasks queued again: those that waited, and those that ran when `repeatable`.
    pub queued: usize,
    /// Tasks that ran and ended `failed` with E-RST-002.
    pub failed: usize,
}

/// Status text of a task that was running when its member restarted (E-RST-002).
pub fn restart_failure() -> String {
    crate::diag::Diagnostic::new(
        crate::diag::E_RST_002,
        "the member restarted while this task ran; its capsule does not declare its tasks repeatable".to_string(),
    )
    .to_string()
}

impl Board {
    /// Takes `kept` back and keeps every later change in `store`. For a board no task has
    /// reached yet: the session calls it before its door serves.
    pub fn restore(&self, store: TaskStore, kept: Vec<Kept>, repeatable: bool) -> Restored {
        let failure = restart_failure();
        self.mutate(|st, _, now| {
            let mut restored = Restored::default();
            st.seq = kept
                .iter()
                .map(|k| k.snap.changed.max(k.created))
                .max()
                .unwrap_or(0)
                .max(st.seq);
            st.slot_used |= !kept.is_empty();
            for k in kept {
                let Kept {
                    mut snap,
                    created,
                    offer,
                } = k;
                let id = snap.id.clone();
                if st.tasks.contains_key(&id) {
                    continue;
                }
                let live = !snap.state.is_terminal();
                let ran = matches!(snap.state, TaskState::Working | TaskState::InputRequired);
                let offer = offer.filter(|_| live && (!ran || repeatable));
                let stored = snap.changed;
                let mut requeue = false;
                if live {
                    st.seq += 1;
                    let seq = st.seq;
                    snap.timestamp = now;
                    snap.asked_by.clear();
                    if offer.is_some() {
                        snap.state = TaskState::Submitted;
                        snap.status_text = None;
                        snap.status_message_id = None;
                        requeue = true;
                    } else {
                        snap.state = TaskState::Failed;
                        snap.status_message_id = Some(note_history(&mut snap, &failure));
                        snap.status_text = Some(failure.clone());
                    }
                    snap.changed = seq;
                }
                let log_bytes = Arc::new(AtomicUsize::new(0));
                let (text, traceparent, grant, limits) = match offer {
                    Some(o) => (o.text, o.traceparent, o.grant, o.limits),
                    None => (Arc::from(""), None, None, None),
                };
                let entry = Entry {
                    log: Arc::new(Mutex::new(StreamLog::new(snap.changed, Arc::clone(&log_bytes)))),
                    log_bytes,
                    text,
                    traceparent,
                    deadline_ms: grant.as_ref().and_then(|g| g.deadline_ms),
                    grant,
                    limits,
                    created,
                    cancel: watch::channel(false).0,
                    pins: 0,
                    pin_charge: 0,
                    // Whatever showed it ended with the process before; nothing is owed now.
                    end_shown: !live,
                    streamed: None,
                    question: None,
                    asked_at: None,
                    stored,
                    snap,
                };
                st.order.insert(entry.snap.changed, id.clone());
                let ended = entry.snap.state.is_terminal();
                let refused = entry.snap.state == TaskState::Rejected;
                let bytes = footprint(&entry);
                st.tasks.insert(id.clone(), entry);
                if requeue {
                    restored.queued += 1;
                    st.queue.push_back(id);
                } else if ended {
                    if live {
                        restored.failed += 1;
                    } else {
                        restored.ended += 1;
                    }
                    st.books.file(id, bytes, refused);
                }
            }
            st.store = Some(store);
            restored
        })
    }
}

#[cfg(test)]
impl Board {
    /// Lets go of the store as a process's death would: no later change reaches it.
    pub(super) fn drop_store(&self) {
        drop(self.lock().store.take());
    }

    /// Gives the store room up to `max_bytes`, as an operator who grows a full disk.
    pub(super) fn grow_store(&self, max_bytes: u64) {
        if let Some(store) = self.lock().store.as_ref() {
            store.allow(max_bytes);
        }
    }
}
