//! OpenTelemetry spans over OTLP/HTTP: the formation (launcher), each task and each member call
//! and model turn (members), one trace per formation.
//!
//! Off unless the standard variables ask for it (`crate::trace::otel_env::decide`): then every
//! entry point here is one atomic load and returns, so the door, the executor and the calls pay
//! nothing. On, spans go to the SDK's batch processor: a bounded queue (`OTEL_BSP_MAX_QUEUE_SIZE`,
//! clamped) drained by a thread of its own, so ending a span never waits on the network; a span
//! that finds the queue full is dropped and counted. The first failed export prints one
//! W-OTL-002 warning, later ones nothing; at wind-down [`shutdown`] flushes within a bound and
//! logs how many spans were exported and lost.
//!
//! Context crosses doors as W3C `traceparent`: a member call's requests carry the call span's,
//! the door hands the caller's to the task it creates, whose span becomes the call's child; the
//! entry's tasks (its `--task` task, an operator's) inherit the formation span's through
//! `TRACEPARENT`, set by the launcher. No span holds a prompt, an answer, a token or a header value.

pub mod http;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{Span as _, SpanKind, Status, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter, SpanProcessor,
};

use crate::diag::{self, Diagnostic};
use crate::trace::otel_env::{self, Export};
use crate::trace::tool_call::ToolCallRecord;
use crate::trace::turn::ModelTurn;

/// What the exporter tells its process: a warning for stderr (and the member's log), or a line
/// for the log only.
#[derive(Debug, Clone)]
pub enum Note {
    Warn(Diagnostic),
    Log(String),
}

pub type Notes = Arc<dyn Fn(Note) + Send + Sync>;

/// Who exports: named on every span this process makes.
#[derive(Debug, Clone, Default)]
pub struct Identity {
    pub formation_id: Option<String>,
    pub member: Option<String>,
    pub session_id: Option<String>,
}

/// How long [`shutdown`] may take at most; a member's teardown has 20 s in all.
pub const FLUSH_BOUND: Duration = Duration::from_secs(3);

/// Live tasks (and tasks received, not started) tracked at once, at most: a bound on memory
/// whatever a door is offered.
const MAX_TASKS: usize = 4096;

struct Exporting {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    counts: Arc<Counts>,
    who: Identity,
    /// By task id: the caller's context until the task starts, then the task span's.
    tasks: Mutex<HashMap<String, TaskSlot>>,
    /// By task id: its last `chat` span, the parent of the tool calls that turn asked for.
    chats: Mutex<HashMap<String, Context>>,
    /// `TRACEPARENT` at start: the parent of the `--task` task (the launcher's formation span).
    inherited: Option<Context>,
}

enum TaskSlot {
    Received(Context),
    Running(Context),
}

static STATE: OnceLock<Exporting> = OnceLock::new();

/// Whether this process exports spans.
#[inline]
pub fn enabled() -> bool {
    STATE.get().is_some()
}

/// Sets export up when the environment asks for it; a request that cannot be honoured is one
/// W-OTL-001 warning and no export. Call it once, before any span; later calls do nothing.
pub fn init(who: Identity, notes: Notes) {
    if STATE.get().is_some() {
        return;
    }
    let env = |k: &str| std::env::var(k).ok();
    match otel_env::decide(env) {
        Export::Off => {}
        Export::Refused(why) => notes(Note::Warn(Diagnostic::new(diag::W_OTL_001, why))),
        Export::On => match build(who, notes.clone()) {
            Ok(e) => {
                let _ = STATE.set(e);
            }
            Err(why) => notes(Note::Warn(Diagnostic::new(
                diag::W_OTL_001,
                format!("the OTLP exporter cannot be set up: {why}"),
            ))),
        },
    }
}

fn build(who: Identity, notes: Notes) -> Result<Exporting, String> {
    let client = http::OtlpHttp::new();
    let transport = client.failures();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        // One retry: a collector that does not answer is not waited on for long, and the
        // export thread is the only one that waits.
        .with_retry_policy(opentelemetry_otlp::RetryPolicy::default().with_max_retries(1))
        .build()
        .map_err(|e| e.to_string())?;
    let counts = Arc::new(Counts {
        notes: Some(notes),
        transport,
        ..Counts::default()
    });
    let queue = otel_env::queue_bound(std::env::var("OTEL_BSP_MAX_QUEUE_SIZE").ok().as_deref());
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(queue)
        .with_max_export_batch_size(queue.min(512))
        .build();
    let batch = BatchSpanProcessor::builder(Counting {
        inner: exporter,
        counts: Arc::clone(&counts),
    })
    .with_batch_config(config)
    .build();
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none_or(|v| v.is_empty()) {
        resource = resource.with_service_name("mur");
    }
    // Each member is its own instance of the service, so a trace backend shows the members of a
    // formation apart rather than as one `mur`; an instance id the operator set is kept.
    let set = std::env::var("OTEL_RESOURCE_ATTRIBUTES").unwrap_or_default();
    let operator_set = |key: &str| set.split(',').any(|kv| kv.trim().split('=').next() == Some(key));
    if let Some(s) = who.session_id.as_ref().filter(|_| !operator_set("service.instance.id")) {
        resource = resource.with_attribute(KeyValue::new("service.instance.id", s.clone()));
    }
    if let Some(m) = &who.member {
        resource = resource.with_attribute(KeyValue::new("mur.member", m.clone()));
    }
    if let Some(f) = &who.formation_id {
        resource = resource.with_attribute(KeyValue::new("mur.formation.id", f.clone()));
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Counted {
            inner: batch,
            counts: Arc::clone(&counts),
        })
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("mur");
    let inherited = std::env::var("TRACEPARENT").ok().and_then(|tp| extract(&tp));
    Ok(Exporting {
        provider,
        tracer,
        counts,
        who,
        tasks: Mutex::new(HashMap::new()),
        chats: Mutex::new(HashMap::new()),
        inherited,
    })
}

/// Flushes what is queued (within `bound`) and stops the export thread; logs how many spans went
/// out and how many were lost. Call it once, at the very end.
pub fn shutdown(bound: Duration) {
    let Some(e) = STATE.get() else { return };
    let _ = e.provider.shutdown_with_timeout(bound);
    let c = &e.counts;
    let ended = c.ended.load(Ordering::Relaxed);
    let exported = c.exported.load(Ordering::Relaxed);
    let failed = c.failed.load(Ordering::Relaxed);
    let dropped = ended.saturating_sub(exported + failed);
    c.note(Note::Log(format!(
        "opentelemetry: {ended} span(s) ended, {exported} exported, {failed} lost to failed exports, \
         {dropped} dropped (queue full or not flushed in time)"
    )));
}

/// The span counts and the one warning.
#[derive(Default)]
struct Counts {
    ended: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
    warned: AtomicBool,
    notes: Option<Notes>,
    /// The HTTP client's last failure, more telling than the exporter's error.
    transport: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counts").finish_non_exhaustive()
    }
}

impl Counts {
    fn note(&self, n: Note) {
        if let Some(notes) = &self.notes {
            notes(n);
        }
    }

    fn failed(&self, n: u64, why: &str) {
        self.failed.fetch_add(n, Ordering::Relaxed);
        let transport = crate::sync::lock(&self.transport).take();
        let why = transport.as_deref().unwrap_or(why);
        if !self.warned.swap(true, Ordering::Relaxed) {
            self.note(Note::Warn(Diagnostic::new(
                diag::W_OTL_002,
                format!(
                    "spans cannot be exported to the OpenTelemetry collector ({why}); they are dropped, \
                     and later failures are not reported again"
                ),
            )));
        }
    }
}

/// The exporter, counting what it delivered and what it could not.
#[derive(Debug)]
struct Counting {
    inner: opentelemetry_otlp::SpanExporter,
    counts: Arc<Counts>,
}

impl SpanExporter for Counting {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let r = self.inner.export(batch).await;
        match &r {
            Ok(()) => {
                self.counts.exported.fetch_add(n, Ordering::Relaxed);
            }
            Err(e) => self.counts.failed(n, &e.to_string()),
        }
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The batch processor, counting the spans handed to it (those it drops are the difference).
#[derive(Debug)]
struct Counted {
    inner: BatchSpanProcessor,
    counts: Arc<Counts>,
}

impl SpanProcessor for Counted {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.counts.ended.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The context a W3C `traceparent` names; `None` when it is not a valid one.
fn extract(traceparent: &str) -> Option<Context> {
    if !otel_env::well_formed_traceparent(traceparent) {
        return None;
    }
    let carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

/// `cx`'s span as a W3C `traceparent`.
fn inject(cx: &Context) -> String {
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(cx, &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

impl Exporting {
    fn common(&self, attrs: &mut Vec<KeyValue>) {
        if let Some(f) = &self.who.formation_id {
            attrs.push(KeyValue::new("mur.formation.id", f.clone()));
        }
        if let Some(m) = &self.who.member {
            attrs.push(KeyValue::new("mur.member", m.clone()));
        }
        if let Some(s) = &self.who.session_id {
            attrs.push(KeyValue::new("mur.session.id", s.clone()));
        }
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskSlot>> {
        crate::sync::lock(&self.tasks)
    }

    fn task_context(&self, task_id: &str) -> Option<Context> {
        match self.tasks().get(task_id) {
            Some(TaskSlot::Running(cx)) => Some(cx.clone()),
            _ => None,
        }
    }
}

/// A span whose context goes out as `traceparent`: the formation's, or a member call's.
pub struct Outgoing {
    cx: Context,
    traceparent: String,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("traceparent", &self.traceparent)
            .finish()
    }
}

impl Outgoing {
    /// The W3C `traceparent` naming this span.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// Ends the span with `status` (`ok`, `failed`, a call's status, …).
    pub fn end(self, status: &str) {
        self.end_with_cost(status, None);
    }

    /// [`Outgoing::end`] for a member call, with what the callee's subtree spent when its door
    /// said: the tokens as the GenAI conventions name usage, the rest under `mur.subtree.*`.
    pub fn end_with_cost(self, status: &str, cost: Option<&crate::cost::Cost>) {
        let span = self.cx.span();
        if let Some(c) = cost {
            let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            span.set_attribute(KeyValue::new("gen_ai.usage.input_tokens", n(c.input_tokens)));
            span.set_attribute(KeyValue::new("gen_ai.usage.output_tokens", n(c.output_tokens)));
            span.set_attribute(KeyValue::new("mur.subtree.model_turns", n(c.model_turns)));
            span.set_attribute(KeyValue::new("mur.subtree.tool_calls", n(c.tool_calls)));
            span.set_attribute(KeyValue::new("mur.subtree.wall_ms", n(c.wall_ms)));
        }
        span.set_attribute(KeyValue::new("mur.status", status.to_string()));
        if !matches!(status, "ok" | "completed") {
            span.set_status(Status::error(status.to_string()));
        }
        span.end();
    }
}

/// The formation's span (the launcher's), the root of the formation's trace unless the
/// launcher itself was given a `TRACEPARENT`.
pub fn formation_span(formation_id: &str, entry: &str) -> Option<Outgoing> {
    let e = STATE.get()?;
    let parent = e.inherited.clone().unwrap_or_default();
    let mut attrs = vec![
        KeyValue::new("mur.formation.id", formation_id.to_string()),
        KeyValue::new("mur.formation.entry", entry.to_string()),
    ];
    e.common(&mut attrs);
    let span = e
        .tracer
        // A span name stays low in cardinality: the id is an attribute.
        .span_builder("formation")
        .with_kind(SpanKind::Internal)
        .with_attributes(attrs)
        .start_with_context(&e.tracer, &parent);
    let cx = parent.with_span(span);
    let traceparent = inject(&cx);
    Some(Outgoing { cx, traceparent })
}

/// A task arrived, with its caller's `traceparent` when it sent one. A task without one (the
/// `--task` task, an operator's) takes the inherited `TRACEPARENT`: in a formation only the entry
/// has one, the formation span's, so every task of a formation is in its trace.
pub fn task_received(task_id: &str, traceparent: Option<&str>) {
    let Some(e) = STATE.get() else { return };
    let parent = traceparent.and_then(extract).or_else(|| e.inherited.clone());
    if let Some(cx) = parent {
        let mut tasks = e.tasks();
        if tasks.len() < MAX_TASKS {
            tasks.insert(task_id.to_string(), TaskSlot::Received(cx));
        }
    }
}

/// The task started running: its span opens, a child of its caller's context when it had one.
pub fn task_started(task_id: &str) {
    let Some(e) = STATE.get() else { return };
    let mut tasks = e.tasks();
    let parent = match tasks.remove(task_id) {
        Some(TaskSlot::Received(cx)) => Some(cx),
        Some(TaskSlot::Running(cx)) => {
            tasks.insert(task_id.to_string(), TaskSlot::Running(cx));
            return;
        }
        None => None,
    };
    if tasks.len() >= MAX_TASKS {
        return;
    }
    let kind = if parent.is_some() {
        SpanKind::Server
    } else {
        SpanKind::Internal
    };
    let parent = parent.unwrap_or_default();
    let mut attrs = vec![KeyValue::new("mur.task.id", task_id.to_string())];
    e.common(&mut attrs);
    let name = format!("task {}", e.who.member.as_deref().unwrap_or("capsule"));
    let span = e
        .tracer
        .span_builder(name)
        .with_kind(kind)
        .with_attributes(attrs)
        .start_with_context(&e.tracer, &parent);
    tasks.insert(task_id.to_string(), TaskSlot::Running(parent.with_span(span)));
}

/// The task ended with `status` (`ok`, `failed`, `canceled`, …): its span closes. A task that
/// never started leaves nothing behind.
pub fn task_ended(task_id: &str, status: &str) {
    let Some(e) = STATE.get() else { return };
    let slot = e.tasks().remove(task_id);
    crate::sync::lock(&e.chats).remove(task_id);
    if let Some(TaskSlot::Running(cx)) = slot {
        Outgoing {
            cx,
            traceparent: String::new(),
        }
        .end(status);
    }
}

/// The running task asked for input: an `input_requested` event on its span, naming who asked
/// and the question's size (never its text).
pub fn input_requested(task_id: &str, asked_by: &[String], question_bytes: usize) {
    task_event(
        task_id,
        "input_requested",
        vec![
            KeyValue::new("mur.input.asked_by", asked_by.join(" ")),
            KeyValue::new(
                "mur.input.question_bytes",
                i64::try_from(question_bytes).unwrap_or(i64::MAX),
            ),
        ],
    );
}

/// The task's question is over: an `input_received` event on its span, with how (`answered`,
/// `timed_out`, `abandoned`), the wait and the answer's size.
pub fn input_received(task_id: &str, outcome: &str, waited_ms: u64, answer_bytes: Option<usize>) {
    let mut attrs = vec![
        KeyValue::new("mur.input.outcome", outcome.to_string()),
        KeyValue::new("mur.input.waited_ms", i64::try_from(waited_ms).unwrap_or(i64::MAX)),
    ];
    if let Some(n) = answer_bytes {
        attrs.push(KeyValue::new(
            "mur.input.answer_bytes",
            i64::try_from(n).unwrap_or(i64::MAX),
        ));
    }
    task_event(task_id, "input_received", attrs);
}

/// An event on the running task's span; nothing when export is off or the task is not running.
fn task_event(task_id: &str, name: &'static str, attrs: Vec<KeyValue>) {
    let Some(e) = STATE.get() else { return };
    if let Some(cx) = e.task_context(task_id) {
        cx.span().add_event(name, attrs);
    }
}

/// The running task's span as a W3C `traceparent`, for the requests its component sends to a
/// peer's door through a virtual address. `None` when export is off or the task is not running.
pub fn task_traceparent(task_id: &str) -> Option<String> {
    let e = STATE.get()?;
    e.task_context(task_id).map(|cx| inject(&cx))
}

/// A member call's span, a child of its task's; its `traceparent` goes on every request of the
/// call. `None` when export is off.
pub fn call_span(task_id: &str, call_id: &str, member: &str) -> Option<Outgoing> {
    let e = STATE.get()?;
    let parent = e.task_context(task_id).unwrap_or_default();
    let mut attrs = vec![
        KeyValue::new("mur.task.id", task_id.to_string()),
        KeyValue::new("mur.call.id", call_id.to_string()),
        KeyValue::new("mur.callee", member.to_string()),
    ];
    e.common(&mut attrs);
    let span = e
        .tracer
        .span_builder(format!("call {member}"))
        .with_kind(SpanKind::Client)
        .with_attributes(attrs)
        .start_with_context(&e.tracer, &parent);
    let cx = parent.with_span(span);
    let traceparent = inject(&cx);
    Some(Outgoing { cx, traceparent })
}

/// One model turn, ended at `ended`, as a GenAI client span under its task's span.
pub fn model_turn(turn: &ModelTurn, ended: SystemTime) {
    let Some(e) = STATE.get() else { return };
    let parent = e.task_context(&turn.task_id).unwrap_or_default();
    let started = ended
        .checked_sub(Duration::from_millis(turn.duration_ms))
        .unwrap_or(ended);
    let mut attrs = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        // The manifest's spelling is the conventions' well-known value (`openai`, `anthropic`)
        // where one fits; `openai-compatible` is no known provider, so it stays a value of ours.
        KeyValue::new("gen_ai.provider.name", turn.provider.clone()),
        KeyValue::new("gen_ai.request.model", turn.model.clone()),
        KeyValue::new("mur.task.id", turn.task_id.clone()),
        KeyValue::new("mur.turn", i64::from(turn.turn)),
        KeyValue::new("mur.retries", i64::from(turn.retries)),
        KeyValue::new("mur.streamed", turn.streamed),
    ];
    if let Some(m) = &turn.response_model {
        attrs.push(KeyValue::new("gen_ai.response.model", m.clone()));
    }
    if let Some(n) = turn.input_tokens {
        attrs.push(KeyValue::new(
            "gen_ai.usage.input_tokens",
            i64::try_from(n).unwrap_or(i64::MAX),
        ));
    }
    if let Some(n) = turn.output_tokens {
        attrs.push(KeyValue::new(
            "gen_ai.usage.output_tokens",
            i64::try_from(n).unwrap_or(i64::MAX),
        ));
    }
    // The budget's figures (docs/reference/formation.md#budgets), as the `inference` record has them.
    for (key, n) in [
        (
            "mur.budget.reserved",
            turn.budget_reserved.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        ),
        (
            "mur.budget.charged",
            turn.budget_charged.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
        ),
        ("mur.budget.left", turn.budget_left),
    ] {
        if let Some(n) = n {
            attrs.push(KeyValue::new(key, n));
        }
    }
    if let Some(r) = &turn.finish_reason {
        attrs.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(r.clone())].into()),
        ));
    }
    if !turn.ok {
        attrs.push(KeyValue::new("error.type", "inference_failed"));
    }
    e.common(&mut attrs);
    let mut span = e
        .tracer
        .span_builder(turn.span_name())
        .with_kind(SpanKind::Client)
        .with_start_time(started)
        .with_attributes(attrs)
        .start_with_context(&e.tracer, &parent);
    if !turn.ok {
        span.set_status(Status::error("the provider request failed"));
    }
    let chat = parent.with_remote_span_context(span.span_context().clone());
    span.end_with_timestamp(ended);
    let mut chats = crate::sync::lock(&e.chats);
    if chats.len() < MAX_TASKS || chats.contains_key(&turn.task_id) {
        chats.insert(turn.task_id.clone(), chat);
    }
}

/// One tool call, ended at `ended`, as a GenAI `execute_tool` span under the `chat` span of the
/// turn that asked for it (its task's span should there be none).
pub fn tool_call(call: &ToolCallRecord, ended: SystemTime) {
    let Some(e) = STATE.get() else { return };
    let parent = crate::sync::lock(&e.chats)
        .get(&call.task_id)
        .cloned()
        .or_else(|| e.task_context(&call.task_id))
        .unwrap_or_default();
    let started = ended
        .checked_sub(Duration::from_millis(call.duration_ms))
        .unwrap_or(ended);
    let mut attrs = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", call.tool.clone()),
        KeyValue::new("gen_ai.tool.call.id", call.call_id.clone()),
        KeyValue::new(
            "gen_ai.tool.type",
            if call.kind == "mcp" { "extension" } else { "function" },
        ),
        KeyValue::new("mur.task.id", call.task_id.clone()),
        KeyValue::new("mur.tool.kind", call.kind.clone()),
        KeyValue::new("mur.tool.status", call.status.clone()),
        KeyValue::new(
            "mur.tool.input_bytes",
            i64::try_from(call.input_bytes).unwrap_or(i64::MAX),
        ),
        KeyValue::new(
            "mur.tool.output_bytes",
            i64::try_from(call.output_bytes).unwrap_or(i64::MAX),
        ),
    ];
    if let Some(s) = &call.server {
        attrs.push(KeyValue::new("server.address", s.clone()));
    }
    let ok = call.status == "ok";
    if !ok {
        attrs.push(KeyValue::new("error.type", call.status.clone()));
    }
    e.common(&mut attrs);
    let mut span = e
        .tracer
        .span_builder(call.span_name())
        .with_kind(SpanKind::Internal)
        .with_start_time(started)
        .with_attributes(attrs)
        .start_with_context(&e.tracer, &parent);
    if !ok {
        span.set_status(Status::error("the tool call did not succeed"));
    }
    span.end_with_timestamp(ended);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_read_and_written_as_w3c_says() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let cases = [
            (good, true),
            ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00", true),
            // All-zero ids, a short id, a bad version, garbage: no parent.
            ("00-00000000000000000000000000000000-b7ad6b7169203331-01", false),
            ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", false),
            ("00-0af7651916cd43dd-b7ad6b7169203331-01", false),
            ("ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", false),
            ("", false),
            ("not a traceparent", false),
        ];
        for (tp, valid) in cases {
            let cx = extract(tp);
            assert_eq!(cx.is_some(), valid, "{tp:?}");
            if let Some(cx) = cx {
                assert_eq!(inject(&cx), tp, "a context reads back as it came");
            }
        }
    }

    #[test]
    fn with_export_off_nothing_is_made() {
        // No init in this test process: every entry point answers "off" at once.
        assert!(!enabled());
        assert!(formation_span("frm_x", "lead").is_none());
        assert!(call_span("tsk_x", "mcl_x", "coder").is_none());
        assert!(task_traceparent("tsk_x").is_none());
        task_received("tsk_x", Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
        task_started("tsk_x");
        task_ended("tsk_x", "completed");
        model_turn(&ModelTurn::default(), SystemTime::now());
        assert!(STATE.get().is_none());
    }
}
