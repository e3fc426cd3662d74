//! A running task's question to its caller (docs/reference/door.md#asking) and the one answer that
//! wins it.

use super::*;

impl Board {
    /// The running task `task_id` asks its caller `question` (docs/reference/door.md#asking):
    /// it shows `TASK_STATE_INPUT_REQUIRED` with the question as its status message, and this
    /// waits, at most `timeout`, for the one answer [`Board::answer`] delivers. `asked_by` is who
    /// asked, innermost first (the member itself, then the members a question came up through).
    ///
    /// Cancelling or ending the task meanwhile (CancelTask, wind-down, the deadline) is
    /// [`Asked::Ended`]; so is asking from a task that is not live. When the bound passes the
    /// question is withdrawn under the board's lock, so an answer either won before it (and is
    /// returned) or is refused as the task's state says; the task stays live for its runner to
    /// end. Cancel-safe: dropping the future leaves the question open until the task ends.
    pub async fn ask(&self, task_id: &str, question: &str, asked_by: &[String], timeout: std::time::Duration) -> Asked {
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let opened = self.mutate(|st, ev, now| {
            st.seq += 1;
            let seq = st.seq;
            let Some(e) = st.tasks.get_mut(task_id).filter(|e| !e.snap.state.is_terminal()) else {
                return false;
            };
            e.snap.state = TaskState::InputRequired;
            e.snap.timestamp = now;
            reorder(&mut st.order, &mut e.snap, seq);
            e.snap.status_message_id = Some(note_history(&mut e.snap, question));
            e.snap.status_text = Some(question.to_string());
            e.snap.asked_by = asked_by.to_vec();
            e.question = Some(tx);
            e.asked_at = Some(std::time::Instant::now());
            ev.push(BoardEvent::InputRequested {
                task_id: task_id.to_string(),
                asked_by: asked_by.to_vec(),
                question_bytes: question.len(),
                question: Arc::from(question),
            });
            true
        });
        if !opened {
            return Asked::Ended;
        }
        let began = std::time::Instant::now();
        let answer = match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(text)) => Some(text),
            Ok(Err(_)) => return Asked::Ended,
            Err(_) => {
                let withdrawn = self.mutate(|st, ev, _| {
                    let e = st.tasks.get_mut(task_id)?;
                    e.question.take()?;
                    ev.push(BoardEvent::InputSettled {
                        task_id: task_id.to_string(),
                        waited_ms: e.asked_at.take().map_or(0, |t| crate::timing::millis(t.elapsed())),
                        answer_bytes: None,
                        outcome: InputOutcome::TimedOut,
                        answer: None,
                    });
                    Some(())
                });
                if withdrawn.is_some() {
                    return Asked::TimedOut;
                }
                // An answer took the question first: it is in the channel, or the task ended.
                rx.try_recv().ok()
            }
        };
        match answer {
            Some(text) => Asked::Answered {
                text,
                waited: began.elapsed(),
            },
            None => Asked::Ended,
        }
    }

    /// An answer to task `task_id`'s open question, from a caller for whom `visible` admits the
    /// task's owner (SendMessage naming the task, docs/reference/door.md#asking). Exactly one
    /// answer wins a question: the task goes back to `TASK_STATE_WORKING` with the answer in its
    /// history, and the asker gets the text. Every other case changes nothing.
    pub fn answer(
        &self,
        task_id: &str,
        text: &str,
        message_id: &str,
        visible: impl Fn(Option<&str>) -> bool,
    ) -> Result<TaskSnapshot, AnswerRefusal> {
        self.mutate(|st, ev, now| {
            st.seq += 1;
            let seq = st.seq;
            let Some(e) = st.tasks.get_mut(task_id).filter(|e| visible(e.snap.owner.as_deref())) else {
                return Err(AnswerRefusal::NotFound);
            };
            if e.snap.state.is_terminal() {
                return Err(AnswerRefusal::Ended(Box::new(e.snap.clone())));
            }
            // Taken under the lock: of two answers racing, the second finds no question.
            let Some(tx) = e.question.take() else {
                return Err(AnswerRefusal::NotAsking(Box::new(e.snap.clone())));
            };
            if tx.send(text.to_string()).is_err() {
                // The asker is gone (its task is ending): nothing took the answer.
                return Err(AnswerRefusal::NotAsking(Box::new(e.snap.clone())));
            }
            e.snap.state = TaskState::Working;
            e.snap.timestamp = now;
            reorder(&mut st.order, &mut e.snap, seq);
            push_history(
                &mut e.snap,
                Role::User,
                message_id.to_string(),
                HistoryText::Own(Arc::from(text)),
            );
            e.snap.status_text = None;
            e.snap.status_message_id = None;
            e.snap.asked_by.clear();
            ev.push(BoardEvent::InputSettled {
                task_id: task_id.to_string(),
                waited_ms: e.asked_at.take().map_or(0, |t| crate::timing::millis(t.elapsed())),
                answer_bytes: Some(text.len()),
                outcome: InputOutcome::Answered,
                answer: Some(Arc::from(text)),
            });
            Ok(e.snap.clone())
        })
    }
}
