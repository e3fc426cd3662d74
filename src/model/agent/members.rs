//! Calls to other members (docs/reference/capsules.md#calls-between-members): dispatching one,
//! waiting for every answer and continuing once with them fenced, and a question put to the
//! caller (docs/reference/capsules.md#questions-across-members).

use super::*;

impl TaskRun<'_> {
    /// Whether some call still owes the model its outcome.
    pub(super) fn owes_answers(&self) -> bool {
        !self.pending.is_empty() || !self.arrived.is_empty()
    }

    /// Files outcomes handed over by the calls.
    pub(super) fn absorb(&mut self, outcomes: Vec<CallOutcome>) {
        for o in outcomes {
            if let Some(i) = self.pending.iter().position(|(id, _)| *id == o.call_id) {
                self.pending.remove(i);
                self.arrived.push(o.clone());
            }
            // Otherwise it ended at dispatch, and its tool result already said so.
            self.ended.push(o);
        }
    }

    /// Waits for every pending call, then adds the continuation message
    /// (docs/reference/capsules.md#calls-between-members).
    pub(super) async fn continue_with_answers(&mut self) {
        let started = Instant::now();
        if !self.pending.is_empty() {
            let outcomes = self.task.calls.await_all().await;
            self.absorb(outcomes);
            // A call the calls no longer know of (should not happen) must not wait forever.
            for (call_id, member) in std::mem::take(&mut self.pending) {
                self.arrived.push(CallOutcome {
                    call_id,
                    member: member.clone(),
                    status: CallStatus::Abandoned,
                    output: format!("the runtime lost track of this call, so no answer from {member} arrived"),
                    truncated: false,
                    asked_by: Vec::new(),
                });
            }
        }
        let answers = std::mem::take(&mut self.arrived);
        self.continuations += 1;
        let waited_ms = crate::timing::millis(started.elapsed());
        let turns_left = self.agent.config.max_turns.map(|m| m.saturating_sub(self.turns));
        let call_ids: Vec<&str> = answers.iter().map(|o| o.call_id.as_str()).collect();
        self.task
            .events
            .working(&format!("continuing with {} member answer(s)", answers.len()));
        self.task.events.record(
            "task_continued",
            &[
                ("task_id", json!(self.task.task_id)),
                ("continuation", json!(self.continuations)),
                ("call_ids", json!(call_ids)),
                ("waited_ms", json!(waited_ms)),
                ("turns_left", json!(turns_left)),
            ],
        );
        self.messages.push(Msg::User(continuation_message(&answers)));
    }

    /// `request-input` (docs/reference/door.md#asking): the task waits, `INPUT_REQUIRED`, for its
    /// caller's answer, which comes back fenced as untrusted. `Ok(Err)` is a tool error (nothing
    /// was asked); `Err` ends the task: no answer in time (E-ASK-001), or the task ended.
    pub(super) async fn request_input(&mut self, call: &ToolCall) -> Result<Result<String, String>, AgentOutcome> {
        let Some(asker) = self.task.asker.as_ref() else {
            return Ok(Err(format!(
                "{REQUEST_INPUT} is not available: this capsule's murmur.yaml sets no lifecycle.input_timeout_secs"
            )));
        };
        let input = call.input.as_ref().ok();
        let Some(question) = input.and_then(|i| i.get("question")).and_then(Value::as_str) else {
            return Ok(Err(format!("{REQUEST_INPUT} needs `question`, a string")));
        };
        if let Some(why) = crate::tasks::ask::question_refusal(question) {
            return Ok(Err(format!("{REQUEST_INPUT} asked nothing: {why}")));
        }
        let through = match input.and_then(|i| i.get("relay")) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(id)) => match self.task.calls.question_of(id) {
                Some(chain) => chain,
                None => {
                    return Ok(Err(format!(
                        "{REQUEST_INPUT} asked nothing: no call of this task waits with a question under the id '{}'",
                        crate::diag::shown(id)
                    )));
                }
            },
            Some(_) => return Ok(Err(format!("{REQUEST_INPUT}'s `relay` is a call id, a string"))),
        };
        match asker.ask(question, &through).await {
            Asked::Answered { text, .. } => Ok(Ok(crate::fence::untrusted("caller", &text))),
            Asked::TimedOut => Err(AgentOutcome::Failed(crate::tasks::ask::no_answer_text(asker.timeout()))),
            Asked::Ended => Err(AgentOutcome::Canceled),
        }
    }

    /// `call-member` (docs/reference/capsules.md#calls-between-members). `Err` is a tool error:
    /// nothing was sent.
    pub(super) async fn call_member(&mut self, call: &ToolCall) -> Result<CallReply, String> {
        // Step 1.
        let input = call
            .input
            .as_ref()
            .map_err(|why| format!("{CALL_MEMBER} could not read its input: {why}"))?;
        let (Some(member), Some(text)) = (
            input.get("member").and_then(Value::as_str),
            input.get("task").and_then(Value::as_str),
        ) else {
            return Err(format!(
                "{CALL_MEMBER} needs `member` (the member to call) and `task` (the task in full), both strings"
            ));
        };
        let reply_to = match input.get("reply_to") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) => Some(id.as_str()),
            Some(_) => return Err(format!("{CALL_MEMBER}'s `reply_to` is a call id, a string")),
        };
        let limit = |key: &str| match input.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| format!("{CALL_MEMBER}'s `{key}` is a whole number above 0")),
        };
        let limits = crate::runner::CallLimits::within(limit("deadline_secs")?, limit("budget")?);
        // Step 2.
        let callees = &self.agent.callees;
        if !callees.iter().any(|c| c == member) {
            return Err(not_a_callee(member, callees));
        }
        // Step 4, for answers handed over to the agent but not shown to the model yet (the calls
        // check the rest).
        let held = self
            .pending
            .iter()
            .map(|(id, m)| (id, m))
            .chain(self.arrived.iter().map(|o| (&o.call_id, &o.member)));
        if let Some((id, _)) = held.into_iter().find(|(_, m)| *m == member) {
            return Err(format!(
                "call {id} to '{member}' has not been handed back yet (it is still running, or its answer is \
                 waiting); end your turn now and collect every answer before calling '{member}' again"
            ));
        }
        let r = match reply_to {
            Some(id) => self.task.calls.reply(member, id, text).await?,
            None if limits.is_none() => self.task.calls.call(member, text).await?,
            None => self.task.calls.call_within(member, text, limits).await?,
        };
        if r.pending {
            self.pending.push((r.call_id.clone(), member.to_string()));
        } else {
            // It ended at once: take it back, so it no longer holds the member
            // (docs/reference/capsules.md#calls-between-members step 4).
            let settled = self.task.calls.take_settled();
            self.absorb(settled);
        }
        Ok(r)
    }
}
