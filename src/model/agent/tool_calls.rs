//! The tool calls of a reply: the runtime's own tools and the capsule's WebAssembly and MCP tools.

use super::*;

/// One call of a WebAssembly or MCP tool, traced (`tool_call`): its result or error for the
/// model, fenced as untrusted content from that tool. Arguments that are not JSON reach nothing.
pub(super) async fn external_call(agent: &Agent, task: &TaskCtx, tool: &Tool, call: &ToolCall) -> ToolOutput {
    let name = &tool.spec.name;
    let report = match &call.input {
        Err(why) => crate::tools::CallReport {
            text: format!("{name} was not called: its arguments are not a JSON object ({why})"),
            is_error: true,
            status: "failed",
            duration: std::time::Duration::ZERO,
        },
        Ok(input) => {
            let http = |allow: &AllowList| task.calls.tool_http(allow);
            let asker = task.asker.clone();
            let ask = move |question: String| -> futures_util::future::LocalBoxFuture<'static, Result<String, String>> {
                Box::pin(mcp_question(asker.clone(), question))
            };
            let env = crate::tools::CallEnv {
                peers_env: crate::address::virtual_peer::peers_env(&agent.callees),
                http: &http,
                cancel: &task.cancel,
                timeout: crate::timing::Timing::get().tool_call,
                traceparent: crate::otel::task_traceparent(&task.task_id),
                ask: task.asker.as_ref().map(|_| &ask as &crate::tools::mcp::Ask<'_>),
            };
            crate::tools::call_external(tool, input, &env).await
        }
    };
    let input_bytes = call.input.as_ref().map_or(0, |v| v.to_string().len());
    tool_texts(task, call, &report.text);
    task.events.tool_call(&ToolCallRecord {
        task_id: task.task_id.clone(),
        call_id: call.id.clone(),
        tool: name.clone(),
        kind: tool.kind_word().to_string(),
        server: tool.server_host(),
        duration_ms: crate::timing::millis(report.duration),
        status: report.status.to_string(),
        input_bytes: u64::try_from(input_bytes).unwrap_or(u64::MAX),
        output_bytes: u64::try_from(report.text.len()).unwrap_or(u64::MAX),
    });
    ToolOutput {
        id: call.id.clone(),
        text: crate::tools::fenced(name, &report.text),
        is_error: report.is_error,
    }
}

/// A tool call's words beside the trace: its arguments as the model wrote them and its result.
fn tool_texts(task: &TaskCtx, call: &ToolCall, result: &str) {
    let arguments = match &call.input {
        Ok(v) => v.to_string(),
        Err(why) => format!("<not JSON: {why}>"),
    };
    task.events.step_text("tool", &call.id, "arguments", &arguments);
    task.events.step_text("tool", &call.id, "result", result);
}

/// An MCP server's question, asked the way `request-input` asks: the answer's text, or why
/// there is none (no answer in time: E-ASK-001).
async fn mcp_question(asker: Option<crate::tasks::ask::Asker>, question: String) -> Result<String, String> {
    let Some(asker) = asker else {
        return Err("this task cannot ask: its capsule's murmur.yaml sets no lifecycle.input_timeout_secs".into());
    };
    match asker.ask(&question, &[]).await {
        crate::tasks::Asked::Answered { text, .. } => Ok(text),
        crate::tasks::Asked::TimedOut => Err(crate::tasks::ask::no_answer_text(asker.timeout())),
        crate::tasks::Asked::Ended => Err("the task ended while the question waited for an answer".into()),
    }
}

impl TaskRun<'_> {
    /// Runs a reply's tool calls, in order, and adds their results to the conversation. `Err`
    /// ends the task: no turn is left to show the results, or `end-without-answer`.
    pub(super) async fn tools(&mut self, calls: &[ToolCall]) -> Result<(), AgentOutcome> {
        if !self.turn_left() {
            let n = self.agent.config.max_turns.unwrap_or_default();
            let limit = match self.agent.turns_source {
                crate::guard::Source::Manifest => format!("inference.max_turns: {n}"),
                crate::guard::Source::Flag => format!("--max-turns: {n}"),
                crate::guard::Source::Default => format!("the default guard: {n} model turns per task"),
            };
            return Err(AgentOutcome::MaxTurns(
                crate::diag::Diagnostic::new(
                    crate::diag::E_BUD_005,
                    format!("the model asked for a tool call after its last turn ({limit})"),
                )
                .to_string(),
            ));
        }
        // The runtime's tools change the task's state, so they run first, one by one, in order;
        // the others run at once, a few at a time, and every result keeps its call's place.
        let mut results: Vec<Option<ToolOutput>> = vec![None; calls.len()];
        let mut external = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            self.agent.totals.tool_calls.fetch_add(1, Ordering::Relaxed);
            match self.agent.tools.get(&call.name) {
                Some(Tool {
                    kind: ToolKind::Runtime(t),
                    ..
                }) => results[i] = Some(self.runtime_tool(*t, call).await?),
                Some(
                    tool @ Tool {
                        kind: ToolKind::Wasm { .. } | ToolKind::Mcp { .. },
                        ..
                    },
                ) => external.push((i, tool)),
                None => results[i] = Some(self.unknown_tool(call)),
            }
        }
        let (agent, task) = (self.agent, self.task);
        let ran: Vec<(usize, ToolOutput)> = futures_util::stream::iter(
            external
                .into_iter()
                .map(|(i, tool)| async move { (i, external_call(agent, task, tool, &calls[i]).await) }),
        )
        .buffered(crate::tools::MAX_CONCURRENT_CALLS)
        .collect()
        .await;
        for (i, output) in ran {
            results[i] = Some(output);
        }
        self.messages
            .push(Msg::ToolResults(results.into_iter().flatten().collect()));
        Ok(())
    }

    /// A call to a name the table does not hold: a tool error naming the tools there are, and a
    /// `tool_call` record of its own (`kind: unknown`, `status: refused`), so the records count
    /// every call the model asked for.
    pub(super) fn unknown_tool(&self, call: &ToolCall) -> ToolOutput {
        let names = self.agent.tools.names();
        let text = match names.split_last() {
            None => format!("there is no tool named '{}': this capsule has no tools", call.name),
            Some((last, [])) => format!("there is no tool named '{}'; the tool is {last}", call.name),
            Some((last, rest)) => format!(
                "there is no tool named '{}'; the tools are {} and {last}",
                call.name,
                rest.join(", ")
            ),
        };
        let input_bytes = call.input.as_ref().map_or(0, |v| v.to_string().len());
        tool_texts(self.task, call, &text);
        self.task.events.tool_call(&ToolCallRecord {
            task_id: self.task.task_id.clone(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            kind: "unknown".to_string(),
            server: None,
            duration_ms: 0,
            status: "refused".to_string(),
            input_bytes: u64::try_from(input_bytes).unwrap_or(u64::MAX),
            output_bytes: u64::try_from(text.len()).unwrap_or(u64::MAX),
        });
        ToolOutput {
            id: call.id.clone(),
            text,
            is_error: true,
        }
    }

    /// Runs one of the runtime's tools. `Err` ends the task (end-without-answer).
    pub(super) async fn runtime_tool(
        &mut self,
        tool: RuntimeTool,
        call: &ToolCall,
    ) -> Result<ToolOutput, AgentOutcome> {
        let reply = |text: String, is_error: bool| ToolOutput {
            id: call.id.clone(),
            text,
            is_error,
        };
        match tool {
            RuntimeTool::CallMember => Ok(match self.call_member(call).await {
                Ok(r) => reply(r.text, r.failed),
                Err(text) => reply(text, true),
            }),
            RuntimeTool::EndWithoutAnswer => match self.end_without_answer(call) {
                Ok(ended) => Err(ended),
                Err(text) => Ok(reply(text, true)),
            },
            RuntimeTool::RequestInput => match self.request_input(call).await? {
                Ok(answer) => Ok(reply(answer, false)),
                Err(text) => Ok(reply(text, true)),
            },
        }
    }

    /// `end-without-answer` (docs/reference/capsules.md#model-capsules): `Ok` ends the task, `Err`
    /// is a tool error.
    pub(super) fn end_without_answer(&mut self, call: &ToolCall) -> Result<AgentOutcome, String> {
        let reason = call
            .input
            .as_ref()
            .ok()
            .and_then(|i| i.get("reason"))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("{END_WITHOUT_ANSWER} needs `reason`, a string"))?;
        if !self.task.from_member {
            return Err(format!(
                "{END_WITHOUT_ANSWER} is only for a task another member sent you, and this one was not; answer it, \
                 or say in your answer why you cannot"
            ));
        }
        let settled = self.task.calls.take_settled();
        self.absorb(settled);
        if let Some((id, member)) = self.pending.first() {
            return Err(format!(
                "{END_WITHOUT_ANSWER} is refused while a call is outstanding: call {id} to {member} has no outcome \
                 yet; end your turn to receive it first"
            ));
        }
        Ok(AgentOutcome::NoAnswer {
            reason: reason.to_string(),
            below: crate::runner::no_answer_below(&self.ended),
        })
    }
}
