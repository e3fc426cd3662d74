//! The answer text a model capsule streams while its task runs.

use super::*;

/// A running task's streamed answer text: that of one turn (a later turn's starts over).
#[derive(Debug)]
pub(super) struct Streamed {
    pub(super) turn: u32,
    pub(super) text: String,
}

impl Board {
    /// Answer text turn `turn` of a running model task streamed, for stream followers. Text of
    /// a turn other than the last one seen starts the streamed text over. Not a status change:
    /// followers are woken, nothing else moves. Ignored for a task that is not live.
    pub fn stream_text(&self, task_id: &str, turn: u32, delta: &str) {
        {
            let mut st = self.lock();
            let Some(e) = st.tasks.get_mut(task_id).filter(|e| !e.snap.state.is_terminal()) else {
                return;
            };
            match &mut e.streamed {
                Some(s) if s.turn == turn => s.text.push_str(delta),
                slot => {
                    *slot = Some(Streamed {
                        turn,
                        text: delta.to_string(),
                    })
                }
            }
        }
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The streamed answer text a follower holding `have` (turn, bytes of it) has not seen, if
    /// any: the rest of its turn, or a newer turn's text whole.
    pub fn streamed_since(&self, task_id: &str, have: Option<(u32, usize)>) -> Option<AnswerChunk> {
        let st = self.lock();
        let s = st.tasks.get(task_id)?.streamed.as_ref()?;
        match have {
            Some((turn, len)) if turn == s.turn => (s.text.len() > len).then(|| AnswerChunk {
                turn,
                append: true,
                text: s.text.get(len..).unwrap_or_default().to_string(),
            }),
            _ => (!s.text.is_empty()).then(|| AnswerChunk {
                turn: s.turn,
                append: false,
                text: s.text.clone(),
            }),
        }
    }
}
