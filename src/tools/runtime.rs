//! The tools the runtime itself gives a model: `call-member` and `end-without-answer`, offered to
//! a member with callees (docs/reference/capsules.md#model-capsules), and `request-input`,
//! offered when the manifest lets the capsule ask (docs/reference/door.md#asking). What they do
//! lives in the agent loop, which owns the task's calls; here is only how the model is told of
//! them.

use serde_json::json;

use crate::wire::model::{CALL_MEMBER, END_WITHOUT_ANSWER, REQUEST_INPUT, ToolSpec};

const CALL_MEMBER_DESCRIPTION: &str = "Give a task to another member of your formation. The member sees nothing but \
the task text you write here, so state the task in full. The tool returns immediately, before the member answers: \
every answer is delivered to you once your current turn is over, so end your turn when you have nothing else to do. \
Calling a member again while its previous answer is still pending is refused. When a member's call is waiting with a \
question (input-required), answer it by calling that member again with `reply_to` set to the call's id and your \
answer as `task`.";

const END_WITHOUT_ANSWER_DESCRIPTION: &str = "End the current task without an answer, and say why. Only for a task \
another member sent you, once none of your member calls is still outstanding; the member that sent the task is told \
that you gave no answer.";

const REQUEST_INPUT_DESCRIPTION: &str = "Ask whoever gave you this task a question, and wait for the answer: for a \
decision, a missing fact or an approval you cannot do without. The task pauses until the answer comes, which is then \
this tool's result; if none comes in time the task fails. Ask one clear question at a time. When a member you called \
asked you something you cannot answer yourself, ask it on here with `relay` set to that call's id.";

/// A tool the runtime implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeTool {
    CallMember,
    EndWithoutAnswer,
    RequestInput,
}

impl RuntimeTool {
    /// Every runtime tool a member with callees is offered, in the order it is offered them.
    pub const WITH_CALLEES: [RuntimeTool; 2] = [RuntimeTool::CallMember, RuntimeTool::EndWithoutAnswer];

    pub fn name(self) -> &'static str {
        match self {
            RuntimeTool::CallMember => CALL_MEMBER,
            RuntimeTool::EndWithoutAnswer => END_WITHOUT_ANSWER,
            RuntimeTool::RequestInput => REQUEST_INPUT,
        }
    }

    /// How the model is told of it; `callees` (roster order) are `call-member`'s choices.
    pub fn spec(self, callees: &[String]) -> ToolSpec {
        let (description, schema) = match self {
            RuntimeTool::CallMember => (
                CALL_MEMBER_DESCRIPTION,
                json!({
                    "type": "object",
                    "properties": {
                        "member": {"type": "string", "enum": callees},
                        "task": {"type": "string"},
                        "reply_to": {"type": "string", "description": "the call id of a member's question this task answers"},
                        "deadline_secs": {"type": "integer", "minimum": 1, "description": "the member's task ends, canceled, at most this many seconds from now (never later than your own task's deadline)"},
                        "budget": {"type": "integer", "minimum": 1, "description": "the most tokens the member's task may spend (never more than your own task has left)"},
                    },
                    "required": ["member", "task"],
                }),
            ),
            RuntimeTool::EndWithoutAnswer => (
                END_WITHOUT_ANSWER_DESCRIPTION,
                json!({
                    "type": "object",
                    "properties": {"reason": {"type": "string"}},
                    "required": ["reason"],
                }),
            ),
            RuntimeTool::RequestInput => (
                REQUEST_INPUT_DESCRIPTION,
                json!({
                    "type": "object",
                    "properties": {
                        "question": {"type": "string"},
                        "relay": {"type": "string", "description": "the call id of a member's question this one passes on"},
                    },
                    "required": ["question"],
                }),
            ),
        };
        ToolSpec {
            name: self.name().to_string(),
            description: description.to_string(),
            schema,
        }
    }
}
