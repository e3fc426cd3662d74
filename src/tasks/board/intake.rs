//! Admission (docs/reference/manifest.md#keys): a new task is queued, started or refused as the
//! board's acceptance and queue depth say.

use super::*;

impl Board {
    /// The `--task` task: trusted, owned by no credential, admitted whatever the acceptance (it
    /// uses the `single` slot), unless the session is closing.
    pub fn submit_local(&self, text: &str) -> TaskSnapshot {
        let new = NewTask {
            text: text.to_string(),
            context_id: None,
            message_id: mint_message_id(),
            owner: None,
            caller_member: None,
            origin: Origin::Local,
            trust: Trust::Trusted,
            traceparent: None,
            grant: None,
            limits: None,
        };
        self.insert(new, true, false)
    }

    /// A task offered at the door: admitted (`SUBMITTED`) or refused (`REJECTED`) per
    /// docs/reference/manifest.md#keys.
    pub fn submit(&self, new: NewTask) -> TaskSnapshot {
        self.insert(new, false, false)
    }

    /// As [`Board::submit`], pinned from its creation: the task stays on the board, ended or not,
    /// until the returned pin is dropped (a SendMessage reply or stream owes it to its caller).
    /// Past [`MAX_PINNED_TASKS`](super::retention::MAX_PINNED_TASKS) or
    /// [`MAX_PINNED_BYTES`](super::retention::MAX_PINNED_BYTES) the offer is refused as busy.
    pub fn submit_pinned(self: &Arc<Self>, new: NewTask) -> (TaskSnapshot, Pinned) {
        let snap = self.insert(new, false, true);
        let pin = Pinned {
            board: Arc::clone(self),
            task_id: snap.id.clone(),
        };
        (snap, pin)
    }

    pub(super) fn insert(&self, new: NewTask, local: bool, pinned: bool) -> TaskSnapshot {
        let (acceptance, depth) = (self.acceptance, self.queue_depth as usize);
        self.mutate(|st, ev, now| {
            let refusal = if st.closing {
                Some(REJECT_CLOSING)
            } else if local {
                None
            } else if pinned && !st.books.may_pin(new.text.len()) {
                // Its reply would pin it: too much is pinned already (a caller may offer again).
                Some(REJECT_BUSY)
            } else {
                let admit = match acceptance {
                    Acceptance::None => false,
                    Acceptance::Single => !st.slot_used,
                    // The first waiting task is about to run when nothing runs, so it does not
                    // count as waiting behind the running one.
                    Acceptance::Queue => st.queue.len() < depth + usize::from(st.running.is_none()),
                };
                (!admit).then_some(REJECT_BUSY)
            };
            st.seq += 1;
            let id = ids::mint(IdKind::Task);
            let context_id = new.context_id.unwrap_or_else(|| ids::mint(IdKind::Context));
            let mut snap = TaskSnapshot {
                id: id.clone(),
                context_id: context_id.clone(),
                state: TaskState::Submitted,
                timestamp: now,
                status_text: None,
                status_message_id: None,
                answer: None,
                no_answer_below: None,
                owner: new.owner,
                trust: new.trust,
                origin: new.origin,
                changed: st.seq,
                history: Vec::new(),
                asked_by: Vec::new(),
                cost: None,
            };
            let mut refusal = refusal;
            let offered: Arc<str> = Arc::from(new.text);
            if refusal.is_none() {
                snap.history.push(HistoryMessage {
                    role: Role::User,
                    message_id: new.message_id.clone(),
                    text: HistoryText::Own(Arc::clone(&offered)),
                });
                // Kept before it is acknowledged, or not taken at all.
                if let Some(why) = keep_offer(st, &snap, &offered, &new.traceparent, &new.grant, new.limits) {
                    snap.history.clear();
                    refusal = Some(why);
                }
            }
            // A refused offer is never run: keep none of it, in the history neither (A2A v1.0
            // §3.2.4 lets a server return fewer messages than asked).
            let text: Arc<str> = if refusal.is_some() { Arc::from("") } else { offered };
            let traceparent = if refusal.is_some() {
                None
            } else {
                new.traceparent.clone()
            };
            let grant = if refusal.is_some() { None } else { new.grant.clone() };
            ev.push(BoardEvent::Received {
                task_id: id.clone(),
                context_id,
                message_id: new.message_id,
                traceparent: new.traceparent,
                caller_member: new.caller_member,
                origin: new.origin,
                trust: new.trust,
            });
            if let Some(reason) = refusal {
                snap.state = TaskState::Rejected;
                snap.status_text = Some(reason.to_string());
                let message_id = mint_message_id();
                snap.history.push(HistoryMessage {
                    role: Role::Agent,
                    message_id: message_id.clone(),
                    text: HistoryText::Own(Arc::from(reason)),
                });
                snap.status_message_id = Some(message_id);
                ev.push(BoardEvent::Ended {
                    task_id: id.clone(),
                    state: TaskState::Rejected,
                    no_answer: false,
                    reason: Some(reason.to_string()),
                    answer: None,
                });
            } else {
                st.slot_used = true;
                st.queue.push_back(id.clone());
            }
            let pin_charge = if pinned { text.len() } else { 0 };
            if pinned {
                st.books.charge_pin(pin_charge);
            }
            let log_bytes = Arc::new(AtomicUsize::new(0));
            let entry = Entry {
                log: Arc::new(Mutex::new(StreamLog::new(st.seq, Arc::clone(&log_bytes)))),
                log_bytes,
                snap: snap.clone(),
                text,
                traceparent,
                deadline_ms: grant.as_ref().and_then(|g| g.deadline_ms),
                grant,
                limits: new.limits,
                created: st.seq,
                cancel: watch::channel(false).0,
                pins: u32::from(pinned),
                pin_charge,
                end_shown: false,
                streamed: None,
                question: None,
                asked_at: None,
                stored: if refusal.is_none() && st.store.is_some() {
                    st.seq
                } else {
                    0
                },
            };
            st.order.insert(st.seq, id.clone());
            st.tasks.insert(id, entry);
            snap
        })
    }
}

/// Keeps an admitted task's offer and first snapshot in the board's store, if it has one; the
/// refusal text when it cannot (E-RST-003), so the task is refused rather than taken unkept.
fn keep_offer(
    st: &mut State,
    snap: &TaskSnapshot,
    text: &Arc<str>,
    traceparent: &Option<String>,
    grant: &Option<Arc<crate::grant::Grant>>,
    limits: Option<crate::wire::limits::Limits>,
) -> Option<&'static str> {
    let store = st.store.as_mut()?;
    let offer = super::super::store::Offer {
        text: Arc::clone(text),
        traceparent: traceparent.clone(),
        grant: grant.clone(),
        limits,
    };
    // Tried every time: a store that was full takes tasks again once it has room.
    store
        .admit(snap, st.seq, &offer)
        .err()
        .map(|_| super::super::store::REJECT_UNKEPT)
}
