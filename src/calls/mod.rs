//! Members calling members (docs/reference/capsules.md#calls-between-members,
//! docs/reference/capsules.md#calls-by-address, docs/reference/capsules.md#component-capsules): the
//! VirtualPeerRouter, `call-member` dispatch and its watcher, and the wasi:http glue for virtual
//! peer addresses.
//!
//! - `router` — [`VirtualPeerRouter`], the actix actor holding the callees' tokens and door URLs
//!   (fed by the formation channel) and answering [`Resolve`].
//! - `dispatch` — [`TaskCalls`], one task's calls: a runner's [`MemberCalls`] (`crate::runner`).
//! - `watcher` — one call on the wire: send, busy re-offer, SubscribeToTask then GetTask.
//! - `client` — the A2A JSON-RPC client over awc. The bodies and replies, and the event-stream
//!   framing of SubscribeToTask, are pure and the core's (`wire`, `mur_core::wire::calls`).
//! - `policy` — the host's [`PeerResolver`] backed by the router, for `wasi:http`.
//! - `output` — redaction, the 64 KiB cap, the fenced continuation text, tool-result text.
//! - this module — [`Calls`], the session's calls, and [`Dispatched`], what `dispatch` reports
//!   and `output` renders (kept here so neither imports the other).
//!
//! # Wiring (the session runtime)
//!
//! ```ignore
//! // Inside the session's actix system, once the channel's first line is read:
//! let router = VirtualPeerRouter::new(&first.calls, timing.address_wait)
//!     .with_notes(move |line| console.note(line))
//!     .start();
//! let r = router.clone();
//! intake.spawn_reader(move |event| r.do_send(Channel(event)))?; // ends with Closed
//!
//! let mut timing = *Timing::get();
//! timing.call_bound = calls::call_bound(manifest.lifecycle.delegation_deadline_secs);
//! let calls = Calls::new(router, callees, AllowList::parse(&manifest.network_allow),
//!                        Arc::new(trace_writer), &timing);
//!
//! // Per task of a component (the executor's `component_env`):
//! let (member_calls, http) = calls.for_task(&work.task_id, work.trust);
//! let env = TaskEnv { calls: member_calls, http, peers_env, .. };
//! let outcome = capsule.run(&work.text, env).await;
//! calls.finish_task(&work.task_id); // unawaited calls end `abandoned`, their callees cancelled
//!
//! // Wind-down, after live tasks were cancelled:
//! calls.finish_all();
//! ```
//!
//! A session whose member may call nobody needs none of this: keep `NoCallees` and a plain
//! `NetworkPolicy` (which refuses every `*.formation.invalid` address).

mod book;
mod client;
mod dispatch;
mod output;
mod policy;
mod prepared;
mod router;
mod watcher;

pub use book::{cancels_sent, formation_over};
// The bodies and replies of a call are pure, and the core's.
use mur_core::wire::calls as wire;

#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use actix::Addr;
use serde_json::Value;

pub use client::PeerRoute;
pub use dispatch::TaskCalls;
pub use output::{
    ANSWER_CAP, CUT_MARKER, ToolResult, cap, continuation_message, fence, neutralise, redact, tool_result, virtual_url,
};
pub use policy::{PeerRoutes, task_policy};
pub use router::{Channel, Denial, Resolution, Resolve, VirtualPeerRouter, resolve};

use crate::runner::authority::{Authority, Undelegated};
use crate::runner::{AllowList, CallOutcome, CallStatus, HttpPolicy, MemberCalls};
use crate::tasks::Trust;
use crate::timing::Timing;
use crate::trace::TraceWriter;

/// How a dispatch went, as the tool result reports it
/// (docs/reference/capsules.md#calls-between-members). Here, not in `dispatch`, because `output`
/// renders it and the two must not import each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dispatched {
    pub call_id: String,
    pub member: String,
    pub kind: DispatchKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DispatchKind {
    /// The callee's door holds the task.
    Started { member_task_id: String },
    /// The callee was busy; the runtime keeps offering it the task.
    Busy,
    /// The call ended at once (HTTP or JSON-RPC error, refusal, routing refusal, transport
    /// error); the output is already redacted and capped.
    Ended { status: CallStatus, output: String },
}

/// The text a busy callee's call carries (docs/reference/capsules.md#calls-between-members busy
/// row).
fn busy_text(member: &str) -> String {
    format!("{member} is busy with other work and did not take the task")
}

/// Where call records go: `member_call_start`, `member_call_busy`, `member_call`
/// (docs/reference/formation.md#trace-records). Fields come in the order that section lists
/// them; values never hold a token or a real door URL.
pub trait CallTrace: Send + Sync {
    /// Appends one record; a failed write is the sink's to report (it must not fail a call).
    fn record(&self, event_type: &str, fields: &[(&str, Value)]);
}

impl CallTrace for TraceWriter {
    fn record(&self, event_type: &str, fields: &[(&str, Value)]) {
        // Losing a trace line must not fail a member call.
        let _ = self.write(event_type, None, fields);
    }
}

/// What every task's calls share.
pub(crate) struct Shared {
    pub router: Addr<VirtualPeerRouter>,
    /// The callees, in roster order.
    pub callees: Vec<String>,
    pub allow: AllowList,
    pub trace: Arc<dyn CallTrace>,
    pub timing: Timing,
    /// The actix arbiter the calls' HTTP runs on (awc is not `Send`).
    pub arbiter: Option<actix_rt::ArbiterHandle>,
    /// The launcher's authority, which grants each call (docs/reference/formation.md#grants);
    /// `None` outside a launched formation: calls then carry no grant.
    pub authority: Option<Arc<Authority>>,
}

/// The grant a task's calls are narrowed from: the one it runs under, or a root for a task that
/// came with none.
pub type Parent = crate::wire::authority_line::Parent;

impl Shared {
    /// The grant of one call of task `task_id` to `callee` (`Ok(None)` without an authority, or
    /// when the launcher cannot be reached: the call then carries none, as a reference member's
    /// does), or the refusal's text: the call is not made. A call with no limits of its own
    /// takes a grant `prepared` for its callee when there is one.
    pub(crate) fn grant_for(
        &self,
        parent: &Parent,
        task_id: &str,
        callee: &str,
        limits: crate::runner::CallLimits,
        prepared: Option<&prepared::TaskGrants>,
    ) -> Result<Option<String>, String> {
        let Some(authority) = &self.authority else {
            return Ok(None);
        };
        if limits == crate::runner::CallLimits::default()
            && let Some(grant) = prepared.and_then(|p| p.take(callee))
        {
            return Ok(Some(grant));
        }
        match authority.delegate(parent.clone(), task_id, callee, limits.deadline_ms, limits.budget) {
            Ok(grant) => Ok(Some(grant)),
            Err(Undelegated::Unreachable(why)) => {
                tracing::debug!("no grant for the call to {callee}: {why}");
                Ok(None)
            }
            Err(Undelegated::Refused(why)) => Err(crate::diag::Diagnostic::new(
                crate::diag::E_GRT_003,
                format!("the launcher refused the grant of this call to {callee}: {why}"),
            )
            .to_string()),
        }
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("callees", &self.callees)
            .field("timing", &self.timing)
            .finish_non_exhaustive()
    }
}

/// A running task's grant and the grants prepared for its calls.
type Started = (Parent, Option<Arc<prepared::TaskGrants>>);

/// The member calls of a session: one per process, cheap to clone.
#[derive(Debug, Clone)]
pub struct Calls {
    shared: Arc<Shared>,
    tasks: Arc<Mutex<HashMap<String, TaskCalls>>>,
    /// Each running task's grant, set by the executor before its calls are made, and the grants
    /// prepared for its calls.
    parents: Arc<Mutex<HashMap<String, Started>>>,
}

impl Calls {
    /// The calls of a member that may call `callees` (roster order) through `router`, reaching
    /// doors only where `allow` (`capabilities.network.allow`) lets it. `timing` supplies the
    /// call bound (`call_bound`, see [`call_bound`]), the busy schedule, the poll interval and
    /// the request timeouts.
    ///
    /// Call it on the actix system the router runs on: the calls' HTTP runs on the current
    /// arbiter. Outside one, every call ends `failed` at dispatch.
    pub fn new(
        router: Addr<VirtualPeerRouter>,
        callees: Vec<String>,
        allow: AllowList,
        trace: Arc<dyn CallTrace>,
        timing: &Timing,
    ) -> Calls {
        Calls {
            shared: Arc::new(Shared {
                router,
                callees,
                allow,
                trace,
                timing: *timing,
                arbiter: actix_rt::Arbiter::try_current(),
                authority: None,
            }),
            tasks: Arc::new(Mutex::new(HashMap::new())),
            parents: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Calls granted by the launcher's `authority` (docs/reference/formation.md#grants). Call it
    /// before any task's calls are made.
    pub fn with_authority(mut self, authority: Option<Arc<Authority>>) -> Calls {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.authority = authority;
        }
        self
    }

    /// The grant task `task_id`'s calls are narrowed from; set before the task runs. A member
    /// with callees starts asking for its calls' grants now (`prepared`).
    pub fn set_parent(&self, task_id: &str, parent: Parent) {
        let prepared = match &self.shared.authority {
            Some(a) if !self.shared.callees.is_empty() => Some(prepared::TaskGrants::start(
                a,
                self.shared.arbiter.clone(),
                task_id,
                parent.clone(),
                &self.shared.callees,
            )),
            _ => None,
        };
        let old = crate::sync::lock(&self.parents).insert(task_id.to_string(), (parent, prepared));
        if let Some((_, Some(old))) = old {
            old.end();
        }
    }

    fn parent(&self, task_id: &str) -> Started {
        crate::sync::lock(&self.parents)
            .get(task_id)
            .cloned()
            .unwrap_or((Parent::Root(crate::grant::Origin::Member), None))
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<String, TaskCalls>> {
        crate::sync::lock(&self.tasks)
    }

    /// The calls of task `task_id`, made on first use; `trust` is the task's trust class, sent
    /// as `x-murmur-task-trust` on its calls and its virtual-address requests.
    pub fn task(&self, task_id: &str, trust: Trust) -> TaskCalls {
        self.tasks()
            .entry(task_id.to_string())
            .or_insert_with(|| {
                let (parent, prepared) = self.parent(task_id);
                TaskCalls::new(task_id, trust, parent, prepared, Arc::clone(&self.shared))
            })
            .clone()
    }

    /// What a task's `TaskEnv` needs: its member calls and its outgoing-HTTP policy.
    pub fn for_task(&self, task_id: &str, trust: Trust) -> (Arc<dyn MemberCalls>, Arc<dyn HttpPolicy>) {
        let calls = self.task(task_id, trust);
        let granting = self
            .shared
            .authority
            .clone()
            .map(|a| (a, calls.inner.parent.clone(), calls.inner.prepared.clone()));
        let calls: Arc<dyn MemberCalls> = Arc::new(calls);
        let http: Arc<dyn HttpPolicy> = Arc::new(policy::granted_task_policy(
            &self.shared.allow,
            &self.shared.router,
            trust,
            task_id,
            granting,
        ));
        (calls, http)
    }

    /// The task ended: every call without an outcome ends `abandoned` and its callee's task is
    /// cancelled (recursively, through the callee's own calls), every call not handed over is
    /// traced with `delivered: false`, and no call may
    /// start under this task any more. Idempotent. Returns how each of the task's calls ended,
    /// in start order; empty once the task is finished.
    pub fn finish_task(&self, task_id: &str) -> Vec<CallOutcome> {
        if let Some((_, Some(prepared))) = crate::sync::lock(&self.parents).remove(task_id) {
            prepared.end();
        }
        let task = self.tasks().remove(task_id);
        task.map(|t| t.finish()).unwrap_or_default()
    }

    /// [`Calls::finish_task`] for every task (wind-down).
    pub fn finish_all(&self) {
        for (_, (_, prepared)) in crate::sync::lock(&self.parents).drain() {
            if let Some(p) = prepared {
                p.end();
            }
        }
        let tasks: Vec<TaskCalls> = self.tasks().drain().map(|(_, t)| t).collect();
        for t in tasks {
            t.finish();
        }
    }
}

/// The bound of each call (docs/reference/capsules.md#calls-between-members):
/// `MURMUR_DELEGATION_TIMEOUT_SECS` when it is a positive integer, else the manifest's
/// `lifecycle.delegation_deadline_secs`.
pub fn call_bound(manifest_secs: u64) -> Duration {
    call_bound_from(
        manifest_secs,
        std::env::var("MURMUR_DELEGATION_TIMEOUT_SECS").ok().as_deref(),
    )
}

/// [`call_bound`] with the variable's value given.
/// Both are capped at [`crate::timing::MAX_KNOB`], so a call's deadline (its start plus the
/// bound) cannot overflow, whatever a manifest or the environment says.
pub fn call_bound_from(manifest_secs: u64, env: Option<&str>) -> Duration {
    let from_env = env.and_then(|v| v.trim().parse::<u64>().ok()).filter(|&s| s > 0);
    Duration::from_secs(from_env.unwrap_or(manifest_secs)).min(crate::timing::MAX_KNOB)
}
