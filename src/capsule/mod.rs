//! The capsule host: WebAssembly components run by wasmtime
//! (docs/reference/capsules.md#component-capsules).
//!
//! One [`CapsuleEngine`] per process compiles components and ticks the epoch that interrupts
//! them. [`Capsule::load`] compiles a component once and pre-instantiates it against the world
//! in `wit/capsule.wit` plus WASI preview 2 and `wasi:http/outgoing-handler`;
//! [`Capsule::load_cached`] does the same through the user's [`CompiledCache`], so a component
//! is compiled once per engine and runtime version and memory-mapped afterwards;
//! [`Capsule::run`] then runs one task in a fresh store and instance, under a [`TaskEnv`]: the
//! member's identity, the only environment variable it sees, its member calls, its outgoing-HTTP
//! policy, where its output goes, a cancellation signal and limits.
//!
//! ```ignore
//! let engine = CapsuleEngine::new()?;
//! let capsule = Capsule::load(&engine, &wasm_bytes)?;
//! match capsule.run("the task", TaskEnv::default()).await {
//!     RunOutcome::Completed(answer) => …,
//!     RunOutcome::Failed(message) | RunOutcome::NoAnswer(message) => …,
//!     RunOutcome::Canceled => …,
//! }
//! ```

mod bindings;
mod compiled;
mod engine;
mod host_state;
mod http;
mod limiter;
mod output;
mod tool;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use self::compiled::{CompiledCache, Handed, Source, component_unreadable};
pub use self::engine::{Capsule, CapsuleEngine, Deferred};
pub use self::http::{HttpDecision, HttpPolicy, NetworkPolicy, OutgoingTarget, PeerResolver, Route, RouteHeader};
pub use self::output::{MemoryOutput, OutputSink};
pub use self::tool::{ToolDescription, ToolGrant, ToolLimits, ToolRun, WasmTool};
pub use mur_core::address::allow::{AllowList, AllowRule};

/// A boxed, sendable future: what the host's trait objects return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The component answered.
    Completed(String),
    /// The component returned an error, trapped, ran out of time or memory, or could not start.
    Failed(String),
    /// The component chose to give no answer, for this reason. Honour it only in a task a
    /// member sent (docs/reference/capsules.md#model-capsules); elsewhere report it as a failure.
    NoAnswer(String),
    /// The task's [`CancelSignal`] fired before it ended.
    Canceled,
}

/// Resource bounds of one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Total linear memory the component's instances may hold, in bytes.
    pub memory_bytes: u64,
    /// Wall-clock time from the start of the task, instantiation and member calls included,
    /// waits for the caller's answer to a question not (docs/reference/door.md#asking).
    pub time_budget: Duration,
    /// Bytes of stdout plus stderr kept per task; the rest is dropped after a marker line.
    pub output_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 256 << 20,
            time_budget: Duration::from_secs(600),
            output_bytes: 1 << 20,
        }
    }
}

/// Cancels a running task: cheap to clone, callable from any thread, sticky once fired.
#[derive(Clone, Default)]
pub struct CancelSignal(Arc<CancelInner>);

#[derive(Default)]
struct CancelInner {
    fired: AtomicBool,
    notify: tokio::sync::Notify,
}

impl std::fmt::Debug for CancelSignal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CancelSignal({})",
            if self.is_canceled() { "fired" } else { "armed" }
        )
    }
}

impl CancelSignal {
    pub fn new() -> CancelSignal {
        CancelSignal::default()
    }

    /// Fires the signal; a task running under it ends `Canceled` promptly (≈ one epoch tick
    /// while the component computes, at once while it waits on the host).
    pub fn cancel(&self) {
        self.0.fired.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_canceled(&self) -> bool {
        self.0.fired.load(Ordering::SeqCst)
    }

    /// Resolves once the signal has fired.
    pub async fn canceled(&self) {
        loop {
            let notified = self.0.notify.notified();
            let mut notified = std::pin::pin!(notified);
            // Register before checking the flag, so a `cancel` in between is not missed.
            notified.as_mut().enable();
            if self.is_canceled() {
                return;
            }
            notified.await;
        }
    }
}

pub use crate::task::CallStatus;

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
/// implemented by the session. Calls still outstanding when [`Capsule::run`] returns are the
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

/// Everything one task runs with besides its text.
#[derive(Clone)]
pub struct TaskEnv {
    /// `identity.formation-id`.
    pub formation_id: Option<String>,
    /// `identity.member-name`.
    pub member_name: Option<String>,
    /// The value of `MURMUR_FORMATION_PEERS`: the only environment variable the component sees,
    /// and only when `Some` (docs/reference/capsules.md#what-the-host-grants: never set empty).
    pub peers_env: Option<String>,
    pub calls: Arc<dyn MemberCalls>,
    pub http: Arc<dyn HttpPolicy>,
    /// Where stdout and stderr go.
    pub output: OutputSink,
    pub cancel: CancelSignal,
    pub limits: Limits,
    /// How the task asks its caller (`ask.request-input`); `None` when the capsule may not.
    pub asker: Option<crate::tasks::Asker>,
}

impl Default for TaskEnv {
    /// No identity, no peers, no callees, no network, output discarded, default limits.
    fn default() -> Self {
        TaskEnv {
            formation_id: None,
            member_name: None,
            peers_env: None,
            calls: Arc::new(NoCallees),
            http: Arc::new(NetworkPolicy::deny_all()),
            output: OutputSink::discard(),
            cancel: CancelSignal::new(),
            limits: Limits::default(),
            asker: None,
        }
    }
}

impl std::fmt::Debug for TaskEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskEnv")
            .field("formation_id", &self.formation_id)
            .field("member_name", &self.member_name)
            .field("peers_env", &self.peers_env)
            .field("output", &self.output)
            .field("cancel", &self.cancel)
            .field("limits", &self.limits)
            .field("asker", &self.asker)
            .finish_non_exhaustive()
    }
}
