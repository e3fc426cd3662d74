//! The executor: takes work from the task board, one task at a time, and runs it on the
//! session's runner: the capsule host, the model agent or the remote forwarder
//! (docs/reference/capsules.md), each handed only its own environment.
//!
//! It runs on an arbiter thread of its own, so a component busy computing never delays the
//! session's controller (signals, lifeline, deadline) or the door. A task cancelled on the board
//! (CancelTask, wind-down) fires the capsule's cancel signal, and the component stops promptly.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use actix::Actor;
use tokio::sync::mpsc::UnboundedSender;

use crate::calls;
use crate::capsule::{self, Capsule, OutputSink, TaskEnv};
use crate::channel::{self, FirstLine, Intake};
use crate::manifest::Manifest;
use crate::model::{self, Agent, AgentCalls, AgentOutcome, TaskCtx, TaskEvents};
use crate::runner::{
    AllowList, CallOutcome, CallStatus, CancelSignal, HttpPolicy, MemberCalls, NetworkPolicy, NoCallees,
};
use crate::tasks::{Board, TaskOutcome, Work};
use crate::timing::Timing;
use crate::trace::TraceWriter;
use crate::wire::limits::Limits;

use super::journal::Journal;
use super::records::Console;
use super::winddown::LifelineProbe;

/// What runs a session's tasks: a WebAssembly component, or the agent loop of a model capsule.
#[derive(Clone)]
pub enum Runner {
    Component(Capsule),
    /// A component mapped at the first task (a member without `--task` handed its entry).
    Deferred(Arc<capsule::Deferred>),
    Model(Arc<Agent>),
    /// A remote capsule: each task is forwarded to its agent (`crate::remote`).
    Remote(Arc<crate::remote::RemoteAgent>),
}

impl Runner {
    /// `session_start.tools_declared` and the card's tools.
    pub fn tools_declared(&self) -> Vec<String> {
        match self {
            Runner::Component(_) | Runner::Deferred(_) | Runner::Remote(_) => Vec::new(),
            Runner::Model(agent) => agent.tools_declared(),
        }
    }
}

/// What the executor tells the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// A task left the queue and started running.
    Started { task_id: String },
    /// A task's run is over and the board holds its outcome.
    Done { task_id: String },
    /// The board is closed and drained: the executor has stopped.
    Gone,
}

/// What the executor needs from the session around each task. Each kind of runner is handed
/// only its own environment, built once per task.
pub trait TaskSetup: Send + Sync {
    /// What a component's task runs with (docs/reference/capsules.md#component-capsules):
    /// identity, member calls, network policy, output, limits, cancellation and its asker.
    fn component_env(&self, work: &Work, board: &Arc<Board>, cancel: CancelSignal) -> TaskEnv;
    /// The task's run is over (e.g. its unawaited member calls end `abandoned`): how each of its
    /// member calls ended, in start order.
    fn finished(&self, task_id: &str) -> Vec<CallOutcome>;
    /// What a model capsule's task runs with (docs/reference/capsules.md#model-capsules): its
    /// calls, cancellation, events and asker.
    fn model_task(&self, work: &Work, board: &Arc<Board>, cancel: CancelSignal) -> TaskCtx;
    /// How a task of a capsule that may ask asks its caller; `None` when it may not (a remote
    /// capsule's task takes only this).
    fn asker(&self, _work: &Work, _board: &Arc<Board>) -> Option<crate::tasks::Asker> {
        None
    }
    /// A model capsule's task ended `max_turns_reached` (the board only knows it failed).
    fn max_turns_reached(&self, task_id: &str);
    /// Whether the member's formation has ended (its lifeline is closed), even if the
    /// controller has not heard of it yet.
    fn formation_has_ended(&self) -> bool {
        false
    }
    /// Whether the member's lifeline closes within `grace` (at once if it is closed already).
    fn formation_ends_within(&self, _grace: Duration) -> crate::runner::BoxFuture<'_, bool> {
        Box::pin(async { false })
    }
    /// The grant a task that came with no grant but with a client's `limits` runs under: the
    /// launcher's root for it, narrowed to them
    /// (docs/reference/formation.md#limits-across-the-formations-edge). `Ok(None)` without a
    /// launcher to ask (the limits then bound the task's deadline alone); `Err(why)` when the
    /// launcher refuses (the task then fails before it runs).
    fn root_grant(&self, _work: &Work, _limits: Limits) -> Result<Option<Arc<crate::grant::Grant>>, String> {
        Ok(None)
    }
    /// The task left the queue and is about to run (`task_start`, its span).
    fn started(&self, _work: &Work) {}
    /// What the task and its calls spent, its run having taken `wall_ms`; forgotten here once
    /// asked (docs/reference/formation.md#cost-roll-up).
    fn cost(&self, _task_id: &str, _wall_ms: u64) -> Option<crate::cost::Cost> {
        None
    }
}

/// How long a member whose callee was cut off waits for its own lifeline to close, in case the
/// formation's end reached the callee first. Only that path waits, and only until the lifeline
/// closes: a callee that ended alone delays the task's end by this much at most.
const LIFELINE_GRACE: Duration = Duration::from_millis(500);

/// Starts draining `board` on `arbiter`; events go to `events`.
///
/// With `only_one` (a lifecycle that ends after a task, docs/reference/manifest.md#keys) it runs
/// the first task and then takes nothing more: the controller closes the board, which rejects
/// whatever is queued, rather than the next task starting and being cancelled.
pub fn spawn(
    arbiter: &actix_rt::ArbiterHandle,
    board: Arc<Board>,
    runner: Runner,
    setup: Arc<dyn TaskSetup>,
    only_one: bool,
    events: UnboundedSender<ExecEvent>,
) -> bool {
    // Spawned from inside the arbiter's thread: a model capsule's provider client (awc) is not
    // `Send`, so the loop runs as a local task there.
    arbiter.spawn_fn(move || {
        actix_rt::spawn(drain(board, runner, setup, only_one, events));
    })
}

async fn drain(
    board: Arc<Board>,
    runner: Runner,
    setup: Arc<dyn TaskSetup>,
    only_one: bool,
    events: UnboundedSender<ExecEvent>,
) {
    while let Some(mut work) = board.next_work().await {
        let task_id = work.task_id.clone();
        let _ = events.send(ExecEvent::Started {
            task_id: task_id.clone(),
        });
        // A client's limits narrow the root the task's calls and turns are granted under.
        if work.grant.is_none()
            && let Some(limits) = work.limits
        {
            match setup.root_grant(&work, limits) {
                Ok(grant) => work.grant = grant,
                Err(why) => {
                    board.finish(&task_id, TaskOutcome::Failed(why));
                    drop(work);
                    let _ = events.send(ExecEvent::Done { task_id });
                    if only_one {
                        wait_closed(&board).await;
                        break;
                    }
                    continue;
                }
            }
        }
        setup.started(&work);
        let began = std::time::Instant::now();
        // The grant's deadline (or, with no launcher to grant, the client's) ends the task
        // `canceled` (docs/reference/formation.md#grants).
        let deadline = match &work.grant {
            Some(g) => g.deadline_ms,
            None => work.limits.and_then(|l| l.deadline_ms),
        }
        .map(|ms| at_deadline(Arc::clone(&board), task_id.clone(), ms));
        // The board's cancellation drives a component's or a model's signal; the bridge dies with
        // the task. A remote task follows the board's cancellation itself.
        let mut bridge = None;
        let mut bridged = || {
            let signal = CancelSignal::new();
            let (fire, watch) = (signal.clone(), work.cancel.clone());
            bridge = Some(actix_rt::spawn(async move {
                watch.cancelled().await;
                fire.cancel();
            }));
            signal
        };
        let (outcome, calls) = match &runner {
            Runner::Component(capsule) => {
                let env = setup.component_env(&work, &board, bridged());
                run_component(Ok(capsule), &work, env, setup.as_ref()).await
            }
            Runner::Deferred(deferred) => {
                let env = setup.component_env(&work, &board, bridged());
                run_component(deferred.capsule(), &work, env, setup.as_ref()).await
            }
            Runner::Model(agent) => {
                // The context's earlier exchanges open the conversation (A2A v1.0 §3.4.2).
                let ctx = setup.model_task(&work, &board, bridged());
                let outcome = agent.run_in_context(&work.context, &work.text, ctx).await;
                if matches!(outcome, AgentOutcome::MaxTurns(_)) {
                    setup.max_turns_reached(&task_id);
                }
                (outcome.into_board(), setup.finished(&task_id))
            }
            Runner::Remote(agent) => {
                let asker = setup.asker(&work, &board);
                let outcome = crate::remote::run_task(agent, &work, &board, asker).await;
                (outcome, setup.finished(&task_id))
            }
        };
        // A callee that was cut off (canceled, unreachable) may have been wound down by the very
        // end of the formation this member is about to hear of: the launcher's descriptors close
        // one by one as it dies, so this member's lifeline may close a moment after the callee's.
        let cut_off = calls
            .iter()
            .any(|c| matches!(c.status, CallStatus::Canceled | CallStatus::Unreachable));
        if setup.formation_has_ended() || (cut_off && setup.formation_ends_within(LIFELINE_GRACE).await) {
            // The formation ended while this task ran, so the wind-down decides how it ends
            // (docs/reference/formation.md#how-a-member-ends: canceled), whatever the run came to:
            // a run that failed because a callee was wound down by the same end must not get there
            // first.
            let teardown = Timing::get().member_teardown;
            let _ = tokio::time::timeout(teardown, work.cancel.cancelled()).await;
        }
        if let Some(bridge) = bridge {
            bridge.abort();
        }
        if let Some(deadline) = deadline {
            deadline.abort();
        }
        // A member that asked for the task reads what its subtree spent with the outcome.
        let wall_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
        if let Some(cost) = setup.cost(&task_id, wall_ms)
            && work.owner.as_deref().is_some_and(|o| o.starts_with("member:"))
        {
            board.set_cost(&task_id, cost);
        }
        board.finish(&task_id, outcome);
        drop(work);
        let _ = events.send(ExecEvent::Done { task_id });
        if only_one {
            wait_closed(&board).await;
            break;
        }
    }
    let _ = events.send(ExecEvent::Gone);
}

/// Cancels task `task_id` on `board` at `deadline_ms` (Unix ms) with E-GRT-002, unless aborted
/// first; a deadline already past cancels it at once.
fn at_deadline(board: Arc<Board>, task_id: String, deadline_ms: u64) -> actix_rt::task::JoinHandle<()> {
    actix_rt::spawn(async move {
        let wait = deadline_ms.saturating_sub(crate::timing::unix_ms());
        actix_rt::time::sleep(Duration::from_millis(wait)).await;
        board.cancel(&task_id, &crate::grant::deadline_reason(deadline_ms));
    })
}

/// The grant a task's calls are narrowed from: the one it came with, else a root whose origin
/// is who gave it (docs/reference/formation.md#grants).
pub fn parent_of(work: &Work) -> crate::wire::authority_line::Parent {
    use crate::wire::authority_line::Parent;
    match &work.grant {
        Some(g) => Parent::Grant(g.id.clone()),
        None => Parent::Root(root_origin(work)),
    }
}

/// Who started a task that came with no grant: `--task`, the operator, a declared client
/// credential; a member's (or a public door's) is unverified.
fn root_origin(work: &Work) -> crate::grant::Origin {
    use crate::grant::Origin;
    match (work.origin, work.owner.as_deref()) {
        (crate::tasks::Origin::Local, _) => Origin::Task,
        (_, Some("operator")) => Origin::Operator,
        (_, Some(owner)) if !owner.starts_with("member:") => {
            Origin::parse(&format!("client:{owner}")).unwrap_or(Origin::Member)
        }
        _ => Origin::Member,
    }
}

/// One task on a component: its run, then its calls' ends (one not awaited ends `abandoned`,
/// and counts as such). A deferred component that cannot be mapped fails the task.
async fn run_component(
    capsule: Result<&Capsule, &str>,
    work: &Work,
    env: TaskEnv,
    setup: &dyn TaskSetup,
) -> (TaskOutcome, Vec<CallOutcome>) {
    let host = match capsule {
        Ok(capsule) => capsule.run(&work.text, env).await,
        Err(why) => capsule::RunOutcome::Failed(format!("the capsule cannot be run: {why}")),
    };
    let ended = setup.finished(&work.task_id);
    (board_outcome(host, work.owner.as_deref(), &ended), ended)
}

/// Completes once the board is closing.
async fn wait_closed(board: &Board) {
    // Subscribe before looking, so a close in between is not missed.
    let mut changes = board.changes();
    while !board.is_closing() {
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// The host's outcome as the board records it. A no-answer is honoured only in a task a member
/// sent (docs/reference/capsules.md#component-capsules), with the task's calls that ended without
/// an answer (`ended`: every call of the task, as it ended) as `noAnswerBelow`; anywhere else it is
/// a failure carrying the reason.
pub fn board_outcome(outcome: capsule::RunOutcome, owner: Option<&str>, ended: &[CallOutcome]) -> TaskOutcome {
    match outcome {
        capsule::RunOutcome::Completed(answer) => TaskOutcome::Completed(answer),
        capsule::RunOutcome::Failed(message) => TaskOutcome::Failed(message),
        capsule::RunOutcome::NoAnswer(reason) if owner.is_some_and(|o| o.starts_with("member:")) => {
            TaskOutcome::NoAnswer {
                reason,
                below: crate::runner::no_answer_below(ended),
            }
        }
        capsule::RunOutcome::NoAnswer(reason) => TaskOutcome::Failed(reason),
        capsule::RunOutcome::Canceled => TaskOutcome::Canceled,
    }
}

/// The member calls of a member with a channel (docs/reference/capsules.md#calls-between-members,
/// docs/reference/capsules.md#calls-by-address): the VirtualPeerRouter fed by the channel's reader
/// thread, and `Calls` when the member may call anyone. Call it on the session's actix system: the
/// router and the calls' HTTP live there.
pub fn member_calls(
    first: &FirstLine,
    intake: Option<Intake>,
    manifest: &Manifest,
    trace: Arc<TraceWriter>,
    console: &Console,
) -> Option<calls::Calls> {
    let notes = console.clone();
    let router = calls::VirtualPeerRouter::new(&first.calls, Timing::get().address_wait)
        .with_notes(move |line| notes.note(line))
        .start();
    if let Some(intake) = intake {
        let r = router.clone();
        if let Err(e) = intake.spawn_reader(move |event| r.do_send(calls::Channel(event))) {
            console.note(&format!(
                "the formation channel cannot be read ({e}); no callee's address will arrive"
            ));
            router.do_send(calls::Channel(channel::ChannelEvent::Closed));
        }
    }
    let callees: Vec<String> = first.callees();
    if callees.is_empty() {
        return None;
    }
    let mut timing = *Timing::get();
    timing.call_bound = calls::call_bound(manifest.lifecycle.delegation_deadline_secs);
    let trace: Arc<dyn calls::CallTrace> = trace;
    Some(calls::Calls::new(
        router,
        callees,
        AllowList::parse(&manifest.network_allow),
        trace,
        &timing,
    ))
}

/// What every task of a session runs with.
pub fn task_setup(
    formation_id: Option<String>,
    first: Option<&FirstLine>,
    manifest: &Manifest,
    calls: Option<calls::Calls>,
    bootstrap_log: &Path,
    journal: Journal,
    lifeline: Option<LifelineProbe>,
) -> Setup {
    let callees = FirstLine::callees_of(first);
    // docs/reference/capsules.md#what-the-host-grants: single spaces, roster order, never set
    // empty.
    let peers_env = crate::address::virtual_peer::peers_env(&callees);
    let output = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(bootstrap_log)
    {
        Ok(f) => OutputSink::writer(f),
        Err(_) => OutputSink::discard(),
    };
    Setup {
        formation_id,
        member_name: first.map(|f| f.member.clone()),
        peers_env,
        allow: AllowList::parse(&manifest.network_allow),
        calls,
        output,
        budget: Timing::get().component_task,
        call_bound: calls::call_bound(manifest.lifecycle.delegation_deadline_secs),
        input_timeout: manifest
            .lifecycle
            .input_timeout_secs
            .map(|s| Duration::from_secs(s).min(crate::timing::MAX_KNOB)),
        journal,
        lifeline,
        authority: None,
        grant_key: None,
    }
}

/// What every task of the session runs with: its [`TaskSetup`].
pub struct Setup {
    formation_id: Option<String>,
    member_name: Option<String>,
    peers_env: Option<String>,
    allow: AllowList,
    calls: Option<calls::Calls>,
    output: OutputSink,
    budget: Duration,
    /// The bound of each member call, named in a model's busy note.
    call_bound: Duration,
    /// `lifecycle.input_timeout_secs`: the capsule may ask, and waits this long for an answer.
    input_timeout: Option<Duration>,
    journal: Journal,
    /// The member's lifeline, when it has one: whether its formation has ended.
    lifeline: Option<LifelineProbe>,
    /// The launcher's authority, which grants a client's task its narrowed root.
    authority: Option<Arc<crate::runner::authority::Authority>>,
    /// This member's grant key, which the launcher's grants for it are opened with.
    grant_key: Option<crate::token::GrantKey>,
}

impl Setup {
    /// Tasks a client sent with limits are granted their root by the launcher's `authority`,
    /// opened with this member's `grant_key`.
    pub fn with_authority(
        mut self,
        authority: Option<Arc<crate::runner::authority::Authority>>,
        grant_key: Option<crate::token::GrantKey>,
    ) -> Setup {
        self.authority = authority;
        self.grant_key = grant_key;
        self
    }
}

impl TaskSetup for Setup {
    fn component_env(&self, work: &Work, board: &Arc<Board>, cancel: CancelSignal) -> TaskEnv {
        let (member_calls, http): (Arc<dyn MemberCalls>, Arc<dyn HttpPolicy>) = match &self.calls {
            Some(c) => c.for_task(&work.task_id, work.trust),
            None => (Arc::new(NoCallees), Arc::new(NetworkPolicy::new(self.allow.clone()))),
        };
        TaskEnv {
            formation_id: self.formation_id.clone(),
            member_name: self.member_name.clone(),
            peers_env: self.peers_env.clone(),
            calls: member_calls,
            http,
            output: self.output.clone(),
            cancel,
            limits: capsule::Limits {
                time_budget: self.budget,
                ..capsule::Limits::default()
            },
            asker: self.asker(work, board),
        }
    }

    fn formation_has_ended(&self) -> bool {
        self.lifeline.as_ref().is_some_and(LifelineProbe::has_closed)
    }

    fn formation_ends_within(&self, grace: Duration) -> crate::runner::BoxFuture<'_, bool> {
        Box::pin(async move {
            match &self.lifeline {
                Some(probe) => probe.closes_within(grace).await,
                None => false,
            }
        })
    }

    fn root_grant(&self, work: &Work, limits: Limits) -> Result<Option<Arc<crate::grant::Grant>>, String> {
        use crate::runner::authority::Undelegated;
        let (Some(authority), Some(key), Some(member)) = (&self.authority, &self.grant_key, &self.member_name) else {
            return Ok(None);
        };
        let refused = |why: String| {
            crate::diag::Diagnostic::new(
                crate::diag::E_GRT_003,
                format!("the launcher refused the task's grant under the limits its client sent: {why}"),
            )
            .to_string()
        };
        let parent = crate::wire::authority_line::Parent::Root(root_origin(work));
        match authority.delegate(parent, &work.task_id, member, limits.deadline_ms, limits.budget) {
            Ok(wire) => crate::grant::Grant::open(key, &wire)
                .map(|g| Some(Arc::new(g)))
                .map_err(|why| refused(why.to_string())),
            Err(Undelegated::Unreachable(why)) => {
                tracing::debug!("no root grant for task {}: {why}", work.task_id);
                Ok(None)
            }
            Err(Undelegated::Refused(why)) => Err(refused(why.to_string())),
        }
    }

    fn started(&self, work: &Work) {
        // First, so the grants prepared for the task's calls are asked for while the rest of
        // its start (the journal's records, the capsule's set-up) runs.
        if let Some(c) = &self.calls {
            c.set_parent(&work.task_id, parent_of(work));
        }
        self.journal.task_start(&work.task_id);
        self.journal.task_text(&work.task_id, &work.text);
        // A launched member's (its first line names it); a hand-started one records none.
        if self.member_name.is_some() {
            let root = work.grant.is_none().then(|| root_origin(work));
            self.journal
                .task_grant(&work.task_id, work.grant.as_deref(), root.as_ref());
        }
        crate::otel::task_started(&work.task_id);
    }

    fn cost(&self, task_id: &str, wall_ms: u64) -> Option<crate::cost::Cost> {
        Some(self.journal.task_cost(task_id, wall_ms))
    }

    fn finished(&self, task_id: &str) -> Vec<CallOutcome> {
        match &self.calls {
            Some(c) => c.finish_task(task_id),
            None => Vec::new(),
        }
    }

    fn model_task(&self, work: &Work, board: &Arc<Board>, cancel: CancelSignal) -> TaskCtx {
        let from_member = work.owner.as_deref().is_some_and(|o| o.starts_with("member:"));
        let calls: Arc<dyn AgentCalls> = match &self.calls {
            Some(c) => Arc::new(model::SessionCalls::new(
                c.task(&work.task_id, work.trust),
                self.call_bound,
                from_member,
            )),
            None => Arc::new(model::NoCalls),
        };
        TaskCtx {
            task_id: work.task_id.clone(),
            from_member,
            calls,
            cancel,
            events: Arc::new(ModelEvents {
                task_id: work.task_id.clone(),
                board: Arc::clone(board),
                journal: self.journal.clone(),
            }),
            budget_grant: work.grant.as_ref().filter(|g| g.budget.is_some()).map(|g| g.id.clone()),
            asker: self.asker(work, board),
        }
    }

    fn asker(&self, work: &Work, board: &Arc<Board>) -> Option<crate::tasks::Asker> {
        self.input_timeout
            .map(|t| crate::tasks::Asker::new(Arc::clone(board), &work.task_id, self.member_name.clone(), t))
    }

    fn max_turns_reached(&self, task_id: &str) {
        self.journal.mark_max_turns(task_id);
    }
}

/// A model task's progress: WORKING notes and streamed answer text on the board,
/// `task_continued` in the trace.
struct ModelEvents {
    task_id: String,
    board: Arc<Board>,
    journal: Journal,
}

impl TaskEvents for ModelEvents {
    fn working(&self, note: &str) {
        self.board.set_working(&self.task_id, Some(note));
    }

    fn record(&self, event_type: &str, fields: &[(&str, serde_json::Value)]) {
        self.journal.write(event_type, None, fields);
    }

    fn answer_text(&self, turn: u32, delta: &str) {
        self.board.stream_text(&self.task_id, turn, delta);
    }

    fn model_turn(&self, turn: &crate::trace::turn::ModelTurn) {
        self.journal.model_turn(turn);
        crate::otel::model_turn(turn, std::time::SystemTime::now());
    }

    fn tool_call(&self, call: &crate::trace::tool_call::ToolCallRecord) {
        self.journal
            .write(crate::trace::tool_call::RECORD, None, &call.fields());
        crate::otel::tool_call(call, std::time::SystemTime::now());
    }

    fn step_text(&self, step: &str, key: &str, part: &str, text: &str) {
        self.journal.step_text(&self.task_id, step, key, part, text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule::RunOutcome as Host;

    #[test]
    fn outcomes_map_onto_the_board() {
        let table = [
            (Host::Completed("a".into()), None, TaskOutcome::Completed("a".into())),
            (
                Host::Failed("f".into()),
                Some("operator"),
                TaskOutcome::Failed("f".into()),
            ),
            (
                Host::NoAnswer("r".into()),
                Some("operator"),
                TaskOutcome::Failed("r".into()),
            ),
            (Host::NoAnswer("r".into()), None, TaskOutcome::Failed("r".into())),
            (
                Host::NoAnswer("r".into()),
                Some("member:lead"),
                TaskOutcome::NoAnswer {
                    reason: "r".into(),
                    below: Vec::new(),
                },
            ),
            (Host::Canceled, None, TaskOutcome::Canceled),
        ];
        for (host, owner, want) in table {
            assert_eq!(board_outcome(host.clone(), owner, &[]), want, "{host:?} {owner:?}");
        }
    }

    #[test]
    fn a_no_answer_names_the_calls_that_ended_without_one() {
        use crate::runner::CallStatus;
        use crate::tasks::NoAnswerBelow;
        let call = |member: &str, status: CallStatus| CallOutcome {
            call_id: format!("mcl_{member}"),
            member: member.into(),
            status,
            output: String::new(),
            truncated: false,
            asked_by: Vec::new(),
        };
        let ended = [
            call("coder", CallStatus::Failed),
            call("tester", CallStatus::Completed),
            call("reviewer", CallStatus::Abandoned),
        ];
        let below = |m: &str, s: &str| NoAnswerBelow {
            member: m.into(),
            status: s.into(),
        };
        assert_eq!(
            board_outcome(Host::NoAnswer("r".into()), Some("member:lead"), &ended),
            TaskOutcome::NoAnswer {
                reason: "r".into(),
                below: vec![below("coder", "failed"), below("reviewer", "abandoned")],
            }
        );
        assert_eq!(
            board_outcome(Host::NoAnswer("r".into()), Some("operator"), &ended),
            TaskOutcome::Failed("r".into()),
            "no metadata where a no-answer is not honoured"
        );
    }
}
