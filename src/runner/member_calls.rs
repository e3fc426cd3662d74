//! One task's calls to other members, as a runner makes them
//! (docs/reference/capsules.md#calls-between-members): the component's `call-member` imports and
//! the model's `call-member` tool alike. The session implements [`MemberCalls`] (`calls`).

use super::BoxFuture;
pub use crate::task::CallStatus;

/// How much narrower than its task's own grant one call's is (docs/reference/formation.md#grants):
/// a deadline (Unix ms) and a token budget, each optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallLimits {
    pub deadline_ms: Option<u64>,
    pub budget: Option<u64>,
}

impl CallLimits {
    /// At most `deadline_secs` from now and `budget` tokens.
    pub fn within(deadline_secs: Option<u64>, budget: Option<u64>) -> CallLimits {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, crate::timing::millis);
        CallLimits {
            deadline_ms: deadline_secs.map(|s| now.saturating_add(s.saturating_mul(1000))),
            budget,
        }
    }

    pub fn is_none(&self) -> bool {
        self.deadline_ms.is_none() && self.budget.is_none()
    }
}

/// One call a task started, once it has an outcome (what `await-all` hands the component).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOutcome {
    pub call_id: String,
    pub member: String,
    pub status: CallStatus,
    /// Capped and redacted as docs/reference/capsules.md#calls-between-members says, not fenced.
    pub output: String,
    pub truncated: bool,
    /// For an `input_required` call (its output is the question): who asked, innermost first.
    pub asked_by: Vec<String>,
}

/// `metadata.murmur.noAnswerBelow` of a task that ends without an answer
/// (docs/reference/door.md#methods, docs/reference/capsules.md#model-capsules): the `{member,
/// status}` of each of its calls that ended without an answer, in start order. The one rule for
/// model and component capsules alike.
pub fn no_answer_below(ended: &[CallOutcome]) -> Vec<crate::tasks::NoAnswerBelow> {
    ended
        .iter()
        .filter(|o| o.status != CallStatus::Completed)
        .map(|o| crate::tasks::NoAnswerBelow {
            member: o.member.clone(),
            status: o.status.as_str().to_string(),
        })
        .collect()
}

/// The member calls of one task
/// (docs/reference/capsules.md#calls-between-members),
/// implemented by the session. Calls still outstanding when a component's run returns are the
/// session's to end `abandoned` (docs/reference/capsules.md#component-capsules).
pub trait MemberCalls: Send + Sync {
    /// Dispatches a call; `Ok(call id)` once the callee's door holds the task or is busy (the
    /// session keeps re-offering), `Err(message)` for a dispatch fault.
    fn start<'a>(&'a self, member: &'a str, task: &'a str) -> BoxFuture<'a, Result<String, String>>;
    /// Waits until every call this task started has an outcome; returns each not yet returned.
    /// A call whose callee asked a question is returned `failed` (this interface cannot answer
    /// it) and the callee's task is cancelled.
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>>;
    /// Waits for the next call not returned yet to have an outcome (an `input_required` one
    /// included) and returns it; `None` once every call was returned.
    fn await_next(&self) -> BoxFuture<'_, Option<CallOutcome>> {
        Box::pin(async { None })
    }
    /// Answers the question call `call_id` ended `input_required` with: `Ok(call id)` of the
    /// reply, a call of its own; `Err(message)` when no question is open under that id.
    fn reply<'a>(&'a self, call_id: &'a str, _answer: &'a str) -> BoxFuture<'a, Result<String, String>> {
        let message = format!(
            "no call of this task waits with a question under the id '{}'",
            crate::diag::shown(call_id)
        );
        Box::pin(async move { Err(message) })
    }
}

/// The dispatch fault of a call to `member`, which is not one of `callees`
/// (docs/reference/capsules.md#calls-between-members): the one text for a component's and a model
/// capsule's calls alike.
pub fn not_a_callee(member: &str, callees: &[String]) -> String {
    let may = if callees.is_empty() {
        "it may call no member".to_string()
    } else {
        format!("it may call: {}", callees.join(", "))
    };
    format!("'{member}' is not a member this capsule may call; {may}")
}

/// Member calls of a capsule that may call nobody.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCallees;

impl MemberCalls for NoCallees {
    fn start<'a>(&'a self, member: &'a str, _task: &'a str) -> BoxFuture<'a, Result<String, String>> {
        let message = not_a_callee(member, &[]);
        Box::pin(async move { Err(message) })
    }

    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        Box::pin(async { Vec::new() })
    }
}
