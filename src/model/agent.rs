//! The agent loop of a model capsule (docs/reference/capsules.md#model-capsules,
//! docs/reference/capsules.md#calls-between-members).
//!
//! One turn is one provider request. A reply with tool calls runs them and takes another turn; a
//! reply without any ends the attempt, and its text is the candidate answer. If the task's calls
//! still owe the model an answer and a turn is left, the task waits for every call, then continues
//! once with all the answers, fenced (docs/reference/capsules.md#calls-between-members). A tool
//! call with no turn left fails the task `max_turns_reached`. Cancelling the task drops whatever it
//! is waiting on, the in-flight request included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures_util::StreamExt;

use serde_json::{Value, json};

use super::budget::{Refusal, Spending};
use super::client::{Answer, ProviderClient, Retry, RetryNote};
use super::wire::{
    self, CALL_MEMBER, END_WITHOUT_ANSWER, Msg, REQUEST_INPUT, Reply, Request, Stop, ToolCall, ToolOutput, ToolSpec,
    Usage,
};
use super::{Identity, ModelConfig};
use crate::calls::continuation_message;
use crate::runner::{
    AllowList, BoxFuture, CallOutcome, CallStatus, CancelSignal, HttpPolicy, NetworkPolicy, not_a_callee,
};
use crate::tasks::{Asked, Asker, ContextTurn, NoAnswerBelow, TaskOutcome};
use crate::tools::{RuntimeTool, Tool, ToolKind, Toolbox};
use crate::trace::tool_call::ToolCallRecord;
use crate::trace::turn::ModelTurn;

/// How a `call-member` dispatch went, as the model is told
/// (docs/reference/capsules.md#calls-between-members).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallReply {
    pub call_id: String,
    /// The call was started or found the member busy: its outcome comes later, through
    /// [`AgentCalls::await_all`]. `false`: it ended at once, and `text` already says how.
    pub pending: bool,
    /// The tool result is a failure (the call ended at once).
    pub failed: bool,
    /// The tool result text: summary line, data line, note.
    pub text: String,
}

/// The member calls of one task, as the agent uses them. [`super::SessionCalls`] is the real one.
pub trait AgentCalls: Send + Sync {
    /// The dispatch of docs/reference/capsules.md#calls-between-members for `member`, which the
    /// agent has checked is a callee. `Err` is a tool error: nothing was sent.
    fn call<'a>(&'a self, member: &'a str, task: &'a str) -> BoxFuture<'a, Result<CallReply, String>>;
    /// Waits until every call not handed over yet has an outcome; hands them all over.
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>>;
    /// Hands over the calls that have an outcome now, without waiting.
    fn take_settled(&self) -> Vec<CallOutcome>;
    /// The outgoing-HTTP policy of one of the task's WebAssembly tools, whose own rules are
    /// `allow`: without callees, `allow` alone (no virtual peer address resolves).
    fn tool_http(&self, allow: &AllowList) -> Arc<dyn HttpPolicy> {
        Arc::new(NetworkPolicy::new(allow.clone()))
    }
    /// Who asked the question a callee's call `call_id` ended `input-required` with, innermost
    /// first: what `request-input` with `relay` passes on. `None` when no call of this task
    /// waits with a question under that id.
    fn question_of(&self, _call_id: &str) -> Option<Vec<String>> {
        None
    }
    /// Answers the question call `reply_to` to `member` ended `input-required` with
    /// (docs/reference/capsules.md#questions-across-members): a new call, reported as a dispatch
    /// is. `Err` is a tool error: nothing was sent.
    fn reply<'a>(
        &'a self,
        _member: &'a str,
        reply_to: &'a str,
        _answer: &'a str,
    ) -> BoxFuture<'a, Result<CallReply, String>> {
        let text = format!(
            "no call of this task waits with a question under the id '{}'",
            crate::diag::shown(reply_to)
        );
        Box::pin(async move { Err(text) })
    }
}

/// The calls of a member that may call nobody (it is offered no tools).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCalls;

impl AgentCalls for NoCalls {
    fn call<'a>(&'a self, member: &'a str, _task: &'a str) -> BoxFuture<'a, Result<CallReply, String>> {
        let text = not_a_callee(member, &[]);
        Box::pin(async move { Err(text) })
    }
    fn await_all(&self) -> BoxFuture<'_, Vec<CallOutcome>> {
        Box::pin(async { Vec::new() })
    }
    fn take_settled(&self) -> Vec<CallOutcome> {
        Vec::new()
    }
}

/// What a task reports besides its outcome.
pub trait TaskEvents: Send + Sync {
    /// A WORKING status with this note, e.g. `continuing with 2 member answer(s)`
    /// (docs/reference/capsules.md#calls-between-members).
    fn working(&self, note: &str);
    /// A trace record (`task_continued`, docs/reference/formation.md#trace-records), fields in
    /// order.
    fn record(&self, event_type: &str, fields: &[(&str, Value)]);
    /// A piece of answer text of turn `turn` (1-based), as the provider streams it. Text of a
    /// turn that turns out not to be the last (it asks for a tool call, or member answers are
    /// still owed) is superseded by a later turn's: a listener starts over when `turn` changes.
    fn answer_text(&self, _turn: u32, _delta: &str) {}
    /// A model turn is over, answered or failed: the `inference` record (and its span when spans
    /// are exported). It names the request, never its text.
    fn model_turn(&self, _turn: &ModelTurn) {}
    /// A WebAssembly or MCP tool call is over: the `tool_call` record (and its span). It names the
    /// call, never its input or output.
    fn tool_call(&self, _call: &ToolCallRecord) {}
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoEvents;

impl TaskEvents for NoEvents {
    fn working(&self, _note: &str) {}
    fn record(&self, _event_type: &str, _fields: &[(&str, Value)]) {}
}

/// One task, as the agent runs it.
#[derive(Clone)]
pub struct TaskCtx {
    pub task_id: String,
    /// The task is owned by `member:<x>`: `end-without-answer` is allowed
    /// (docs/reference/capsules.md#model-capsules).
    pub from_member: bool,
    pub calls: Arc<dyn AgentCalls>,
    pub cancel: CancelSignal,
    pub events: Arc<dyn TaskEvents>,
    /// How the task asks its caller, when its capsule may (`lifecycle.input_timeout_secs`).
    pub asker: Option<Asker>,
}

impl std::fmt::Debug for TaskCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskCtx")
            .field("task_id", &self.task_id)
            .field("from_member", &self.from_member)
            .field("cancel", &self.cancel)
            .finish_non_exhaustive()
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentOutcome {
    Completed(String),
    Failed(String),
    /// A tool call came with no turn left (docs/reference/capsules.md#model-capsules): the task
    /// fails, status `max_turns_reached`.
    MaxTurns(String),
    /// `end-without-answer` in a member-sent task (docs/reference/capsules.md#model-capsules).
    NoAnswer {
        reason: String,
        below: Vec<NoAnswerBelow>,
    },
    Canceled,
}

impl AgentOutcome {
    /// The outcome as the task board records it.
    pub fn into_board(self) -> TaskOutcome {
        match self {
            AgentOutcome::Completed(a) => TaskOutcome::Completed(a),
            AgentOutcome::Failed(m) | AgentOutcome::MaxTurns(m) => TaskOutcome::Failed(m),
            AgentOutcome::NoAnswer { reason, below } => TaskOutcome::NoAnswer { reason, below },
            AgentOutcome::Canceled => TaskOutcome::Canceled,
        }
    }

    /// The session status it stands for (docs/reference/formation.md#how-a-member-ends,
    /// docs/reference/formation.md#trace-records).
    pub fn status(&self) -> &'static str {
        match self {
            AgentOutcome::Completed(_) => "ok",
            AgentOutcome::Failed(_) => "failed",
            AgentOutcome::MaxTurns(_) => "max_turns_reached",
            AgentOutcome::NoAnswer { .. } => "no_answer",
            AgentOutcome::Canceled => "canceled",
        }
    }
}

/// The session's usage so far (`session_end`, docs/reference/formation.md#trace-records).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UsageTotals {
    pub turns: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub tool_calls: u64,
}

/// Usage counters shared by every task of a session.
#[derive(Debug, Default)]
pub struct Totals {
    turns: AtomicU64,
    input_tokens: AtomicU64,
    output_tokens: AtomicU64,
    tool_calls: AtomicU64,
}

impl Totals {
    pub fn snapshot(&self) -> UsageTotals {
        UsageTotals {
            turns: self.turns.load(Ordering::Relaxed),
            input_tokens: self.input_tokens.load(Ordering::Relaxed),
            output_tokens: self.output_tokens.load(Ordering::Relaxed),
            tool_calls: self.tool_calls.load(Ordering::Relaxed),
        }
    }

    /// Adds a reply's reported tokens; an unreported count adds nothing.
    fn add_tokens(&self, usage: &Usage) {
        self.input_tokens
            .fetch_add(usage.input_tokens.unwrap_or(0), Ordering::Relaxed);
        self.output_tokens
            .fetch_add(usage.output_tokens.unwrap_or(0), Ordering::Relaxed);
    }
}

/// The first request's messages: the context's earlier exchanges, then the task. A past answer
/// goes as a plain assistant message, a shape both provider APIs take.
fn conversation(prior: &[ContextTurn], task_text: &str) -> Vec<Msg> {
    let mut messages = Vec::with_capacity(2 * prior.len() + 1);
    for turn in prior {
        messages.push(Msg::User(turn.asked.to_string()));
        messages.push(Msg::Assistant(json!({"role": "assistant", "content": turn.answered})));
    }
    messages.push(Msg::User(task_text.to_string()));
    messages
}

/// A model capsule's agent: one per session, shared by its tasks.
#[derive(Debug)]
pub struct Agent {
    config: ModelConfig,
    system: String,
    callees: Vec<String>,
    tools: Toolbox,
    /// Offered to the provider, in the table's order.
    specs: Vec<ToolSpec>,
    retry: Retry,
    totals: Arc<Totals>,
    /// The session's and the formation's token budgets (docs/reference/formation.md#budgets).
    spending: Arc<Spending>,
}

impl Agent {
    /// An agent for `config`, answering as `identity`, offered the runtime tools when `callees`
    /// (roster order) is not empty.
    pub fn new(config: ModelConfig, identity: Identity, callees: Vec<String>, retry: Retry) -> Agent {
        let system = wire::system_prompt(
            &identity.capsule,
            identity.member.as_deref(),
            identity.formation.as_deref(),
            &config.system_prompt,
        );
        let tools = Toolbox::runtime(&callees);
        Agent {
            config,
            system,
            specs: tools.specs(),
            callees,
            tools,
            retry,
            totals: Arc::new(Totals::default()),
            spending: Arc::new(Spending::unlimited()),
        }
    }

    /// This agent reserving every turn from `spending` before it is sent.
    pub fn with_spending(mut self, spending: Spending) -> Agent {
        self.spending = Arc::new(spending);
        self
    }

    /// This agent offering `tools` (the runtime's own among them; see [`crate::tools::prepare`]).
    pub fn with_tools(mut self, tools: Toolbox) -> Agent {
        self.specs = tools.specs();
        self.tools = tools;
        self
    }

    /// `session_start.model`.
    pub fn model(&self) -> &str {
        &self.config.model
    }

    /// `session_start.max_turns`.
    pub fn max_turns(&self) -> Option<u32> {
        self.config.max_turns
    }

    /// `session_start.tools_declared`.
    pub fn tools_declared(&self) -> Vec<String> {
        self.tools.names()
    }

    /// The system prompt every request starts with.
    pub fn system_prompt(&self) -> &str {
        &self.system
    }

    /// The session's usage counters (`session_end`).
    pub fn totals(&self) -> Arc<Totals> {
        Arc::clone(&self.totals)
    }

    /// Runs one task to its outcome. Call it on an actix arbiter (the provider client is awc).
    pub async fn run(&self, task_text: &str, task: TaskCtx) -> AgentOutcome {
        self.run_in_context(&[], task_text, task).await
    }

    /// As [`Agent::run`], the conversation opening with `prior`: the earlier exchanges of the
    /// task's context, each the caller's message and this capsule's answer.
    pub async fn run_in_context(&self, prior: &[ContextTurn], task_text: &str, task: TaskCtx) -> AgentOutcome {
        if task.cancel.is_canceled() {
            return AgentOutcome::Canceled;
        }
        let cancel = task.cancel.clone();
        tokio::select! {
            biased;
            _ = cancel.canceled() => AgentOutcome::Canceled,
            outcome = self.run_task(prior, task_text, &task) => outcome,
        }
    }

    async fn run_task(&self, prior: &[ContextTurn], task_text: &str, task: &TaskCtx) -> AgentOutcome {
        let client = match ProviderClient::new(&self.config, &self.retry) {
            Ok(c) => c,
            Err(why) => return AgentOutcome::Failed(format!("inference failed: {why}")),
        };
        let request = self.request();
        let mut run = TaskRun {
            agent: self,
            task,
            messages: conversation(prior, task_text),
            pending: Vec::new(),
            arrived: Vec::new(),
            ended: Vec::new(),
            turns: 0,
            continuations: 0,
        };
        loop {
            let reply = match run.model_turn(&client, &request).await {
                Ok(r) => r,
                Err(Ended::Outcome(ended)) => return ended,
                Err(Ended::Budget { refusal, asked }) => {
                    return run.last_turn(&client, &request, &refusal, asked).await;
                }
            };
            if let Some(failed) = self.cut_short(&reply.stop) {
                return failed;
            }
            if let Some(echo) = reply.echo {
                run.messages.push(Msg::Assistant(echo));
            }
            if !reply.tool_calls.is_empty() {
                if let Err(ended) = run.tools(&reply.tool_calls).await {
                    return ended;
                }
                continue;
            }
            // The attempt is over; `reply.text` is the candidate answer
            // (docs/reference/capsules.md#calls-between-members).
            if !run.turn_left() || !run.owes_answers() {
                return AgentOutcome::Completed(reply.text);
            }
            run.continue_with_answers().await;
        }
    }

    /// What every request of a task shares.
    fn request(&self) -> Request<'_> {
        Request {
            provider: self.config.provider,
            model: &self.config.model,
            max_tokens: self.config.max_tokens,
            reasoning_effort: self.config.reasoning_effort.as_deref(),
            system: &self.system,
            tools: &self.specs,
            // Every turn is streamed, whoever is listening: the answer then reaches the door as
            // it is generated, for a stream subscriber there now or one that subscribes later,
            // and there is one way of reading replies rather than two. A server that answers a
            // streamed request with plain JSON is read as before.
            stream: true,
        }
    }

    /// The task's failure when the reply stopped before the model was done.
    fn cut_short(&self, stop: &Stop) -> Option<AgentOutcome> {
        let why = match stop {
            Stop::Done => return None,
            Stop::Truncated => format!(
                "the model's reply was cut at inference.max_tokens ({} tokens; a reasoning model's reasoning \
                 counts toward it)",
                self.config.max_tokens
            ),
            Stop::ContextFull => "the model's reply was cut: the conversation filled the model's context window".into(),
            Stop::Refused(why) if why.trim().is_empty() => "the model declined to answer".into(),
            Stop::Refused(why) => format!("the model declined to answer: {}", why.trim()),
        };
        Some(AgentOutcome::Failed(why))
    }
}

/// The `inference_retry` record of one retry.
fn trace_retry(task: &TaskCtx, note: &RetryNote) {
    task.events.record(
        "inference_retry",
        &[
            ("task_id", json!(task.task_id)),
            ("attempt", json!(note.attempt)),
            ("status", json!(note.status)),
            ("delay_ms", json!(crate::timing::millis(note.delay))),
            ("wait", json!(note.source.as_str())),
        ],
    );
}

/// The turn's `inference` record completed and reported: how long it took and, when a reply was
/// read, what the provider said of it.
fn report_turn(events: &dyn TaskEvents, mut record: ModelTurn, began: Instant, reply: Option<&Reply>) {
    record.duration_ms = crate::timing::millis(began.elapsed());
    if let Some(r) = reply {
        record.ok = true;
        record.response_model = r.model.clone();
        record.input_tokens = r.usage.input_tokens;
        record.output_tokens = r.usage.output_tokens;
        record.finish_reason = r.finish_reason.clone();
    }
    events.model_turn(&record);
}

/// The least reply a last turn on a spent budget is sent with: less could not say anything.
pub const LAST_TURN_MIN_TOKENS: u64 = 64;

/// Why a turn ended the task's run.
enum Ended {
    Outcome(AgentOutcome),
    /// A budget refused the turn, which asked for `asked` tokens; nothing was sent.
    Budget {
        refusal: Refusal,
        asked: u64,
    },
}

/// The state of one task's run.
struct TaskRun<'a> {
    agent: &'a Agent,
    task: &'a TaskCtx,
    messages: Vec<Msg>,
    /// Calls started or busy whose outcome the model has not been shown: `(call id, member)`.
    pending: Vec<(String, String)>,
    /// Outcomes of pending calls, handed over by the calls but not shown to the model yet.
    arrived: Vec<CallOutcome>,
    /// Every outcome handed over, shown or not (for `noAnswerBelow`).
    ended: Vec<CallOutcome>,
    turns: u32,
    continuations: u32,
}

impl TaskRun<'_> {
    /// One provider request with the conversation so far, traced: each retry
    /// (`inference_retry`), a broken stream (`inference_stream_broken`) and the turn itself
    /// (`inference`), whatever came of it. `Err` is the task's failure.
    async fn model_turn(&mut self, client: &ProviderClient, request: &Request<'_>) -> Result<Reply, Ended> {
        let (agent, task) = (self.agent, self.task);
        let body = wire::request_body(request, &self.messages);
        // Reserved before anything is sent: a turn the budgets have no room for is never sent.
        let asked = crate::budget::reservation(body.len(), request.max_tokens);
        // The hold ends once whatever ends the turn: settled below, or, should this future be
        // dropped first (a cancelled task), by its own drop, charged as a reply without usage is.
        let mut hold = match agent.spending.kept() {
            false => None,
            true => match agent.spending.reserve(asked) {
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
                return Err(Ended::Outcome(AgentOutcome::Failed(text)));
            }
        };
        report_turn(task.events.as_ref(), record, began, Some(&reply));
        agent.totals.add_tokens(&reply.usage);
        Ok(reply)
    }

    /// A turn the budgets refused (docs/reference/formation.md#budgets). A task that has member
    /// answers in hand gets one last turn when what is left covers its input and at least
    /// [`LAST_TURN_MIN_TOKENS`] of reply: `max_tokens` cut to fit, and a tool call in its reply is
    /// not run, so its text is the answer. Otherwise the task fails with the refusal, naming the
    /// budget.
    async fn last_turn(
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
    fn read(&self, answer: Answer) -> Result<Reply, String> {
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

    /// Runs a reply's tool calls, in order, and adds their results to the conversation. `Err`
    /// ends the task: no turn is left to show the results, or `end-without-answer`.
    async fn tools(&mut self, calls: &[ToolCall]) -> Result<(), AgentOutcome> {
        if !self.turn_left() {
            return Err(AgentOutcome::MaxTurns(format!(
                "the model asked for a tool call after its last turn (inference.max_turns: {})",
                self.agent.config.max_turns.unwrap_or_default()
            )));
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

    /// A call to a name the table does not hold: a tool error naming the tools there are.
    fn unknown_tool(&self, call: &ToolCall) -> ToolOutput {
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
        ToolOutput {
            id: call.id.clone(),
            text,
            is_error: true,
        }
    }

    /// Whether another provider request is allowed.
    fn turn_left(&self) -> bool {
        self.agent.config.max_turns.is_none_or(|m| self.turns < m)
    }

    /// Whether some call still owes the model its outcome.
    fn owes_answers(&self) -> bool {
        !self.pending.is_empty() || !self.arrived.is_empty()
    }

    /// Files outcomes handed over by the calls.
    fn absorb(&mut self, outcomes: Vec<CallOutcome>) {
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
    async fn continue_with_answers(&mut self) {
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

    /// Runs one of the runtime's tools. `Err` ends the task (end-without-answer).
    async fn runtime_tool(&mut self, tool: RuntimeTool, call: &ToolCall) -> Result<ToolOutput, AgentOutcome> {
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

    /// `request-input` (docs/reference/door.md#asking): the task waits, `INPUT_REQUIRED`, for its
    /// caller's answer, which comes back fenced as untrusted. `Ok(Err)` is a tool error (nothing
    /// was asked); `Err` ends the task: no answer in time (E-ASK-001), or the task ended.
    async fn request_input(&mut self, call: &ToolCall) -> Result<Result<String, String>, AgentOutcome> {
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
            Asked::Answered { text, .. } => Ok(Ok(format!(
                "<untrusted-content source=caller>\n{}\n</untrusted-content>",
                crate::calls::neutralise(&text)
            ))),
            Asked::TimedOut => Err(AgentOutcome::Failed(crate::tasks::ask::no_answer_text(asker.timeout()))),
            Asked::Ended => Err(AgentOutcome::Canceled),
        }
    }

    /// `call-member` (docs/reference/capsules.md#calls-between-members). `Err` is a tool error:
    /// nothing was sent.
    async fn call_member(&mut self, call: &ToolCall) -> Result<CallReply, String> {
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
            None => self.task.calls.call(member, text).await?,
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

    /// `end-without-answer` (docs/reference/capsules.md#model-capsules): `Ok` ends the task, `Err`
    /// is a tool error.
    fn end_without_answer(&mut self, call: &ToolCall) -> Result<AgentOutcome, String> {
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

/// One call of a WebAssembly or MCP tool, traced (`tool_call`): its result or error for the
/// model, fenced as untrusted content from that tool. Arguments that are not JSON reach nothing.
async fn external_call(agent: &Agent, task: &TaskCtx, tool: &Tool, call: &ToolCall) -> ToolOutput {
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
            let env = crate::tools::CallEnv {
                peers_env: crate::address::virtual_peer::peers_env(&agent.callees),
                http: &http,
                cancel: &task.cancel,
                timeout: crate::timing::Timing::get().tool_call,
            };
            crate::tools::call_external(tool, input, &env).await
        }
    };
    let input_bytes = call.input.as_ref().map_or(0, |v| v.to_string().len());
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

#[cfg(test)]
mod context_tests {
    use super::*;

    #[test]
    fn earlier_exchanges_open_the_conversation() {
        let prior = [
            ContextTurn {
                asked: Arc::from("q1"),
                answered: "a1".into(),
            },
            ContextTurn {
                asked: Arc::from("q2"),
                answered: "a2".into(),
            },
        ];
        let m = conversation(&prior, "q3");
        let seen: Vec<Value> = m
            .iter()
            .map(|m| match m {
                Msg::User(t) => json!({"role": "user", "content": t}),
                Msg::Assistant(v) => v.clone(),
                Msg::ToolResults(_) => Value::Null,
            })
            .collect();
        assert_eq!(
            seen,
            [
                json!({"role": "user", "content": "q1"}),
                json!({"role": "assistant", "content": "a1"}),
                json!({"role": "user", "content": "q2"}),
                json!({"role": "assistant", "content": "a2"}),
                json!({"role": "user", "content": "q3"}),
            ]
        );
        assert!(matches!(conversation(&[], "only").as_slice(), [Msg::User(t)] if t == "only"));
    }
}
