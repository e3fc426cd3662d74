//! A model capsule's runtime as the client of one MCP tool server over Streamable HTTP (issue
//! #31): the handshake, the listing of the tools the manifest allows, and calls to them. What the
//! messages are is `wire::mcp`'s; this module moves them over awc.
//!
//! Invariants:
//! - **Only allowed tools are reachable.** [`McpServer::connect`] fails unless every name in
//!   [`McpEndpoint::allow`] is a usable tool of the server, keeps only those, and
//!   [`McpServer::call`] refuses any other name without sending anything.
//! - **The bearer goes to this server only**: in the `Authorization` header, marked sensitive,
//!   through `outbound` (no redirects, TLS or a loopback listener of this user). No error text
//!   and no `Debug` output carries it.
//! - **Nothing the server says back carries a credential the member holds**: every answer is read
//!   through [`McpServer::post`], which scrubs its result and its failure text
//!   (`secret::scrub`), so a server echoing its bearer in a tool result, a listing or an error
//!   cannot pass it on to the model, its provider, a record or a log.
//! - **Nothing the server sends is unbounded**: each reply body and each event is bounded in
//!   bytes ([`McpLimits`]), each request in time (the connection, a silent event stream, the
//!   whole request), and the listing in pages and bytes; a garbage, huge or endless answer is an
//!   `Err`, never a hang or unbounded memory.
//! - A session the server forgot (404 to a request carrying its `Mcp-Session-Id`, as after the
//!   server restarted or expired it) is begun again with a new `initialize`, once per request,
//!   as the transport asks of a client.
//!
//! Threads: an [`McpServer`] holds an awc client, whose futures are not `Send`, so it is used on
//! the arbiter that made it (connect once on the executor's arbiter, share it across the tasks
//! run there) and never crosses threads. Calls through one `McpServer` may run concurrently.
//! Dropping it ends the session with a best-effort `DELETE` spawned on that arbiter;
//! [`McpServer::close`] does the same and waits for it.

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use awc::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use futures_util::StreamExt;
use serde_json::Value;
use zeroize::Zeroizing;

use crate::diag::{self, Code, Diagnostic};
use crate::outbound;
use crate::secret::{Secret, scrub, scrub_json};

use crate::text::head;
use crate::wire::mcp as wire;
use crate::wire::mcp_tasks as tasks;
use crate::wire::sse::SseReader;

pub use crate::wire::mcp::{CallResult, McpTool};

/// The session id header, sent back on every request once the server gave one.
const SESSION_HEADER: &str = "mcp-session-id";
/// The negotiated version, sent on every request after `initialize` (and on every request of the
/// stateless revision).
const VERSION_HEADER: &str = "mcp-protocol-version";
/// The stateless revision's request method and tool name, repeated from the body for routing.
const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
/// Bytes of a refused request's body quoted in its error.
const QUOTED_BODY: usize = 200;
/// Most questions one call may ask in all, across its rounds and its task's polls.
pub const MAX_QUESTIONS_PER_CALL: usize = 8;

/// A question for whoever gave the task (the runtime's own input-required path): the answer's
/// text, or why there is none.
pub type Ask<'a> = dyn Fn(String) -> futures_util::future::LocalBoxFuture<'static, Result<String, String>> + 'a;

/// What a call carries besides its tool and arguments.
#[derive(Default)]
pub struct CallContext<'a> {
    /// The W3C `traceparent` of the span the call runs under: sent in the request's
    /// `params._meta`, so the server's spans join the trace.
    pub traceparent: Option<String>,
    /// How a question the server asks (an elicitation form) is put to a person; `None` refuses
    /// every question.
    pub ask: Option<&'a Ask<'a>>,
}

/// A task or input request that cannot be read: a flood of questions has its code.
fn fault(f: tasks::Fault) -> Failure {
    match f {
        tasks::Fault::Flood(t) => Failure::Coded(diag::E_MCP_003, t),
        tasks::Fault::Malformed(t) => Failure::Other(t),
    }
}

/// `error[CODE]: text` and the code's hint, as one message.
fn coded(code: Code, text: String) -> String {
    Diagnostic::new(code, text).render("")
}

/// One `tools:` entry of kind `mcp`, as the manifest gives it.
#[derive(Clone, Debug)]
pub struct McpEndpoint {
    /// The entry's name: it names the server in every error.
    pub name: String,
    /// The MCP endpoint: `https://…`, or `http://` to loopback.
    pub url: String,
    /// Sent as `Authorization: Bearer …` to this server only.
    pub bearer: Option<Secret>,
    /// The server's tools the capsule may use; each must exist.
    pub allow: Vec<String>,
}

/// Which revisions a client proposes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revisions {
    /// `server/discover` first, and the stateless revision when the server lists it; else the
    /// handshake of the earlier ones.
    Newest,
    /// Only the handshake (2025-11-25 and before), as a client of those revisions speaks.
    Handshake,
}

/// Bounds on what one server may cost; tests shrink them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpLimits {
    /// Opening a connection (TLS handshake included).
    pub connect: Duration,
    /// Each request of the handshake and the listing, and the closing `DELETE`: sending it and
    /// reading the whole answer. A call's bound is the caller's.
    pub request: Duration,
    /// Silence between two pieces of an event-stream answer.
    pub idle: Duration,
    /// One answer's body, an event stream's included.
    pub max_body: usize,
    /// One event of an event stream (the reader holds at most one).
    pub max_event: usize,
    /// Pages of `tools/list` followed.
    pub max_pages: usize,
    /// Bytes of all `tools/list` pages together.
    pub max_list_bytes: usize,
    /// A call result's text (`wire::mcp::call_result`).
    pub max_result_text: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        McpLimits {
            connect: Duration::from_secs(10),
            request: Duration::from_secs(30),
            // The official SDKs' event streams ping every 15 s while a tool works.
            idle: Duration::from_secs(60),
            max_body: 4 << 20,
            // A result is one event: a screenshot tool's image may be most of the body.
            max_event: 4 << 20,
            max_pages: 16,
            max_list_bytes: 8 << 20,
            max_result_text: wire::MAX_RESULT_TEXT,
        }
    }
}

/// The session as the next request carries it.
#[derive(Debug, Clone, Default)]
struct Session {
    id: Option<String>,
    /// `None` until `initialize` settled one, or `server/discover` listed the stateless one.
    version: Option<&'static str>,
}

impl Session {
    fn is_stateless(&self) -> bool {
        self.version == Some(wire::STATELESS_VERSION)
    }
}

/// Why a request failed.
enum Failure {
    /// 404 to a request carrying this session id: the server no longer knows the session.
    SessionGone(String),
    /// The time bound passed.
    TimedOut(String),
    /// A fault the registry has a code for.
    Coded(Code, String),
    Other(String),
}

impl Failure {
    fn text(self) -> String {
        match self {
            Failure::SessionGone(_) => "the server ended the session".to_string(),
            Failure::TimedOut(t) | Failure::Other(t) | Failure::Coded(_, t) => t,
        }
    }
}

/// A 2xx answer.
struct Answer {
    /// The response's `result`; `None` for a notification's acceptance.
    result: Option<Value>,
    /// Bytes of the body read.
    bytes: usize,
    /// The `Mcp-Session-Id` the server sent, when valid.
    session_id: Option<String>,
}

/// When a request must be over, and the bound that set it (for the timeout's text).
#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    bound: Duration,
}

impl Deadline {
    fn after(bound: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + bound,
            bound,
        }
    }

    fn left(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }

    /// Whichever ends first.
    fn min(self, other: Option<Deadline>) -> Deadline {
        match other {
            Some(o) if o.at < self.at => o,
            _ => self,
        }
    }
}

/// What the closing `DELETE` needs, owned, so it can be sent from another future or thread.
struct Closing {
    url: String,
    credential: Option<HeaderValue>,
    session_id: String,
    version: Option<&'static str>,
    connect: Duration,
    request: Duration,
}

/// A connected MCP server and the tools the capsule may use on it.
pub struct McpServer {
    name: String,
    url: String,
    http: outbound::Client,
    /// `Authorization: Bearer …`, marked sensitive.
    credential: Option<HeaderValue>,
    /// The key itself, held so that the member-wide scrub replaces it for as long as the
    /// session lasts.
    _bearer: Option<Secret>,
    allow: Vec<String>,
    tools: Vec<McpTool>,
    limits: McpLimits,
    session: RefCell<Session>,
    next_id: Cell<u64>,
    /// Where the closing `DELETE` is spawned when the server is dropped.
    arbiter: Option<actix_rt::ArbiterHandle>,
    /// `close` ran: the drop has nothing left to end.
    closed: bool,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("tools", &self.tools.iter().map(|t| &t.name).collect::<Vec<_>>())
            // The session id is left out: it is all a request needs besides the bearer.
            .field(
                "protocol_version",
                &self.session.try_borrow().ok().and_then(|s| s.version),
            )
            .finish_non_exhaustive()
    }
}

/// The client for `url` (`outbound`: TLS, or this user's loopback listener for plain `http://`,
/// which only a loopback endpoint may use; no redirects, which could carry the bearer elsewhere).
fn http_client(url: &str, connect: Duration) -> Result<outbound::Client, String> {
    outbound::Client::new(outbound::Route::Origin(url), outbound::Bounds::connect(connect))
}

/// A request with the headers every request carries, before any of its own.
fn base_request(
    http: &outbound::Client,
    method: awc::http::Method,
    url: &str,
    credential: Option<&HeaderValue>,
    session: &Session,
) -> awc::ClientRequest {
    let mut req = http.request(method, url);
    if let Some(v) = credential {
        req = req.insert_header((AUTHORIZATION, v.clone()));
    }
    if let Some(id) = &session.id {
        req = req.insert_header((SESSION_HEADER, id.as_str()));
    }
    if let Some(v) = session.version {
        req = req.insert_header((VERSION_HEADER, v));
    }
    req
}

impl McpServer {
    /// Connects to `endpoint`: `initialize`, `notifications/initialized`, then `tools/list` to
    /// its last page. `Err` (naming the server by its entry name) when any step fails, when the
    /// server speaks no protocol version this client does, or when an allowed tool is missing or
    /// unusable (naming each).
    pub async fn connect(endpoint: McpEndpoint, limits: McpLimits) -> Result<McpServer, String> {
        McpServer::connect_as(endpoint, limits, Revisions::Newest).await
    }

    /// [`McpServer::connect`], proposing only the `revisions` given.
    pub async fn connect_as(
        endpoint: McpEndpoint,
        limits: McpLimits,
        revisions: Revisions,
    ) -> Result<McpServer, String> {
        let McpEndpoint {
            name,
            url,
            bearer,
            allow,
        } = endpoint;
        let fail = |why: String| format!("MCP server '{name}': {why}");
        let http = http_client(&url, limits.connect).map_err(fail)?;
        let credential = match &bearer {
            None => None,
            Some(key) => {
                let value = Zeroizing::new(format!("Bearer {}", key.reveal()));
                Some(
                    outbound::credential(&value)
                        .ok_or_else(|| fail("the api_key holds characters a header cannot carry".to_string()))?,
                )
            }
        };
        let mut server = McpServer {
            name: name.clone(),
            url,
            http,
            credential,
            _bearer: bearer,
            allow: Vec::new(),
            tools: Vec::new(),
            limits,
            session: RefCell::new(Session::default()),
            next_id: Cell::new(1),
            arbiter: actix_rt::Arbiter::try_current(),
            closed: false,
        };
        // The stateless revision when the server lists it; else the initialize handshake.
        if revisions == Revisions::Handshake || !server.discover().await {
            server.handshake(None).await.map_err(|f| match f {
                Failure::Coded(code, t) => coded(code, fail(t)),
                f => fail(f.text()),
            })?;
        }
        let mut allowed: Vec<String> = Vec::new();
        for a in allow {
            if !allowed.contains(&a) {
                allowed.push(a);
            }
        }
        let tools = match server.list_tools(&fail).await {
            Ok(listed) => select_allowed(&allowed, listed),
            Err(e) => Err(e),
        };
        match tools {
            Ok(tools) => {
                server.tools = tools;
                server.allow = allowed;
                Ok(server)
            }
            Err(e) => {
                // The session begun is of no use: ended now rather than left to the server's
                // idle timeout.
                server.close().await;
                Err(if e.starts_with("error[") { e } else { fail(e) })
            }
        }
    }

    /// The entry's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The allowed tools, in the order of `allow`.
    pub fn tools(&self) -> &[McpTool] {
        &self.tools
    }

    /// The protocol version the session speaks.
    pub fn protocol_version(&self) -> &'static str {
        self.session.borrow().version.unwrap_or(wire::PROTOCOL_VERSION)
    }

    /// Calls `tool` with `arguments` (a JSON object, or `null` for none), the whole call bounded
    /// by `timeout`. `Ok` is the tool's result, a failure it reports included (`is_error`); `Err`
    /// is a call that produced no result: a tool not allowed (nothing sent), the server refusing
    /// the request, a transport failure, the timeout (the server is told the call is cancelled).
    pub async fn call(&self, tool: &str, arguments: Value, timeout: Duration) -> Result<CallResult, String> {
        self.call_in(tool, arguments, timeout, &CallContext::default()).await
    }

    /// [`McpServer::call`] with the trace context and the asking path of `cx`. In the stateless
    /// revision a call may be answered with a task handle (the tasks extension): it is polled,
    /// at the pace the server suggests within clamps, until it ends or the bound passes, when it
    /// is cancelled (`tasks/cancel`, E-MCP-002); dropping the call's future cancels it too. A
    /// call or task that asks for input has each question put through `cx.ask`, at most
    /// [`MAX_QUESTIONS_PER_CALL`] in all (E-MCP-003); the time a question waits for its answer
    /// does not count against the bound.
    pub async fn call_in(
        &self,
        tool: &str,
        arguments: Value,
        timeout: Duration,
        cx: &CallContext<'_>,
    ) -> Result<CallResult, String> {
        let fail = |why: String| format!("MCP server '{}': {why}", self.name);
        let say = |f: Failure| match f {
            Failure::Coded(code, t) => coded(code, fail(format!("{tool}: {t}"))),
            f => fail(format!("{tool}: {}", f.text())),
        };
        if !self.allow.iter().any(|a| a == tool) {
            return Err(fail(format!(
                "'{}' is not a tool this capsule may use; it may use {}",
                head(tool, wire::MAX_TOOL_NAME),
                self.allow.join(", ")
            )));
        }
        let mut until = Deadline::after(timeout);
        let mut asked = 0usize;
        let mut rounds = 0usize;
        let mut answers: Option<(serde_json::Map<String, Value>, Option<String>)> = None;
        loop {
            let id = self.take_id();
            let mut body = wire::tools_call_request(id, tool, &arguments).map_err(fail)?;
            if let Some(tp) = &cx.traceparent {
                body = tasks::with_meta(&body, "traceparent", Value::String(tp.clone())).map_err(fail)?;
            }
            if let Some((responses, state)) = answers.take() {
                body = tasks::with_input_responses(&body, responses, state.as_deref()).map_err(fail)?;
            }
            let result = match self.request(id, body, until).await {
                Ok(answer) => answer.result.unwrap_or(Value::Null),
                Err(f @ Failure::TimedOut(_)) => {
                    self.cancel(id, "the caller stopped waiting");
                    return Err(say(f));
                }
                Err(f) => return Err(say(f)),
            };
            if !self.session.borrow().is_stateless() {
                return wire::call_result(&result, self.limits.max_result_text).map_err(fail);
            }
            match tasks::call_reply(&result).map_err(|f| say(fault(f)))? {
                tasks::CallReply::Complete(r) => {
                    return wire::call_result(&r, self.limits.max_result_text).map_err(fail);
                }
                tasks::CallReply::Task(t) => {
                    let result = self
                        .follow_task(tool, t, &mut until, cx, &mut asked)
                        .await
                        .map_err(say)?;
                    return wire::call_result(&result, self.limits.max_result_text).map_err(fail);
                }
                tasks::CallReply::InputRequired(ir) => {
                    rounds += 1;
                    if rounds > MAX_QUESTIONS_PER_CALL {
                        return Err(say(Failure::Coded(
                            diag::E_MCP_003,
                            format!("it asked for input more than {MAX_QUESTIONS_PER_CALL} times"),
                        )));
                    }
                    let responses = self
                        .answer(tool, ir.requests, cx, &mut asked, &mut until)
                        .await
                        .map_err(say)?;
                    answers = Some((responses, ir.request_state));
                }
            }
        }
    }

    /// Polls task `t` until it ends: its result when it completed; `Err` when it failed, was
    /// cancelled, asked what cannot be answered, or outlived `until` (then cancelled). The task
    /// is cancelled as well should this future be dropped before it ends.
    /// At the call's bound the server's task is cancelled before the call fails, so the server
    /// has been told by the time the caller learns it (a dropped call can only send it detached,
    /// [`TaskGuard`]). The cancel is bounded by the request bound; its answer is not needed.
    async fn cancel_at_bound(&self, guard: &mut TaskGuard<'_>) {
        if let Some(task_id) = guard.task_id.take() {
            let id = self.take_id();
            tracing::info!(server = %self.name, task = %task_id, "cancelling the MCP server's task at the call's bound");
            let _ = self
                .request(
                    id,
                    tasks::tasks_cancel_request(id, &task_id),
                    Deadline::after(self.limits.request),
                )
                .await;
        }
    }

    async fn follow_task(
        &self,
        tool: &str,
        mut t: tasks::Task,
        until: &mut Deadline,
        cx: &CallContext<'_>,
        asked: &mut usize,
    ) -> Result<Value, Failure> {
        let mut guard = TaskGuard {
            server: self,
            task_id: Some(t.id.clone()),
        };
        let mut answered: Vec<String> = Vec::new();
        loop {
            match t.status {
                tasks::Status::Completed => {
                    guard.task_id = None;
                    return Ok(t.result.unwrap_or(Value::Null));
                }
                tasks::Status::Failed => {
                    guard.task_id = None;
                    return Err(Failure::Other(format!(
                        "its task failed: {}",
                        t.error.unwrap_or_default()
                    )));
                }
                tasks::Status::Cancelled => {
                    guard.task_id = None;
                    let why = if t.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", t.message)
                    };
                    return Err(Failure::Other(format!("the server cancelled its task{why}")));
                }
                tasks::Status::InputRequired => {
                    let new: Vec<tasks::InputRequest> =
                        t.input.into_iter().filter(|r| !answered.contains(&r.key)).collect();
                    if !new.is_empty() {
                        answered.extend(new.iter().map(|r| r.key.clone()));
                        let responses = self.answer(tool, new, cx, asked, until).await?;
                        let id = self.take_id();
                        let body = tasks::tasks_update_request(id, &t.id, responses);
                        self.request(id, body, *until).await?;
                    }
                }
                tasks::Status::Working => {}
            }
            let timed_out = || {
                Failure::Coded(
                    diag::E_MCP_002,
                    format!(
                        "its task {} timed out: it did not end within {:?}, and was cancelled",
                        t.id, until.bound
                    ),
                )
            };
            let left = until.left();
            if !left.is_zero() {
                actix_rt::time::sleep(Duration::from_millis(t.poll_ms).min(left)).await;
            }
            if until.left().is_zero() {
                self.cancel_at_bound(&mut guard).await;
                return Err(timed_out());
            }
            let id = self.take_id();
            let result = match self.request(id, tasks::tasks_get_request(id, &t.id), *until).await {
                Ok(a) => a.result.unwrap_or(Value::Null),
                Err(Failure::TimedOut(_)) => {
                    self.cancel_at_bound(&mut guard).await;
                    return Err(timed_out());
                }
                Err(f) => return Err(f),
            };
            let next = tasks::task(&result).map_err(fault)?;
            if next.id != t.id {
                return Err(Failure::Other(format!(
                    "tasks/get for task {} answered task {}",
                    t.id, next.id
                )));
            }
            t = next;
        }
    }

    /// Puts each question of `requests` through `cx.ask` and makes the answers the server's
    /// `inputResponses`. The time waited for answers is added to `until`.
    async fn answer(
        &self,
        tool: &str,
        requests: Vec<tasks::InputRequest>,
        cx: &CallContext<'_>,
        asked: &mut usize,
        until: &mut Deadline,
    ) -> Result<serde_json::Map<String, Value>, Failure> {
        let refuse = |t: String| Failure::Coded(diag::E_MCP_003, t);
        if requests.is_empty() {
            return Ok(serde_json::Map::new());
        }
        let Some(ask) = cx.ask else {
            return Err(refuse(
                "it asks for input, and this task cannot ask (its capsule sets no lifecycle.input_timeout_secs)"
                    .to_string(),
            ));
        };
        let mut responses = serde_json::Map::new();
        for r in requests {
            *asked += 1;
            if *asked > MAX_QUESTIONS_PER_CALL {
                return Err(refuse(format!(
                    "it asked more than the {MAX_QUESTIONS_PER_CALL} questions a call may ask"
                )));
            }
            let Some(form) = &r.form else {
                return Err(refuse(r.question));
            };
            let question = format!("MCP server '{}' ({tool}) asks: {}", self.name, r.question);
            let started = Instant::now();
            let answer = ask(question).await.map_err(Failure::Other)?;
            until.at += started.elapsed();
            responses.insert(r.key, tasks::elicit_result(form, &answer));
        }
        Ok(responses)
    }

    /// Ends the session (`DELETE` with its id, bounded by [`McpLimits::request`]) and waits for
    /// the server's answer, which is not checked: the session is over for this client either way.
    pub async fn close(mut self) {
        self.closed = true;
        if let Some(closing) = self.closing() {
            closing.send().await;
        }
    }

    fn take_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        id
    }

    /// `server/discover`, proposing the stateless revision: `true` when the server lists it, and
    /// the session is then that revision's (no id, no handshake). A server that does not know
    /// the method, or answers anything else, is spoken to with the handshake: servers of the
    /// earlier revisions need not implement it.
    async fn discover(&self) -> bool {
        let id = self.take_id();
        let body = wire::discover_request(id, env!("CARGO_PKG_VERSION"));
        let probe = Session {
            id: None,
            version: Some(wire::STATELESS_VERSION),
        };
        let Ok(answer) = self
            .post(body, Some(id), &probe, Deadline::after(self.limits.request))
            .await
        else {
            return false;
        };
        if !matches!(wire::discover_result(&answer.result.unwrap_or(Value::Null)), Ok(true)) {
            return false;
        }
        *self.session.borrow_mut() = probe;
        true
    }

    /// `initialize` and `notifications/initialized`, each bounded by [`McpLimits::request`] and
    /// by `within` (the request that found its session gone); the session they settle replaces
    /// the one before.
    async fn handshake(&self, within: Option<Deadline>) -> Result<(), Failure> {
        let id = self.take_id();
        let body = wire::initialize_request(id, env!("CARGO_PKG_VERSION"));
        let fresh = Session::default();
        let answer = self
            .post(body, Some(id), &fresh, Deadline::after(self.limits.request).min(within))
            .await
            .map_err(|f| Failure::Other(format!("initialize failed: {}", f.text())))?;
        let init = wire::initialize_result(&answer.result.unwrap_or(Value::Null))
            .map_err(|t| Failure::Coded(diag::E_MCP_001, t))?;
        let session = Session {
            id: answer.session_id,
            version: Some(init.protocol_version),
        };
        let until = Deadline::after(self.limits.request).min(within);
        self.post(wire::initialized_notification(), None, &session, until)
            .await
            .map_err(|f| Failure::Other(format!("notifications/initialized failed: {}", f.text())))?;
        *self.session.borrow_mut() = session;
        Ok(())
    }

    /// Every page of `tools/list`, bounded in pages and bytes, each request bounded by
    /// [`McpLimits::request`].
    /// `Err` is the reason, or (a coded fault) the whole message: `fail` names the server.
    async fn list_tools(&self, fail: impl Fn(String) -> String) -> Result<wire::ToolsPage, String> {
        let mut all = wire::ToolsPage::default();
        let mut cursor: Option<String> = None;
        let mut seen: Vec<String> = Vec::new();
        let mut bytes = 0usize;
        for _ in 0..self.limits.max_pages {
            let id = self.take_id();
            let body = wire::tools_list_request(id, cursor.as_deref());
            let answer = self
                .request(id, body, Deadline::after(self.limits.request))
                .await
                .map_err(|f| match f {
                    Failure::Coded(code, t) => coded(code, fail(format!("tools/list failed: {t}"))),
                    f => format!("tools/list failed: {}", f.text()),
                })?;
            bytes = bytes.saturating_add(answer.bytes);
            if bytes > self.limits.max_list_bytes {
                return Err(format!(
                    "its tools/list pages passed {} bytes",
                    self.limits.max_list_bytes
                ));
            }
            let page = wire::tools_page(&answer.result.unwrap_or(Value::Null))?;
            all.tools.extend(page.tools);
            all.unusable.extend(page.unusable);
            match page.next_cursor {
                None => return Ok(all),
                Some(c) if seen.contains(&c) => {
                    return Err("its tools/list gave the same cursor twice".to_string());
                }
                Some(c) => {
                    seen.push(c.clone());
                    cursor = Some(c);
                }
            }
        }
        Err(format!("its tools/list has more than {} pages", self.limits.max_pages))
    }

    /// Sends request `id` in the current session; should the server have forgotten the session,
    /// begins a new one and sends it once more.
    async fn request(&self, id: u64, body: String, until: Deadline) -> Result<Answer, Failure> {
        let session = self.session.borrow().clone();
        if session.is_stateless() {
            // No session to forget: every request stands alone.
            return self.post(body, Some(id), &session, until).await;
        }
        match self.post(body.clone(), Some(id), &session, until).await {
            Err(Failure::SessionGone(gone)) => {
                // A concurrent request may have begun the new session already.
                if self.session.borrow().id.as_deref() == Some(gone.as_str()) {
                    tracing::info!(server = %self.name, "the MCP server ended the session; initializing again");
                    self.handshake(Some(until)).await.map_err(|f| match f {
                        Failure::Coded(code, why) => {
                            Failure::Coded(code, format!("the server ended the session; {why}"))
                        }
                        f => Failure::Other(format!("the server ended the session; {}", f.text())),
                    })?;
                }
                let session = self.session.borrow().clone();
                match self.post(body, Some(id), &session, until).await {
                    Err(Failure::SessionGone(_)) => {
                        Err(Failure::Other("the server ended the new session at once".to_string()))
                    }
                    other => other,
                }
            }
            other => other,
        }
    }

    /// POSTs one message in `session` and reads the answer: for a request (`id`), its response,
    /// from a JSON body or an event stream; for a notification, its acceptance. The one reading of
    /// what the server says: its result and any failure text are scrubbed of every credential
    /// the member holds.
    async fn post(&self, body: String, id: Option<u64>, session: &Session, until: Deadline) -> Result<Answer, Failure> {
        match self.post_unscrubbed(body, id, session, until).await {
            Ok(mut answer) => {
                if let Some(result) = answer.result.as_mut() {
                    scrub_json(result);
                }
                Ok(answer)
            }
            Err(Failure::TimedOut(t)) => Err(Failure::TimedOut(scrub(t))),
            Err(Failure::Coded(c, t)) => Err(Failure::Coded(c, scrub(t))),
            Err(Failure::Other(t)) => Err(Failure::Other(scrub(t))),
            Err(gone @ Failure::SessionGone(_)) => Err(gone),
        }
    }

    async fn post_unscrubbed(
        &self,
        body: String,
        id: Option<u64>,
        session: &Session,
        until: Deadline,
    ) -> Result<Answer, Failure> {
        let (req, body) = self.prepared(body, id.is_some(), session)?;
        let too_slow = || Failure::TimedOut(format!("no answer within {:?}", until.bound));
        let mut resp = match actix_rt::time::timeout(until.left(), req.send_body(body)).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => return Err(Failure::Other(format!("the request failed: {e}"))),
            Err(_) => return Err(too_slow()),
        };
        let status = resp.status().as_u16();
        if status == 404
            && let Some(gone) = &session.id
        {
            return Err(Failure::SessionGone(gone.clone()));
        }
        if !(200..300).contains(&status) {
            let quoted = self.quoted_body(&mut resp, until).await;
            let what = match status {
                401 | 403 => format!("the server refused the credentials ({status})"),
                _ => format!("the server answered {status}"),
            };
            let text = if quoted.is_empty() {
                what
            } else {
                format!("{what}: {quoted}")
            };
            // A server that listed the stateless revision and then finds a request of it
            // malformed (as one asking for a session would) does not speak it.
            if status == 400 && session.is_stateless() && id.is_some() {
                return Err(Failure::Coded(
                    diag::E_MCP_001,
                    format!(
                        "it listed MCP {} in server/discover, yet refused a request of that revision: {text}",
                        wire::STATELESS_VERSION
                    ),
                ));
            }
            return Err(Failure::Other(text));
        }
        let session_id = match resp.headers().get(SESSION_HEADER) {
            None => None,
            Some(_) if session.is_stateless() && id.is_some() => {
                return Err(Failure::Coded(
                    diag::E_MCP_001,
                    format!(
                        "it listed MCP {} in server/discover, yet answered with a session id, which that revision has none of",
                        wire::STATELESS_VERSION
                    ),
                ));
            }
            Some(v) => match v.to_str().ok().filter(|s| wire::session_id_ok(s)) {
                Some(s) => Some(s.to_string()),
                None => {
                    return Err(Failure::Other(format!(
                        "the server sent a session id that is not 1 to {} visible ASCII characters",
                        wire::MAX_SESSION_ID
                    )));
                }
            },
        };
        let Some(id) = id else {
            // The specification answers a notification 202; some servers say 200 or 204. The body,
            // if any, says nothing a client needs.
            return Ok(Answer {
                result: None,
                bytes: 0,
                session_id,
            });
        };
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|t| t.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
            .unwrap_or_default();
        let (result, bytes) = match content_type.as_str() {
            "application/json" => {
                let read = resp.body().limit(self.limits.max_body);
                let bytes = match actix_rt::time::timeout(until.left(), read).await {
                    Ok(Ok(b)) => b,
                    Ok(Err(awc::error::PayloadError::Overflow)) => {
                        return Err(Failure::Other(format!(
                            "the answer is longer than {} bytes",
                            self.limits.max_body
                        )));
                    }
                    Ok(Err(e)) => return Err(Failure::Other(format!("reading the answer failed: {e}"))),
                    Err(_) => return Err(too_slow()),
                };
                let result = wire::read_json_body(&bytes, id).map_err(Failure::Other)?;
                (result, bytes.len())
            }
            "text/event-stream" => self.read_events(&mut resp, id, until).await?,
            other => {
                return Err(Failure::Other(format!(
                    "the server answered with content type {:?}, neither application/json nor text/event-stream",
                    head(other, 100)
                )));
            }
        };
        Ok(Answer {
            result: Some(result),
            bytes,
            session_id,
        })
    }

    /// A POST of `body` in `session`, with the headers every request carries, and the body as it
    /// goes out: a request of the stateless revision gets its `_meta` and its method (and tool
    /// name) headers.
    fn prepared(
        &self,
        body: String,
        is_request: bool,
        session: &Session,
    ) -> Result<(awc::ClientRequest, String), Failure> {
        let mut req = base_request(
            &self.http,
            awc::http::Method::POST,
            &self.url,
            self.credential.as_ref(),
            session,
        )
        .insert_header((CONTENT_TYPE, "application/json"))
        .insert_header((ACCEPT, "application/json, text/event-stream"));
        let mut body = body;
        if session.is_stateless() && is_request {
            let st = wire::stateless_request(&body, env!("CARGO_PKG_VERSION")).map_err(Failure::Other)?;
            req = req.insert_header((METHOD_HEADER, st.method.as_str()));
            if let Some(name) = &st.name {
                // A tool name the server listed: visible ASCII, or the header cannot carry it.
                let value = HeaderValue::from_str(name)
                    .map_err(|_| Failure::Other("the tool's name cannot be carried in a header".to_string()))?;
                req = req.insert_header((NAME_HEADER, value));
            }
            body = st.body;
        }
        Ok((req, body))
    }

    /// Sends `body` without waiting for its answer, bounded by [`McpLimits::request`].
    fn send_detached(&self, body: String, is_request: bool) {
        let session = self.session.borrow().clone();
        let Ok((req, body)) = self.prepared(body, is_request, &session) else {
            return;
        };
        let send = req.send_body(body);
        let bound = self.limits.request;
        actix_rt::spawn(async move {
            let _ = actix_rt::time::timeout(bound, send).await;
        });
    }

    /// Reads an event stream until the response to `id`, skipping the server's notifications and
    /// requests; bounded in bytes, per event, in silence and in total.
    async fn read_events(
        &self,
        body: &mut awc::ClientResponse,
        id: u64,
        until: Deadline,
    ) -> Result<(Value, usize), Failure> {
        let mut reader = SseReader::new(self.limits.max_event);
        let mut bytes = 0usize;
        loop {
            let left = until.left();
            let next = match actix_rt::time::timeout(self.limits.idle.min(left), body.next()).await {
                Ok(next) => next,
                Err(_) if left <= self.limits.idle => {
                    return Err(Failure::TimedOut(format!(
                        "no response to request {id} within {:?}",
                        until.bound
                    )));
                }
                Err(_) => {
                    return Err(Failure::TimedOut(format!(
                        "the event stream was silent for {:?}",
                        self.limits.idle
                    )));
                }
            };
            let chunk = match next {
                None => {
                    return Err(Failure::Other(format!(
                        "the event stream ended without a response to request {id}"
                    )));
                }
                Some(Err(e)) => return Err(Failure::Other(format!("the event stream broke: {e}"))),
                Some(Ok(chunk)) => chunk,
            };
            bytes = bytes.saturating_add(chunk.len());
            if bytes > self.limits.max_body {
                return Err(Failure::Other(format!(
                    "the event stream passed {} bytes without a response to request {id}",
                    self.limits.max_body
                )));
            }
            let events = reader
                .push(&chunk)
                .map_err(|_| Failure::Other(format!("an event is longer than {} bytes", self.limits.max_event)))?;
            for event in events {
                if let Some(r) = wire::response_for(&event, id) {
                    return r.map(|v| (v, bytes)).map_err(Failure::Other);
                }
            }
        }
    }

    /// The first [`QUOTED_BODY`] bytes of a refused request's body, scrubbed of the key; empty
    /// when it cannot be read soon.
    async fn quoted_body(&self, resp: &mut awc::ClientResponse, until: Deadline) -> String {
        let left = until.left().min(Duration::from_secs(2));
        let Ok(Ok(bytes)) = actix_rt::time::timeout(left, resp.body().limit(64 << 10)).await else {
            return String::new();
        };
        // Scrubbed before the cut, which could otherwise leave part of a credential.
        let text = scrub(String::from_utf8_lossy(&bytes).into_owned());
        head(text.trim(), QUOTED_BODY).to_string()
    }

    /// Tells the server, without waiting, that request `id` is given up on.
    fn cancel(&self, id: u64, reason: &str) {
        if self.session.borrow().is_stateless() {
            // The revision has no client notifications: the request's own stream, closed when
            // its future was dropped, is the cancellation.
            return;
        }
        self.send_detached(wire::cancelled_notification(id, reason), false);
    }

    /// What the closing `DELETE` needs; `None` without a session id (nothing to end).
    fn closing(&self) -> Option<Closing> {
        let session = self.session.borrow();
        Some(Closing {
            url: self.url.clone(),
            credential: self.credential.clone(),
            session_id: session.id.clone()?,
            version: session.version,
            connect: self.limits.connect,
            request: self.limits.request,
        })
    }
}

/// A task of the server this client follows: cancelled (`tasks/cancel`, not waited for) when
/// dropped while it has not ended, as when the call's future is dropped because the model's
/// turn or the task was cancelled, or the call's bound passed.
struct TaskGuard<'a> {
    server: &'a McpServer,
    /// `None` once the task ended.
    task_id: Option<String>,
}

impl Drop for TaskGuard<'_> {
    fn drop(&mut self) {
        if let Some(task_id) = self.task_id.take() {
            let id = self.server.take_id();
            tracing::info!(server = %self.server.name, task = %task_id, "cancelling the MCP server's task");
            self.server
                .send_detached(tasks::tasks_cancel_request(id, &task_id), true);
        }
    }
}

impl Drop for McpServer {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let (Some(closing), Some(arbiter)) = (self.closing(), self.arbiter.as_ref()) else {
            return;
        };
        // awc's futures are not `Send`: the arbiter is sent only what the request is made of,
        // and makes and spawns the request there. A stopped arbiter drops it unsent.
        arbiter.spawn_fn(move || {
            actix_rt::spawn(closing.send());
        });
    }
}

impl Closing {
    /// `DELETE` with the session id, bounded by the request bound; the answer is not read.
    async fn send(self) {
        let Ok(http) = http_client(&self.url, self.connect) else {
            return;
        };
        let session = Session {
            id: Some(self.session_id),
            version: self.version,
        };
        let req = base_request(
            &http,
            awc::http::Method::DELETE,
            &self.url,
            self.credential.as_ref(),
            &session,
        );
        let _ = actix_rt::time::timeout(self.request, req.send()).await;
    }
}

/// The allowed tools of `listed`, in the order of `allow`, or `Err` naming each allowed tool that
/// is missing or unusable.
fn select_allowed(allow: &[String], listed: wire::ToolsPage) -> Result<Vec<McpTool>, String> {
    let mut tools = Vec::new();
    let mut problems = Vec::new();
    let mut missing = Vec::new();
    for name in allow {
        // A server listing a name twice: the first entry is the tool.
        if let Some(t) = listed.tools.iter().find(|t| &t.name == name) {
            tools.push(t.clone());
        } else if let Some(u) = listed.unusable.iter().find(|u| &u.name == name) {
            problems.push(format!("tool '{name}' cannot be used: {}", u.why));
        } else {
            missing.push(format!("'{}'", head(name, wire::MAX_TOOL_NAME)));
        }
    }
    if !missing.is_empty() {
        let mut names: Vec<&str> = listed.tools.iter().map(|t| t.name.as_str()).collect();
        names.dedup();
        let shown = if names.is_empty() {
            "none".to_string()
        } else {
            let mut s = names.iter().take(20).copied().collect::<Vec<_>>().join(", ");
            if names.len() > 20 {
                s.push_str(&format!(", and {} more", names.len() - 20));
            }
            s
        };
        problems.insert(
            0,
            format!(
                "the server has no tool {} that the manifest allows (it lists: {shown})",
                missing.join(", ")
            ),
        );
    }
    if problems.is_empty() {
        Ok(tools)
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn listed(names: &[&str], unusable: &[(&str, &str)]) -> wire::ToolsPage {
        wire::ToolsPage {
            tools: names
                .iter()
                .map(|n| McpTool {
                    name: n.to_string(),
                    description: String::new(),
                    input_schema: json!({"type": "object"}),
                })
                .collect(),
            unusable: unusable
                .iter()
                .map(|(n, w)| wire::Unusable {
                    name: n.to_string(),
                    why: w.to_string(),
                })
                .collect(),
            next_cursor: None,
        }
    }

    #[test]
    fn only_allowed_tools_are_kept_and_each_must_exist() {
        let allow = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let got = select_allowed(&allow(&["fail", "add"]), listed(&["add", "echo", "fail"], &[])).unwrap();
        let names: Vec<&str> = got.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["fail", "add"]);
        // (allow, listed, unusable, error)
        type Case<'a> = (&'a [&'a str], &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
        let table: &[Case] = &[
            (
                &["add", "mul"],
                &["add"],
                &[],
                "the server has no tool 'mul' that the manifest allows (it lists: add)",
            ),
            (
                &["a", "b"],
                &[],
                &[],
                "the server has no tool 'a', 'b' that the manifest allows (it lists: none)",
            ),
            (
                &["big", "gone"],
                &["add"],
                &[("big", "its input schema is 70000 bytes, more than 65536")],
                "the server has no tool 'gone' that the manifest allows (it lists: add); \
                 tool 'big' cannot be used: its input schema is 70000 bytes, more than 65536",
            ),
        ];
        for (a, names, unusable, want) in table {
            assert_eq!(
                select_allowed(&allow(a), listed(names, unusable)).unwrap_err(),
                *want,
                "{a:?}"
            );
        }
        let many: Vec<String> = (0..25).map(|i| format!("t{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let e = select_allowed(&allow(&["x"]), listed(&many, &[])).unwrap_err();
        assert!(e.ends_with("t18, t19, and 5 more)"), "{e}");
    }

    #[test]
    fn debug_output_never_shows_the_bearer() {
        let e = McpEndpoint {
            name: "calc".into(),
            url: "http://127.0.0.1:1/mcp".into(),
            bearer: Some(Secret::new("sk-very-secret-key".into())),
            allow: vec!["add".into()],
        };
        let text = format!("{e:?}");
        assert!(
            !text.contains("sk-very-secret-key") && text.contains("Secret([redacted])"),
            "{text}"
        );
    }
}
