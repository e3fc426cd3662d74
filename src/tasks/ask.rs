//! A running task asking its caller for input (docs/reference/door.md#asking): what a model
//! capsule's `request-input` tool and a component's `request-input` import hold.
//!
//! An [`Asker`] exists only for a task whose capsule may ask (`lifecycle.input_timeout_secs`),
//! and holds that bound; the board does the rest ([`Board::ask`]).

use std::sync::Arc;
use std::time::Duration;

use super::{Asked, Board};

/// Longest question a task may ask, in bytes [ours]: it becomes the task's status message, shown
/// by every GetTask and stream, and a caller's model reads it.
pub const MAX_QUESTION_BYTES: usize = 16 * 1024;

/// What one task asks with.
#[derive(Clone)]
pub struct Asker {
    board: Arc<Board>,
    task_id: String,
    /// The asking member, when the session is one (the first name of `askedBy`).
    member: Option<String>,
    timeout: Duration,
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asker")
            .field("task_id", &self.task_id)
            .field("member", &self.member)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a question was not asked at all.
pub fn question_refusal(question: &str) -> Option<String> {
    if question.trim().is_empty() {
        return Some("the question is empty: say what you need to know".to_string());
    }
    (question.len() > MAX_QUESTION_BYTES).then(|| {
        format!(
            "the question is {} bytes, more than the {MAX_QUESTION_BYTES} a question may hold; ask it shorter",
            question.len()
        )
    })
}

impl Asker {
    pub fn new(board: Arc<Board>, task_id: &str, member: Option<String>, timeout: Duration) -> Asker {
        Asker {
            board,
            task_id: task_id.to_string(),
            member,
            timeout,
        }
    }

    /// The bound of one wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Asks `question`, which came up through `through` (the members, innermost first, whose
    /// own questions it carries on; empty for the task's own). Waits for the answer, the bound,
    /// or the task's end.
    pub async fn ask(&self, question: &str, through: &[String]) -> Asked {
        let asked_by: Vec<String> = through.iter().cloned().chain(self.member.clone()).collect();
        self.board.ask(&self.task_id, question, &asked_by, self.timeout).await
    }
}

/// The text a task fails with when its question got no answer within the bound (E-ASK-001).
pub fn no_answer_text(timeout: Duration) -> String {
    // One line with its code: a task's status text is a message, not a terminal diagnostic.
    crate::diag::Diagnostic::new(
        crate::diag::E_ASK_001,
        format!(
            "the task asked for input and no answer came within lifecycle.input_timeout_secs ({} s)",
            timeout.as_secs()
        ),
    )
    .without_hint()
    .render("")
}
