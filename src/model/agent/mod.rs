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

mod members;
mod outcome;
mod ports;
mod tool_calls;
mod turn;

pub use outcome::{AgentOutcome, Totals, UsageTotals};
pub use ports::{AgentCalls, CallReply, NoCalls, NoEvents, TaskCtx, TaskEvents};

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
    /// What set `config.max_turns`, named when a task reaches it (E-BUD-005).
    turns_source: crate::guard::Source,
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
            turns_source: crate::guard::Source::Manifest,
        }
    }

    /// This agent with at most `turns` model turns per task, set by `source` (the default guard,
    /// `--max-turns`, or `inference.max_turns`).
    pub fn with_turns(mut self, (turns, source): (Option<u32>, crate::guard::Source)) -> Agent {
        self.config.max_turns = turns;
        self.turns_source = source;
        self
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

/// The `inference_retry` record of one retry, and on a terminal (a lone session's, or the entry
/// member's) a line saying so as it happens, so a slow turn is not silent.
fn trace_retry(task: &TaskCtx, note: &RetryNote) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprintln!("{}", retry_line(note));
    }
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

/// The line a terminal shows for one retry: what the provider did and when the next try goes.
fn retry_line(note: &RetryNote) -> String {
    let what = match note.status {
        Some(s) => format!("the model provider answered {s}"),
        None => "no reply from the model provider".to_string(),
    };
    format!(
        "[capsule-runtime] {what}; retry {} in {:.1} s",
        note.attempt,
        note.delay.as_secs_f64()
    )
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
