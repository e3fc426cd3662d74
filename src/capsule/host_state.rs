//! What one task's store holds ([`HostState`]) and the host interfaces the guest's imports reach
//! through it: WASI preview 2 with no preopens, arguments or sockets; `wasi:http` under the task's
//! policy; `call-member` over the task's member calls; `identity`; `ask` over the task's asker.
//! Nothing here outlives the task.

use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::TaskEnv;
use super::bindings;
use super::bindings::murmur::capsule::{ask, call_member, identity};
use super::http::PolicyHooks;
use super::interrupt::{Budget, Stop, Unanswered};
use super::limiter::Limiter;
use crate::runner::{CallOutcome, CallStatus, MemberCalls};

/// The linker every capsule of an engine is pre-instantiated with: WASI, `wasi:http`'s outgoing
/// handler, and the world's own imports.
pub(super) fn host_linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)?;
    bindings::Capsule::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)?;
    Ok(linker)
}

/// What one task's store holds.
pub(super) struct HostState {
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: PolicyHooks,
    table: ResourceTable,
    pub(super) limiter: Limiter,
    calls: Arc<dyn MemberCalls>,
    formation_id: Option<String>,
    member_name: Option<String>,
    asker: Option<crate::tasks::Asker>,
    /// The task's time budget, which stands still while a question waits for its answer.
    budget: Arc<Budget>,
}

impl HostState {
    pub(super) fn new(env: &TaskEnv, budget: Arc<Budget>) -> HostState {
        let output = env.output.for_task(env.limits.output_bytes);
        let mut wasi = WasiCtx::builder();
        // No preopens, no arguments, no sockets; clocks and random are the builder's defaults.
        wasi.stdout(output.clone())
            .stderr(output)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(peers) = &env.peers_env {
            wasi.env("MURMUR_FORMATION_PEERS", peers);
        }
        HostState {
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            hooks: PolicyHooks {
                policy: env.http.clone(),
            },
            table: ResourceTable::new(),
            limiter: Limiter::new(usize::try_from(env.limits.memory_bytes).unwrap_or(usize::MAX)),
            calls: env.calls.clone(),
            formation_id: env.formation_id.clone(),
            member_name: env.member_name.clone(),
            asker: env.asker.clone(),
            budget,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl call_member::Host for HostState {
    async fn start(&mut self, member: String, task: String) -> Result<String, String> {
        self.calls.start(&member, &task).await
    }

    async fn await_all(&mut self) -> Vec<call_member::CallOutcome> {
        self.calls.await_all().await.into_iter().map(wit_outcome).collect()
    }

    async fn await_next(&mut self) -> Option<call_member::CallEvent> {
        let o = self.calls.await_next().await?;
        Some(if o.status == CallStatus::InputRequired {
            call_member::CallEvent::Asks(call_member::Question {
                call_id: o.call_id,
                member: o.member,
                text: o.output,
                asked_by: o.asked_by,
            })
        } else {
            call_member::CallEvent::Ended(wit_outcome(o))
        })
    }

    async fn reply(&mut self, call_id: String, answer: String) -> Result<String, String> {
        self.calls.reply(&call_id, &answer).await
    }
}

fn wit_outcome(o: CallOutcome) -> call_member::CallOutcome {
    call_member::CallOutcome {
        call_id: o.call_id,
        member: o.member,
        status: wit_status(o.status),
        output: o.output,
        truncated: o.truncated,
    }
}

fn wit_status(s: CallStatus) -> call_member::CallStatus {
    use call_member::CallStatus as W;
    match s {
        CallStatus::Completed => W::Completed,
        CallStatus::Failed => W::Failed,
        CallStatus::Canceled => W::Canceled,
        CallStatus::Rejected => W::Rejected,
        CallStatus::TimedOut => W::TimedOut,
        CallStatus::Unreachable => W::Unreachable,
        CallStatus::Abandoned => W::Abandoned,
        CallStatus::NoAnswer => W::NoAnswer,
        // `await-all` turns a question into `failed` before it gets here; the enum of old
        // components has no word for it, and keeps none.
        CallStatus::InputRequired => W::Failed,
    }
}

impl identity::Host for HostState {
    async fn formation_id(&mut self) -> Option<String> {
        self.formation_id.clone()
    }

    async fn member_name(&mut self) -> Option<String> {
        self.member_name.clone()
    }
}

impl ask::Host for HostState {
    /// `Ok(Err)`: nothing was asked, and the guest may go on. A question left unanswered or a
    /// task ended meanwhile stops the guest: the task fails with E-ASK-001, or ends canceled.
    async fn request_input(&mut self, question: String) -> wasmtime::Result<Result<String, String>> {
        let Some(asker) = self.asker.clone() else {
            return Ok(Err(
                "request-input is not available: this capsule's murmur.yaml sets no lifecycle.input_timeout_secs"
                    .to_string(),
            ));
        };
        if let Some(why) = crate::tasks::ask::question_refusal(&question) {
            return Ok(Err(format!("request-input asked nothing: {why}")));
        }
        let _paused = self.budget.pause();
        match asker.ask(&question, &[]).await {
            crate::tasks::Asked::Answered { text, .. } => Ok(Ok(text)),
            crate::tasks::Asked::TimedOut => Err(Unanswered(asker.timeout()).into()),
            crate::tasks::Asked::Ended => Err(Stop::Canceled.into()),
        }
    }
}
