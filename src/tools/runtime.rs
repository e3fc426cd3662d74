//! The tools the runtime itself gives a model: `call-member` and `end-without-answer`, offered to
//! a member with callees (docs/reference/capsules.md#model-capsules). What they do lives in the
//! agent loop, which owns the task's calls; here is only how the model is told of them.

use serde_json::json;

use crate::wire::model::{CALL_MEMBER, END_WITHOUT_ANSWER, ToolSpec};

const CALL_MEMBER_DESCRIPTION: &str = "Give a task to another member of your formation. The member sees nothing but \
the task text you write here, so state the task in full. The tool returns immediately, before the member answers: \
every answer is delivered to you once your current turn is over, so end your turn when you have nothing else to do. \
Calling a member again while its previous answer is still pending is refused.";

const END_WITHOUT_ANSWER_DESCRIPTION: &str = "End the current task without an answer, and say why. Only for a task \
another member sent you, once none of your member calls is still outstanding; the member that sent the task is told \
that you gave no answer.";

/// A tool the runtime implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeTool {
    CallMember,
    EndWithoutAnswer,
}

impl RuntimeTool {
    /// Every runtime tool a member with callees is offered, in the order it is offered them.
    pub const WITH_CALLEES: [RuntimeTool; 2] = [RuntimeTool::CallMember, RuntimeTool::EndWithoutAnswer];

    pub fn name(self) -> &'static str {
        match self {
            RuntimeTool::CallMember => CALL_MEMBER,
            RuntimeTool::EndWithoutAnswer => END_WITHOUT_ANSWER,
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
        };
        ToolSpec {
            name: self.name().to_string(),
            description: description.to_string(),
            schema,
        }
    }
}
