//! One provider turn: the request, its retries and stream, the budget's last turn, and reading the
//! reply.

use super::*;

impl TaskRun<'_> {
    /// One provider request with the conversation so far, traced: each retry
    /// (`inference_retry`), a broken stream (`inference_stream_broken`) and the turn itself
    /// (`inference`), whatever came of it. `Err` is the task's failure.
    pub(super) async fn model_turn(&mut self, client: &ProviderClient, request: &Request<'_>) -> Result<Reply, Ended> {
        let (agent, task) = (self.agent, self.task);
        let body = wire::request_body(request, &self.messages);
        // Reserved before anything is sent: a turn the budgets have no room for is never sent.
        let asked = crate::budget::reservation(body.len(), request.max_tokens);
        // The hold ends once whatever ends the turn: settled below, or, should this future be
        // dropped first (a cancelled task), by its own drop, charged as a reply without usage is.
        let grant = task.budget_grant.as_deref();
        let mut hold = match agent.spending.kept_for(grant) {
            false => None,
            true => match agent.spending.reserve_under(asked, grant) {
                Ok(hold) => Some(hold),
                Err(refusal) => return Err(Ended::Budget { refusal, asked }),
            },
        };
        let retries = std::cell::Cell::new(0u32);
        let traced = |note: &RetryNote| {
            retries.set(note.attempt);
            trace_retry(task, note);
        };
        let turn = self.turns + 1;
        let began = Instant::now();
        if let Some(hold) = hold.as_mut() {
            hold.sending();
        }
        let answer = client
            .send(&body, traced, |delta| task.events.answer_text(turn, delta))
            .await;
        let mut record = ModelTurn {
            task_id: task.task_id.clone(),
            turn,
            provider: agent.config.provider.as_str().to_string(),
            model: agent.config.model.clone(),
            retries: retries.get(),
            streamed: matches!(answer, Ok(Answer::Streamed(_) | Answer::Broken(_))),
            budget_reserved: hold.as_ref().map(|h| h.tokens()),
            ..ModelTurn::default()
        };
        // A reply that came but cannot be used may still have been billed: it is charged its
        // reservation, and so is a request given up on after it went out. A request that never
        // reached the provider is charged nothing.
        let billable = match &answer {
            Ok(_) => true,
            Err(failure) => failure.abandoned,
        };
        let read = match answer {
            Ok(answer) => {
                self.turns += 1;
                agent.totals.turns.fetch_add(1, Ordering::Relaxed);
                self.read(answer)
            }
            Err(failure) => Err(failure.text),
        };
        let usage = read.as_ref().ok().map(|r| r.usage);
        if let Some(hold) = hold {
            let charged = match &usage {
                Some(u) => crate::budget::charge(hold.tokens(), u.input_tokens, u.output_tokens),
                None if billable => hold.tokens(),
                None => 0,
            };
            let settled = hold.settle(charged);
            record.budget_charged = Some(charged);
            record.budget_left = settled.formation_left.or(settled.session_left);
        }
        let reply = match read {
            Ok(reply) => reply,
            Err(text) => {
                report_turn(task.events.as_ref(), record, began, None);
                self.turn_texts(turn, None);
                return Err(Ended::Outcome(AgentOutcome::Failed(text)));
            }
        };
        report_turn(task.events.as_ref(), record, began, Some(&reply));
        self.turn_texts(turn, Some(&reply));
        agent.totals.add_tokens(&reply.usage);
        Ok(reply)
    }

    /// The turn's words beside the trace: what it was newly given and, once read, what it answered.
    fn turn_texts(&self, turn: u32, reply: Option<&Reply>) {
        let events = self.task.events.as_ref();
        let key = turn.to_string();
        events.step_text("turn", &key, "input", &crate::trace::texts::turn_input(&self.messages));
        if let Some(r) = reply {
            let output = crate::trace::texts::turn_output(&r.text, &r.tool_calls);
            events.step_text("turn", &key, "output", &output);
        }
    }

    /// A turn the budgets refused (docs/reference/formation.md#budgets). A task that has member
    /// answers in hand gets one last turn when what is left covers its input and at least
    /// [`LAST_TURN_MIN_TOKENS`] of reply: `max_tokens` cut to fit, and a tool call in its reply is
    /// not run, so its text is the answer. Otherwise the task fails with the refusal, naming the
    /// budget.
    pub(super) async fn last_turn(
        &mut self,
        client: &ProviderClient,
        request: &Request<'_>,
        refusal: &Refusal,
        asked: u64,
    ) -> AgentOutcome {
        let failed = || AgentOutcome::Failed(refusal.failure(asked));
        let input = asked.saturating_sub(u64::from(request.max_tokens));
        let room = refusal.left().unwrap_or(0).max(0) as u64;
        let reply_room = room.saturating_sub(input);
        if self.ended.is_empty() || reply_room < LAST_TURN_MIN_TOKENS {
            return failed();
        }
        let max_tokens = u32::try_from(reply_room.min(u64::from(request.max_tokens))).unwrap_or(request.max_tokens);
        let last = Request { max_tokens, ..*request };
        self.task.events.record(
            "budget_last_turn",
            &[("task_id", json!(self.task.task_id)), ("max_tokens", json!(max_tokens))],
        );
        match self.model_turn(client, &last).await {
            Ok(reply) if reply.tool_calls.is_empty() && matches!(reply.stop, Stop::Done) => {
                AgentOutcome::Completed(reply.text)
            }
            Ok(_) | Err(Ended::Budget { .. }) => failed(),
            Err(Ended::Outcome(ended)) => ended,
        }
    }

    /// The reply in a successful answer, scrubbed of every credential the member holds
    /// ([`Reply::scrubbed`]): the one reading of a provider's reply. `Err` is the task's failure
    /// text (the client scrubbed a broken stream's).
    pub(super) fn read(&self, answer: Answer) -> Result<Reply, String> {
        match answer {
            Answer::Streamed(reply) => Ok(reply.scrubbed()),
            Answer::Whole(bytes) => wire::parse_reply(self.agent.config.provider, &bytes)
                .map(Reply::scrubbed)
                .map_err(|why| {
                    crate::secret::scrub(format!(
                        "inference failed: the provider's reply could not be read: {why}"
                    ))
                }),
            Answer::Broken(text) => {
                // The client may have shown part of the answer: the trace keeps what came
                // (answer text only, never the prompt) in the record before the task's end.
                self.task.events.record(
                    "inference_stream_broken",
                    &[("task_id", json!(self.task.task_id)), ("reason", json!(text))],
                );
                Err(text)
            }
        }
    }

    /// Whether another provider request is allowed.
    pub(super) fn turn_left(&self) -> bool {
        self.agent.config.max_turns.is_none_or(|m| self.turns < m)
    }
}
