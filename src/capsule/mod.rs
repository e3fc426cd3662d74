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
mod interrupt;
mod limiter;
mod output;
mod tool;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

pub use self::compiled::{CompiledCache, Handed, Source, component_unreadable};
pub use self::engine::{Capsule, CapsuleEngine, Deferred};
pub use self::output::{MemoryOutput, OutputSink};
pub use self::tool::{ToolDescription, ToolGrant, ToolLimits, ToolRun, WasmTool};
use crate::runner::{CancelSignal, HttpPolicy, MemberCalls, NetworkPolicy, NoCallees};

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
    /// The task's [`CancelSignal`](crate::runner::CancelSignal) fired before it ended.
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
            memory_bytes: crate::limits::COMPONENT_MEMORY_BYTES,
            time_budget: Duration::from_secs(600),
            output_bytes: 1 << 20,
        }
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
