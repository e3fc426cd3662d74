//! A task's history and its end: status messages, the bounded history, and what ending a task
//! changes.

use super::*;

pub(super) fn end(
    e: &mut Entry,
    order: &mut BTreeMap<u64, String>,
    state: TaskState,
    text: Option<String>,
    seq: u64,
    now: DateTime<Utc>,
    ev: &mut Vec<BoardEvent>,
) {
    e.snap.state = state;
    e.snap.timestamp = now;
    reorder(order, &mut e.snap, seq);
    e.snap.status_message_id = text.as_deref().map(|t| note_history(&mut e.snap, t));
    e.snap.status_text = text;
    // The answer, if any, is whole now.
    e.streamed = None;
    // An open question is over: its asker hears so, and no answer can land any more. An ended
    // task asks nobody, whether its question was open or withdrawn at its bound.
    e.snap.asked_by.clear();
    if e.question.take().is_some() {
        ev.push(BoardEvent::InputSettled {
            task_id: e.snap.id.clone(),
            waited_ms: e.asked_at.take().map_or(0, |t| crate::timing::millis(t.elapsed())),
            answer_bytes: None,
            outcome: InputOutcome::Abandoned,
            answer: None,
        });
    }
}

/// Adds a status message to the history; its message id, which the status shows too.
pub(super) fn note_history(snap: &mut TaskSnapshot, text: &str) -> String {
    let id = mint_message_id();
    push_history(snap, Role::Agent, id.clone(), HistoryText::Own(Arc::from(text)));
    id
}

/// Appends to the history within [`HISTORY_MESSAGES`]: when full, the newest message replaces the
/// last one, so the caller's message and the final word are always kept.
pub(super) fn push_history(snap: &mut TaskSnapshot, role: Role, message_id: String, text: HistoryText) {
    if snap.history.len() >= HISTORY_MESSAGES.max(2) {
        snap.history.pop();
    }
    snap.history.push(HistoryMessage { role, message_id, text });
}
