//! Model capsules: the agent loop over a provider's API (docs/reference/capsules.md#model-capsules,
//! docs/reference/capsules.md#calls-between-members).
//!
//! - `wire` — the provider formats, pure: URL, request body, reply, tool schemas, the `[Capsule]`
//!   block, the failure text; each provider's own are its file in mur-core's `wire::provider`.
//! - `client` — one endpoint over awc: credential headers, timeouts, retries ([`Retry`]),
//!   streamed replies read as they come.
//! - `stream` — mur-core's `wire::model_stream`: a streamed (server-sent events) reply, pure:
//!   answer-text deltas out, the whole reply at the end.
//! - `agent` — [`Agent`]: turns, the runtime tools (`call-member`, `end-without-answer`),
//!   waiting for member answers and continuing with them, usage totals.
//! - `calls` — [`SessionCalls`], the agent's view of a task's real member calls.
//!
//! # Wiring (the session runtime, `session::startup::resolve` and `session::executor`)
//!
//! ```ignore
//! // Session start (docs/reference/formation.md#member-intake step 5): refuse what cannot run
//! // (E-RUN-002), read the key once.
//! let config = ModelConfig::resolve(full, version, inference, |v| std::env::var(v).ok())?;
//! let retry = Retry::from_timing(Timing::get(), deadline);
//! let agent = Agent::new(config, Identity { capsule, member, formation }, callees, retry);
//! // session_start: model = agent.model(), max_turns = agent.max_turns(),
//! //                tools_declared = agent.tools_declared(); session_end: agent.totals().snapshot()
//!
//! // Per task, as a local task on the executor's arbiter (awc is not Send):
//! let calls: Arc<dyn AgentCalls> = match &session_calls {
//!     Some(c) => Arc::new(SessionCalls::new(c.task(&work.task_id, work.trust), bound, from_member)),
//!     None => Arc::new(NoCalls),
//! };
//! let ctx = TaskCtx { task_id, from_member, calls, cancel, events, asker };
//! let outcome = agent.run_in_context(&work.context, &work.text, ctx).await;
//! session_calls.finish_task(&work.task_id); // unawaited calls end `abandoned`
//! board.finish(&task_id, outcome.into_board()); // MaxTurns: tell the journal first
//! ```

mod agent;
mod calls;
pub(crate) mod client;
pub use mur_core::wire::model as wire;
use mur_core::wire::model_stream as stream;

#[cfg(test)]
mod tests;

pub mod budget;
pub use agent::{
    Agent, AgentCalls, AgentOutcome, CallReply, LAST_TURN_MIN_TOKENS, NoCalls, NoEvents, TaskCtx, TaskEvents, Totals,
    UsageTotals,
};
pub use calls::SessionCalls;
pub use client::{Retry, RetryNote};

use crate::diag::{self, Diagnostic};
use crate::manifest::{Inference, Provider, Transport};
use crate::secret::Secret;

/// Everything a model capsule's requests need, checked at session start.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub provider: Provider,
    /// The request URL (docs/reference/capsules.md#model-capsules URL rule applied).
    pub url: String,
    pub model: String,
    /// `None`: `inference.api_key` is absent, so no credential header is sent.
    pub api_key: Option<Secret>,
    /// The variable `inference.api_key` names (`${VAR}`), for failures that concern the key.
    pub key_var: Option<String>,
    pub max_tokens: u32,
    /// `inference.reasoning_effort` (Chat Completions providers only).
    pub reasoning_effort: Option<String>,
    pub max_turns: Option<u32>,
    /// `inference.max_session_tokens`: the session's token budget (docs/reference/formation.md#budgets).
    pub max_session_tokens: Option<u64>,
    /// `inference.system_prompt`, without the `[Capsule]` block.
    pub system_prompt: String,
}

impl ModelConfig {
    /// Checks what a model capsule needs to run (docs/reference/manifest.md#keys: `transport:
    /// http`, a provider, a model, an `http(s)` endpoint, the `${VAR}` of `api_key` set) and reads
    /// the key through `env`. Refusals are E-RUN-002 `capsule '<full>@<version>' cannot be run: …`.
    pub fn resolve(
        full: &str,
        version: &str,
        inference: &Inference,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ModelConfig, Diagnostic> {
        let refuse = |why: String, hint: &str| {
            Diagnostic::new(
                diag::E_RUN_002,
                format!("capsule '{full}@{version}' cannot be run: {why}"),
            )
            .with_hint(hint)
        };
        if inference.transport == Transport::Process {
            return Err(refuse(
                "its murmur.yaml sets inference.transport: process, which this runtime does not run".into(),
                "use `inference.transport: http` (the default) in its murmur.yaml, then rebuild and reinstall it",
            ));
        }
        let Some(provider) = inference.provider else {
            return Err(refuse(
                "it is a model capsule, and its murmur.yaml names no inference.provider".into(),
                "set `inference.provider: openai`, `openai-compatible` or `anthropic` in its murmur.yaml, then rebuild and reinstall it",
            ));
        };
        let Some(model) = inference.model.clone().filter(|m| !m.trim().is_empty()) else {
            return Err(refuse(
                "it is a model capsule, and its murmur.yaml names no inference.model".into(),
                "set `inference.model` in its murmur.yaml, then rebuild and reinstall it",
            ));
        };
        if let Some(e) = &inference.endpoint {
            let lower = e.to_ascii_lowercase();
            let rest = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
                return Err(refuse(
                    format!("its inference.endpoint '{e}' is not an http:// or https:// URL"),
                    "set `inference.endpoint` to the provider's base URL, e.g. https://api.openai.com",
                ));
            }
            // Admission refuses this already; checked again because the key rides in every request.
            if !lower.starts_with("https://") && !crate::manifest::endpoint::plain_http_allowed(e) {
                return Err(refuse(
                    format!(
                        "its inference.endpoint '{e}' would send the API key over plain http to a host that is not this machine"
                    ),
                    "use https:// for a provider on another machine; plain http:// is allowed only to 127.0.0.0/8, [::1] and localhost",
                ));
            }
        }
        let api_key = match &inference.api_key_var {
            None => None,
            Some(var) => match env(var).filter(|k| !k.is_empty()) {
                Some(k) => Some(Secret::new(k)),
                None => {
                    return Err(refuse(
                        format!("its inference.api_key is ${{{var}}}, and {var} is not set in this environment"),
                        &format!("export {var}=<your key> before `mur run`, or remove inference.api_key"),
                    ));
                }
            },
        };
        Ok(ModelConfig {
            provider,
            url: wire::url(provider, inference.endpoint.as_deref()),
            model,
            api_key,
            key_var: inference.api_key_var.clone(),
            max_tokens: inference.max_tokens,
            reasoning_effort: inference.reasoning_effort.clone(),
            max_turns: inference.max_turns,
            max_session_tokens: inference.max_session_tokens,
            system_prompt: inference.system_prompt.clone(),
        })
    }
}

/// Who the capsule is, for the `[Capsule]` block (docs/reference/capsules.md#model-capsules,
/// docs/reference/formation.md#trace-records).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The full artifact name, `<scope>/<name>`.
    pub capsule: String,
    /// The member's roster name, in a formation.
    pub member: Option<String>,
    /// The formation id, in a formation.
    pub formation: Option<String>,
}
