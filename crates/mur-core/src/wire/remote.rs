//! A remote capsule's side of A2A v1.0 (docs/reference/capsules.md#remote-capsules), as pure
//! functions: where the agent card is, the card's check (A2A 1.0, a JSON-RPC interface on an
//! origin the capsule may reach, a security scheme it can satisfy), the request bodies it sends
//! the remote agent, the reading of the agent's replies and stream events into what the member's
//! board shows, and the mapping of the agent's HTTP refusals. `mur::remote` moves the bytes.

use std::time::Duration;

use serde_json::Value;

use crate::card_sig::{self, CARD_PATH, CardVerifyKey};
use crate::manifest::endpoint;
use crate::secret::{scrub, scrub_json};
use crate::task::TaskState;
use crate::text::head;

/// Largest agent card read, in bytes.
pub const MAX_CARD_BYTES: usize = 1 << 20;
/// Largest JSON-RPC reply read from the remote agent, in bytes.
pub const MAX_REPLY_BYTES: usize = 8 << 20;
/// Largest single stream event, in bytes.
pub const MAX_EVENT_BYTES: usize = 1 << 20;
/// Largest answer kept from the remote agent (every artifact's text together), in bytes.
pub const MAX_ANSWER_BYTES: usize = 1 << 20;
/// Largest quoted piece of what the remote agent said (a status text, a JSON-RPC error).
const QUOTED: usize = 2048;

/// A request's wait after a 429 or 5xx that named no `retry-after`.
pub const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest `retry-after` honoured; a longer one ends the task at once.
pub const RETRY_MAX: Duration = Duration::from_secs(60);
/// Retries of one request at most.
pub const MAX_RETRIES: u32 = 4;

/// Where the card of the agent `url` names is: `url` itself when it names a `.json` document,
/// else the well-known card of its origin. `None` when `url` is not an http(s) URL.
pub fn card_url(url: &str) -> Option<String> {
    let origin = origin(url)?;
    let path = url.split(['?', '#']).next().unwrap_or(url);
    if path.ends_with(".json") {
        return Some(url.to_string());
    }
    Some(format!("{origin}{CARD_PATH}"))
}

/// `scheme://host[:port]`, lowercased, the default port left out: what two URLs must share to be
/// the same origin (RFC 6454). `None` for anything but an http(s) URL with a host.
pub fn origin(url: &str) -> Option<String> {
    let e = endpoint::split(url)?;
    if url.contains(char::is_whitespace) {
        return None;
    }
    let scheme = if e.tls { "https" } else { "http" };
    let authority = e.authority.to_ascii_lowercase();
    let default = if e.tls { ":443" } else { ":80" };
    let authority = authority.strip_suffix(default).unwrap_or(&authority);
    (!authority.is_empty() && !authority.starts_with(':')).then(|| format!("{scheme}://{authority}"))
}

/// How the remote agent's credential is sent, as its card declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// Nothing is sent: the capsule has no key, and the card requires none.
    None,
    /// `Authorization: Bearer <key>`: an HTTP bearer scheme, or a card that declares none.
    Bearer,
    /// An API key in the named request header.
    Header(String),
}

/// What the member learned from a checked card.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Card {
    /// The agent's name, as its card gives it (bounded).
    pub name: String,
    /// The JSON-RPC interface's URL: every request goes there.
    pub endpoint: String,
    /// `capabilities.streaming`: tasks go out as SendStreamingMessage.
    pub streaming: bool,
    pub credential: Credential,
}

/// Checks an agent card (A2A v1.0 §4.4.1): a JSON object with a JSON-RPC interface of protocol
/// 1.0 at an `https://` (or loopback `http://`) URL of `card_url`'s origin or one `reachable`
/// allows, and a security requirement this capsule can meet (`has_key`: `remote.api_key` is
/// set). `Err` says why not, for the member's E-RUN-070.
pub fn check_card(
    body: &[u8],
    card_url: &str,
    has_key: bool,
    reachable: impl Fn(&str) -> bool,
) -> Result<Card, String> {
    let card: Value = serde_json::from_slice(body).map_err(|_| "its agent card is not JSON".to_string())?;
    let Some(obj) = card.as_object() else {
        return Err("its agent card is not a JSON object".to_string());
    };
    let name = obj.get("name").and_then(Value::as_str).unwrap_or("").to_string();
    let interfaces = obj.get("supportedInterfaces").and_then(Value::as_array);
    let Some(interfaces) = interfaces.filter(|l| !l.is_empty()) else {
        // An A2A 0.x card names its version at the top and has no supportedInterfaces.
        let old = obj.get("protocolVersion").and_then(Value::as_str);
        return Err(match old {
            Some(v) => format!(
                "its agent card is of A2A {}, not 1.0 (it has no supportedInterfaces)",
                head(v, 40)
            ),
            None => "its agent card lists no supportedInterfaces, so it is not an A2A 1.0 card".to_string(),
        });
    };
    let field = |i: &Value, k: &str| i.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let jsonrpc: Vec<&Value> = interfaces
        .iter()
        .filter(|i| field(i, "protocolBinding").eq_ignore_ascii_case("JSONRPC"))
        .collect();
    if jsonrpc.is_empty() {
        return Err("its agent card offers no JSONRPC interface (this runtime speaks A2A over JSON-RPC)".to_string());
    }
    let Some(interface) = jsonrpc.iter().find(|i| is_one_oh(&field(i, "protocolVersion"))) else {
        let versions: Vec<String> = jsonrpc
            .iter()
            .map(|i| head(&field(i, "protocolVersion"), 20).to_string())
            .collect();
        return Err(format!(
            "its agent card's JSONRPC interface is of protocol version {}, not 1.0",
            head(&versions.join(", "), 200)
        ));
    };
    let url = field(interface, "url");
    if endpoint::split(&url).is_none() || origin(&url).is_none() {
        return Err(format!(
            "its agent card's JSONRPC interface URL '{}' is not an http:// or https:// URL",
            head(&url, 200)
        ));
    }
    if !url.starts_with("https://") && !endpoint::plain_http_allowed(&url) {
        return Err(format!(
            "its agent card's JSONRPC interface URL '{}' is plain http on another machine; only https:// (or http:// to loopback) may carry the credential",
            head(&url, 200)
        ));
    }
    if origin(&url) != origin(card_url) && !reachable(&url) {
        return Err(format!(
            "its agent card's JSONRPC interface is at {}, another origin than the card's ({}), which capabilities.network.allow does not list",
            head(&origin(&url).unwrap_or_default(), 200),
            head(&origin(card_url).unwrap_or_default(), 200)
        ));
    }
    let streaming = obj
        .get("capabilities")
        .and_then(|c| c.get("streaming"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let credential = credential(obj, has_key)?;
    Ok(Card {
        name: head(&name, 200).to_string(),
        endpoint: url,
        streaming,
        credential,
    })
}

/// What the agent card's signature showed (A2A v1.0 §8.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CardSignature {
    /// Signed by the key `remote.card_key` pins.
    Pinned,
    /// Signed by the key its own signature names, and whole under it: the card was not altered
    /// after it was signed, though nobody vouches for whose key that is.
    Whole,
    /// Signed only in ways this runtime cannot check (another algorithm than EdDSA): accepted,
    /// unless a key is pinned.
    NotChecked,
    Unsigned,
}

/// Checks the card's signatures: under `pinned` when the manifest pins a key (a card not signed
/// by it is refused), else under the key a signature names, when it names an Ed25519 key (a card
/// altered after it was signed is refused). `Err` is the reason, as start-up prints it.
pub fn check_card_signature(body: &[u8], pinned: Option<&CardVerifyKey>) -> Result<CardSignature, String> {
    let card: Value = serde_json::from_slice(body).map_err(|_| "its agent card is not JSON".to_string())?;
    let signed = card
        .get("signatures")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty());
    if let Some(key) = pinned {
        return match card_sig::verify(&card, key) {
            Ok(()) => Ok(CardSignature::Pinned),
            Err(e) => Err(format!(
                "its agent card is not signed by the key remote.card_key names ({e}), so it is not trusted"
            )),
        };
    }
    if !signed {
        return Ok(CardSignature::Unsigned);
    }
    let Some(named) = card_sig::named_key(&card) else {
        return Ok(CardSignature::NotChecked);
    };
    match card_sig::verify(&card, &named) {
        Ok(()) => Ok(CardSignature::Whole),
        Err(card_sig::CardSigError::Malformed(_)) => Ok(CardSignature::NotChecked),
        Err(e) => Err(format!(
            "its agent card's signature does not hold ({e}): the card was altered after it was signed"
        )),
    }
}

/// `1.0`, or a 1.0 patch release such as `1.0.1`.
fn is_one_oh(v: &str) -> bool {
    v == "1.0"
        || v.strip_prefix("1.0.")
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The card's security: the schemes of its requirements (`securityRequirements`, A2A 1.0; the
/// older `security` too), each looked up in `securitySchemes`. The first requirement made of one
/// scheme this runtime can send (an HTTP bearer, or an API key in a header) decides; a card with
/// no requirement takes the key, if any, as a bearer.
fn credential(card: &serde_json::Map<String, Value>, has_key: bool) -> Result<Credential, String> {
    let schemes = card.get("securitySchemes").and_then(Value::as_object);
    let mut required: Vec<Vec<String>> = Vec::new();
    if let Some(list) = card.get("securityRequirements").and_then(Value::as_array) {
        for r in list {
            let names = r.get("schemes").and_then(Value::as_object).or_else(|| r.as_object());
            if let Some(names) = names {
                required.push(names.keys().cloned().collect());
            }
        }
    }
    if let Some(list) = card.get("security").and_then(Value::as_array) {
        for r in list {
            if let Some(names) = r.as_object() {
                required.push(names.keys().cloned().collect());
            }
        }
    }
    required.retain(|r| !r.is_empty());
    if required.is_empty() {
        return Ok(if has_key { Credential::Bearer } else { Credential::None });
    }
    let sendable = |name: &str| -> Option<Credential> {
        let s = schemes?.get(name)?;
        if let Some(http) = s.get("httpAuthSecurityScheme") {
            let scheme = http.get("scheme").and_then(Value::as_str).unwrap_or("");
            return scheme.eq_ignore_ascii_case("bearer").then_some(Credential::Bearer);
        }
        if let Some(key) = s.get("apiKeySecurityScheme") {
            let location = key.get("location").and_then(Value::as_str).unwrap_or("");
            let header = key.get("name").and_then(Value::as_str).unwrap_or("");
            let token = !header.is_empty()
                && header.len() <= 64
                && header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
            return (location.eq_ignore_ascii_case("header") && token).then(|| Credential::Header(header.to_string()));
        }
        // The older card shape: `{"type": "http", "scheme": "bearer"}`.
        match s.get("type").and_then(Value::as_str) {
            Some("http") => s
                .get("scheme")
                .and_then(Value::as_str)
                .filter(|v| v.eq_ignore_ascii_case("bearer"))
                .map(|_| Credential::Bearer),
            _ => None,
        }
    };
    let found = required
        .iter()
        .find_map(|r| if r.len() == 1 { sendable(&r[0]) } else { None });
    match found {
        Some(c) if has_key => Ok(c),
        Some(_) => Err(
            "its agent card requires a credential, and this capsule's murmur.yaml sets no remote.api_key".to_string(),
        ),
        None => {
            let names: Vec<String> = required.iter().map(|r| r.join("+")).collect();
            Err(format!(
                "its agent card requires security this runtime cannot satisfy ({}); only an HTTP bearer or an API key in a header can be sent",
                head(&names.join(", "), 200)
            ))
        }
    }
}

/// The `traceparent` every request forwarded for task `task_id` carries when no span of the
/// member's is exported (with spans exported it is the task span's): the caller's, unchanged, so
/// the remote agent's work joins the caller's trace under the caller's span (this member records
/// no span to be a parent); without one (or with one that is not W3C's), a trace of the task's
/// own: its id's 128 bits as the trace id, `span` as the parent id, not sampled. `None` only for
/// a `task_id` that is not a task id.
pub fn forwarded_traceparent(caller: Option<&str>, task_id: &str, span: u64) -> Option<String> {
    if let Some(tp) = caller.filter(|t| crate::trace::otel_env::well_formed_traceparent(t)) {
        return Some(tp.to_string());
    }
    crate::ids::check(crate::ids::IdKind::Task, task_id).ok()?;
    let trace = &task_id[crate::ids::IdKind::Task.prefix().len()..];
    // A zero parent id is invalid (W3C Trace Context §3.2.2.4).
    Some(format!("00-{trace}-{:016x}-00", span.max(1)))
}

/// A JSON string literal.
fn lit(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_default()
}

/// A SendMessage (`streaming: false`, answered when the task ends or asks, A2A's default) or
/// SendStreamingMessage body carrying `text`; `task_id` continues the remote task (an answer to
/// its question), `context_id` keeps the remote context.
pub fn message_body(
    streaming: bool,
    request_id: &str,
    message_id: &str,
    text: &str,
    task_id: Option<&str>,
    context_id: Option<&str>,
) -> String {
    message_body_within(streaming, request_id, message_id, text, (task_id, context_id), None)
}

/// [`message_body`] carrying the task's `limits` in the message's metadata under the limits
/// extension (`wire::limits`), when it has any.
pub fn message_body_within(
    streaming: bool,
    request_id: &str,
    message_id: &str,
    text: &str,
    (task_id, context_id): (Option<&str>, Option<&str>),
    limits: Option<&crate::wire::limits::Limits>,
) -> String {
    let mut message = format!(
        "{{\"messageId\":{},\"parts\":[{{\"text\":{}}}],\"role\":\"ROLE_USER\"",
        lit(message_id),
        lit(text)
    );
    if let Some(c) = context_id {
        message.push_str(&format!(",\"contextId\":{}", lit(c)));
    }
    if let Some(l) = limits.filter(|l| !l.is_none()) {
        message.push_str(&format!(
            ",\"metadata\":{{{}:{}}}",
            lit(crate::wire::limits::URI),
            l.to_json()
        ));
    }
    if let Some(t) = task_id {
        message.push_str(&format!(",\"taskId\":{}", lit(t)));
    }
    message.push('}');
    let method = if streaming {
        crate::wire::jsonrpc::Method::SendStreamingMessage.name()
    } else {
        crate::wire::jsonrpc::Method::SendMessage.name()
    };
    format!(
        "{{\"id\":{},\"jsonrpc\":\"2.0\",\"method\":\"{method}\",\"params\":{{\"message\":{message}}}}}",
        lit(request_id)
    )
}

/// The `result` of a JSON-RPC reply from the remote agent, or why there is none.
pub fn rpc_result(body: &[u8]) -> Result<Value, String> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|_| "the remote agent answered with something that is not JSON".to_string())?;
    rpc_value(&v)
}

/// [`rpc_result`] of a reply already parsed (one stream event). The one reading of what the
/// remote agent says: the result and the error's message are scrubbed of every credential the
/// member holds ([`crate::secret::scrub`]; the message before it is cut), so a status, an answer
/// or an error quoting the key goes no further.
pub fn rpc_value(v: &Value) -> Result<Value, String> {
    if let Some(e) = v.get("error") {
        let code = e.get("code").and_then(Value::as_i64).unwrap_or(0);
        let message = scrub(e.get("message").and_then(Value::as_str).unwrap_or("").to_string());
        return Err(format!(
            "the remote agent answered JSON-RPC error {code}: {}",
            head(&message, QUOTED)
        ));
    }
    match v.get("result") {
        Some(r) if r.is_object() => {
            let mut r = r.clone();
            scrub_json(&mut r);
            Ok(r)
        }
        _ => Err("the remote agent answered with something that is not a JSON-RPC reply".to_string()),
    }
}

/// How a remote task ended, as the member's board records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    Completed(String),
    Failed(String),
    /// The remote agent would not take the task (`TASK_STATE_REJECTED`, or authentication it
    /// asks for and this runtime cannot give): the member's task ends `rejected`, so its caller's
    /// call does too, as when a member's own door refuses a call.
    Rejected(String),
    Canceled,
}

/// What one reply or event told the member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum News {
    /// Nothing a caller sees changed.
    Quiet,
    /// The remote task is working; its status text, if any.
    Working(Option<String>),
    /// More answer text streamed (append it).
    Chunk(String),
    /// The remote task asks this question.
    Asked(String),
    Ended(Ended),
}

/// The remote task as its replies and events have shown it: its id and context, and its answer
/// (every artifact's text, appends merged, within [`MAX_ANSWER_BYTES`]).
#[derive(Debug, Default, Clone)]
pub struct RemoteTask {
    pub task_id: Option<String>,
    pub context_id: Option<String>,
    /// `(artifactId, text)` in the order first seen.
    artifacts: Vec<(String, String)>,
    bytes: usize,
    over: bool,
}

fn parts_text(parts: Option<&Value>) -> String {
    parts
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("")
        })
        .unwrap_or_default()
}

fn status_text(status: Option<&Value>) -> Option<String> {
    let t = parts_text(status?.get("message")?.get("parts"));
    (!t.is_empty()).then(|| head(&t, MAX_QUESTION).to_string())
}

/// Longest question relayed, in bytes (the board's own bound on a question).
pub const MAX_QUESTION: usize = 16 * 1024;

impl RemoteTask {
    /// The answer so far.
    pub fn answer(&self) -> String {
        self.artifacts.iter().map(|(_, t)| t.as_str()).collect()
    }

    /// Applies a `result`: a Task (a SendMessage or GetTask reply, a stream's first event), a
    /// Message, a status update or an artifact update. `Err` for a result that is none of these,
    /// or an answer past its bound.
    pub fn apply(&mut self, result: &Value) -> Result<News, String> {
        if let Some(task) = result.get("task").filter(|t| t.is_object()) {
            return self.task(task);
        }
        if let Some(message) = result.get("message").filter(|m| m.is_object()) {
            // An agent may answer with a message and no task: that is its whole answer.
            let text = parts_text(message.get("parts"));
            self.keep("message", &text, false)?;
            return Ok(News::Ended(Ended::Completed(self.answer())));
        }
        if let Some(update) = result.get("statusUpdate").filter(|u| u.is_object()) {
            self.ids(update.get("taskId"), update.get("contextId"));
            return Ok(self.status(update.get("status")));
        }
        if let Some(update) = result.get("artifactUpdate").filter(|u| u.is_object()) {
            self.ids(update.get("taskId"), update.get("contextId"));
            let artifact = update.get("artifact");
            let id = artifact
                .and_then(|a| a.get("artifactId"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let text = parts_text(artifact.and_then(|a| a.get("parts")));
            let append = update.get("append").and_then(Value::as_bool).unwrap_or(false);
            let added = self.keep(&id, &text, append)?;
            return Ok(if added.is_empty() {
                News::Quiet
            } else {
                News::Chunk(added)
            });
        }
        // A Task object itself, as some servers answer GetTask.
        if result.get("status").is_some() && result.get("id").is_some() {
            return self.task(result);
        }
        Err("the remote agent answered with a result that is neither a task, a message nor a task update".to_string())
    }

    fn ids(&mut self, task: Option<&Value>, context: Option<&Value>) {
        if let Some(t) = task.and_then(Value::as_str).filter(|t| !t.is_empty() && t.len() <= 256) {
            self.task_id.get_or_insert_with(|| t.to_string());
        }
        if let Some(c) = context
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty() && c.len() <= 256)
        {
            self.context_id.get_or_insert_with(|| c.to_string());
        }
    }

    fn task(&mut self, task: &Value) -> Result<News, String> {
        self.ids(task.get("id"), task.get("contextId"));
        if let Some(list) = task.get("artifacts").and_then(Value::as_array) {
            // A snapshot holds every artifact whole: it replaces what updates built.
            self.artifacts.clear();
            self.bytes = 0;
            for a in list {
                let id = a.get("artifactId").and_then(Value::as_str).unwrap_or("").to_string();
                self.keep(&id, &parts_text(a.get("parts")), true)?;
            }
        }
        Ok(self.status(task.get("status")))
    }

    /// Adds `text` to artifact `id` (appended, or replacing it); the text added for followers.
    fn keep(&mut self, id: &str, text: &str, append: bool) -> Result<String, String> {
        let at = self.artifacts.iter().position(|(a, _)| a == id);
        let old = at.map_or(0, |i| self.artifacts[i].1.len());
        let grown = if append {
            self.bytes + text.len()
        } else {
            self.bytes - old + text.len()
        };
        if grown > MAX_ANSWER_BYTES {
            self.over = true;
            return Err(format!("the remote agent's answer passed {MAX_ANSWER_BYTES} bytes"));
        }
        self.bytes = grown;
        match (at, append) {
            (Some(i), true) => self.artifacts[i].1.push_str(text),
            (Some(i), false) => self.artifacts[i].1 = text.to_string(),
            (None, _) => self.artifacts.push((id.to_string(), text.to_string())),
        }
        // Followers see appended text; a replaced artifact is shown whole at the end.
        Ok(if append || at.is_none() {
            text.to_string()
        } else {
            String::new()
        })
    }

    fn status(&self, status: Option<&Value>) -> News {
        let state = status
            .and_then(|s| s.get("state"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let text = status_text(status);
        match TaskState::from_wire(state) {
            Some(TaskState::Completed) => News::Ended(Ended::Completed(self.answer())),
            Some(TaskState::Failed) => News::Ended(Ended::Failed(match text {
                Some(t) => format!("the remote agent's task failed: {t}"),
                None => "the remote agent's task failed".to_string(),
            })),
            Some(TaskState::Rejected) => News::Ended(Ended::Rejected(match text {
                Some(t) => format!("the remote agent rejected the task: {t}"),
                None => "the remote agent rejected the task".to_string(),
            })),
            Some(TaskState::Canceled) => News::Ended(Ended::Canceled),
            Some(TaskState::InputRequired) => {
                News::Asked(text.unwrap_or_else(|| "the remote agent asks for input".to_string()))
            }
            Some(TaskState::Submitted | TaskState::Working) => News::Working(text),
            None if state == "TASK_STATE_AUTH_REQUIRED" => News::Ended(Ended::Rejected(
                "the remote agent asked for authentication this runtime cannot give".to_string(),
            )),
            None => News::Quiet,
        }
    }
}

/// What the member does after an HTTP status other than 200 from the remote agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Try again after this wait (429, 500, 502, 503, 504: the agent is busy or restarting).
    Retry(Duration),
    /// The task ends `rejected` with this text: the agent would not take it.
    Reject(String),
    /// The task fails with this text.
    Fail(String),
}

/// Maps an HTTP status and the wait its `retry-after` asks for (read by the runtime's one
/// reader, `outbound::retry_after`) to what the member does, with the call
/// statuses of docs/reference/capsules.md#calls-between-members in mind: 401/403 reject the task (the
/// credential was refused, as a door's 401/403 makes a call `rejected`); 429 and 500/502–504 are
/// retried after `retry-after` (or [`RETRY_FIRST`] doubling with `attempt`), within
/// [`RETRY_MAX`] and [`MAX_RETRIES`], after which a 429 rejects (the agent stayed busy, as a busy
/// callee's call ends `rejected`) and a 5xx fails; a redirect fails (never followed: it could
/// carry the credential elsewhere), and so does any other status.
pub fn refusal(status: u16, retry_after: Option<Duration>, attempt: u32) -> Refusal {
    let busy = status == 429;
    let give_up = |why: String| {
        if busy { Refusal::Reject(why) } else { Refusal::Fail(why) }
    };
    match status {
        401 | 403 => Refusal::Reject(format!(
            "the remote agent refused this member's credential (HTTP {status})"
        )),
        300..=399 => Refusal::Fail(format!(
            "the remote agent answered with a redirect (HTTP {status}), which is never followed: it could carry the credential to another origin"
        )),
        429 | 500 | 502 | 503 | 504 => {
            let what = if busy { "is rate limiting" } else { "is unavailable" };
            if attempt >= MAX_RETRIES {
                return give_up(format!(
                    "the remote agent {what} (HTTP {status}) and still was after {MAX_RETRIES} retries"
                ));
            }
            let wait = retry_after.unwrap_or_else(|| RETRY_FIRST.saturating_mul(1 << attempt.min(8)));
            if wait > RETRY_MAX {
                return give_up(format!(
                    "the remote agent {what} (HTTP {status}) and asks to wait longer than {} s",
                    RETRY_MAX.as_secs()
                ));
            }
            Refusal::Retry(wait)
        }
        _ => Refusal::Fail(format!("the remote agent answered HTTP {status}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_card_is_at_the_url_or_its_origins_well_known_path() {
        let rows = [
            (
                "https://a.example/.well-known/agent-card.json",
                Some("https://a.example/.well-known/agent-card.json"),
            ),
            (
                "https://a.example/agents/x/card.json?v=1",
                Some("https://a.example/agents/x/card.json?v=1"),
            ),
            (
                "https://a.example/rpc",
                Some("https://a.example/.well-known/agent-card.json"),
            ),
            (
                "http://127.0.0.1:8080/",
                Some("http://127.0.0.1:8080/.well-known/agent-card.json"),
            ),
            ("ftp://a.example/", None),
        ];
        for (url, want) in rows {
            assert_eq!(card_url(url).as_deref(), want, "{url}");
        }
        let origins = [
            ("https://A.example:443/x", Some("https://a.example")),
            ("http://127.0.0.1:80/", Some("http://127.0.0.1")),
            ("http://127.0.0.1:8080", Some("http://127.0.0.1:8080")),
            ("https://u@b.example/", Some("https://b.example")),
            ("https://", None),
        ];
        for (url, want) in origins {
            assert_eq!(origin(url).as_deref(), want, "{url}");
        }
    }

    fn card(extra: Value) -> Vec<u8> {
        let mut c = json!({
            "name": "far",
            "supportedInterfaces": [{"url": "https://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
            "capabilities": {"streaming": true},
        });
        if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                c.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_vec(&c).unwrap()
    }

    #[test]
    fn a_card_is_checked_for_version_binding_origin_and_security() {
        const AT: &str = "https://a.example/.well-known/agent-card.json";
        let never = |_: &str| false;
        let ok = check_card(&card(json!({})), AT, true, never).unwrap();
        assert_eq!(
            ok,
            Card {
                name: "far".into(),
                endpoint: "https://a.example/rpc".into(),
                streaming: true,
                credential: Credential::Bearer
            }
        );
        assert_eq!(
            check_card(&card(json!({})), AT, false, never).unwrap().credential,
            Credential::None
        );
        let bearer = json!({
            "securitySchemes": {"key": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
            "securityRequirements": [{"schemes": {"key": {"list": []}}}],
        });
        assert_eq!(
            check_card(&card(bearer.clone()), AT, true, never).unwrap().credential,
            Credential::Bearer
        );
        let header = json!({
            "securitySchemes": {"k": {"apiKeySecurityScheme": {"location": "header", "name": "X-API-Key"}}},
            "securityRequirements": [{"schemes": {"k": {}}}],
        });
        assert_eq!(
            check_card(&card(header), AT, true, never).unwrap().credential,
            Credential::Header("X-API-Key".into())
        );
        let other_origin = card(
            json!({"supportedInterfaces": [{"url": "https://b.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}),
        );
        assert_eq!(
            check_card(&other_origin, AT, true, |u| u.starts_with("https://b.example"))
                .unwrap()
                .endpoint,
            "https://b.example/rpc"
        );

        let refusals: [(Vec<u8>, bool, &str); 10] = [
            (b"<html>".to_vec(), true, "is not JSON"),
            (b"[1]".to_vec(), true, "not a JSON object"),
            (
                serde_json::to_vec(&json!({"name": "x", "protocolVersion": "0.3.0", "url": "https://a.example"}))
                    .unwrap(),
                true,
                "of A2A 0.3.0, not 1.0",
            ),
            (
                card(
                    json!({"supportedInterfaces": [{"url": "https://a.example/rpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]}),
                ),
                true,
                "no JSONRPC interface",
            ),
            (
                card(
                    json!({"supportedInterfaces": [{"url": "https://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}]}),
                ),
                true,
                "protocol version 0.3, not 1.0",
            ),
            (
                card(
                    json!({"supportedInterfaces": [{"url": "http://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}),
                ),
                true,
                "plain http on another machine",
            ),
            (other_origin.clone(), true, "another origin than the card's"),
            (card(bearer), false, "sets no remote.api_key"),
            (
                card(
                    json!({"securitySchemes": {"o": {"oauth2SecurityScheme": {}}}, "securityRequirements": [{"schemes": {"o": {}}}]}),
                ),
                true,
                "cannot satisfy (o)",
            ),
            (
                card(
                    json!({"securitySchemes": {"k": {"apiKeySecurityScheme": {"location": "query", "name": "k"}}}, "security": [{"k": []}]}),
                ),
                true,
                "cannot satisfy (k)",
            ),
        ];
        for (body, key, why) in refusals {
            let e = check_card(&body, AT, key, never).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        // What the card says is quoted cut, however much of it there is.
        let many: Vec<Value> = (0..1000)
            .map(|_| json!({"url": "https://a.example/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "9".repeat(20)}))
            .collect();
        let far = format!("https://{}.example/rpc", "b".repeat(10_000));
        for body in [
            card(json!({ "supportedInterfaces": many })),
            card(
                json!({"supportedInterfaces": [{"url": far, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]}),
            ),
        ] {
            let e = check_card(&body, AT, true, never).unwrap_err();
            assert!(e.len() <= 1024, "{} bytes: {}", e.len(), head(&e, 300));
        }
    }

    #[test]
    fn bodies_carry_the_text_and_continue_the_remote_task() {
        let b = message_body(true, "r1", "m1", "hi \"x\"", None, None);
        assert_eq!(
            b,
            r#"{"id":"r1","jsonrpc":"2.0","method":"SendStreamingMessage","params":{"message":{"messageId":"m1","parts":[{"text":"hi \"x\""}],"role":"ROLE_USER"}}}"#
        );
        let b: Value = serde_json::from_str(&message_body(false, "r2", "m2", "yes", Some("t9"), Some("c9"))).unwrap();
        assert!(b["params"]["message"].get("metadata").is_none());
        let limits = crate::wire::limits::Limits {
            deadline_ms: Some(1_800_000_000_000),
            budget: Some(250),
        };
        let within = message_body_within(false, "r3", "m3", "go", (None, None), Some(&limits));
        let w: Value = serde_json::from_str(&within).unwrap();
        assert_eq!(
            crate::wire::limits::read(w["params"]["message"].get("metadata")),
            Ok(Some(limits))
        );
        assert!(
            within.contains(r#""metadata":{"urn:mur:a2a:limits:v1":{"budgetTokens":250,"deadlineMs":1800000000000}}"#)
        );
        assert_eq!(b["method"], "SendMessage");
        assert!(
            b["params"].get("configuration").is_none(),
            "answered when the task ends: {b}"
        );
        assert_eq!(
            (
                b["params"]["message"]["taskId"].as_str(),
                b["params"]["message"]["contextId"].as_str()
            ),
            (Some("t9"), Some("c9"))
        );
    }

    #[test]
    fn replies_and_events_become_what_the_board_shows() {
        let mut t = RemoteTask::default();
        let rows: Vec<(Value, Result<News, ()>)> = vec![
            (
                json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                Ok(News::Working(None)),
            ),
            (
                json!({"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_WORKING", "message": {"parts": [{"text": "thinking"}]}}}}),
                Ok(News::Working(Some("thinking".into()))),
            ),
            (
                json!({"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "Hel"}]}}}),
                Ok(News::Chunk("Hel".into())),
            ),
            (
                json!({"artifactUpdate": {"taskId": "t1", "append": true, "artifact": {"artifactId": "a", "parts": [{"text": "lo"}]}}}),
                Ok(News::Chunk("lo".into())),
            ),
            (
                json!({"statusUpdate": {"status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": {"parts": [{"text": "Which?"}]}}}}),
                Ok(News::Asked("Which?".into())),
            ),
            (
                json!({"statusUpdate": {"status": {"state": "TASK_STATE_COMPLETED"}}}),
                Ok(News::Ended(Ended::Completed("Hello".into()))),
            ),
            (json!({"nonsense": 1}), Err(())),
        ];
        for (result, want) in rows {
            let got = t.apply(&result).map_err(|_| ());
            assert_eq!(got, want, "{result}");
        }
        assert_eq!(
            (t.task_id.as_deref(), t.context_id.as_deref()),
            (Some("t1"), Some("c1"))
        );

        let ends = [
            (
                json!({"task": {"id": "x", "status": {"state": "TASK_STATE_FAILED", "message": {"parts": [{"text": "boom"}]}}}}),
                News::Ended(Ended::Failed("the remote agent's task failed: boom".into())),
            ),
            (
                json!({"task": {"id": "x", "status": {"state": "TASK_STATE_REJECTED"}}}),
                News::Ended(Ended::Rejected("the remote agent rejected the task".into())),
            ),
            (
                json!({"task": {"id": "x", "status": {"state": "TASK_STATE_CANCELED"}}}),
                News::Ended(Ended::Canceled),
            ),
            (
                json!({"task": {"id": "x", "status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": [{"artifactId": "r", "parts": [{"text": "A"}, {"text": "B"}]}]}}),
                News::Ended(Ended::Completed("AB".into())),
            ),
            (
                json!({"message": {"messageId": "m", "parts": [{"text": "direct"}]}}),
                News::Ended(Ended::Completed("direct".into())),
            ),
            (
                json!({"id": "x", "status": {"state": "TASK_STATE_AUTH_REQUIRED"}}),
                News::Ended(Ended::Rejected(
                    "the remote agent asked for authentication this runtime cannot give".into(),
                )),
            ),
        ];
        for (result, want) in ends {
            assert_eq!(RemoteTask::default().apply(&result), Ok(want), "{result}");
        }

        let mut huge = RemoteTask::default();
        let chunk = "x".repeat(MAX_ANSWER_BYTES / 2 + 1);
        let event =
            json!({"artifactUpdate": {"append": true, "artifact": {"artifactId": "a", "parts": [{"text": chunk}]}}});
        assert!(huge.apply(&event).is_ok());
        assert!(huge.apply(&event).unwrap_err().contains("passed"));

        assert!(rpc_result(b"garbage").unwrap_err().contains("not JSON"));
        assert!(
            rpc_result(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Task not found"}}"#)
                .unwrap_err()
                .contains("-32001: Task not found")
        );
        assert!(rpc_result(br#"{"jsonrpc":"2.0","id":1,"result":3}"#).is_err());
    }

    #[test]
    fn a_reply_quoting_the_members_key_is_read_without_it() {
        let key = crate::secret::Secret::new("far-wire-key-6b0d2e".into());
        let failed = json!({"jsonrpc": "2.0", "id": 1, "result": {"task": {"id": "t", "status": {
            "state": "TASK_STATE_FAILED",
            "message": {"parts": [{"text": "bad credential Bearer far-wire-key-6b0d2e"}]},
        }}}});
        let result = rpc_value(&failed).unwrap();
        assert_eq!(
            RemoteTask::default().apply(&result),
            Ok(News::Ended(Ended::Failed(
                "the remote agent's task failed: bad credential Bearer [redacted]".into()
            )))
        );
        let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"no Authorization: Bearer far-wire-key-6b0d2e"}}"#;
        assert_eq!(
            rpc_result(error).unwrap_err(),
            "the remote agent answered JSON-RPC error -32603: no Authorization: Bearer [redacted]"
        );
        drop(key);
    }

    #[test]
    fn a_forwarded_request_continues_the_callers_trace_or_the_tasks_own() {
        const TASK: &str = "tsk_0190f5a0b1c27d3e8f90a1b2c3d4e5f6";
        const CALLER: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let own = "00-0190f5a0b1c27d3e8f90a1b2c3d4e5f6-00000000000000ab-00";
        let rows: [(Option<&str>, &str, u64, Option<&str>); 6] = [
            (Some(CALLER), TASK, 0xab, Some(CALLER)),
            (None, TASK, 0xab, Some(own)),
            // Not W3C's (uppercase hex): the task's own trace instead.
            (
                Some("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"),
                TASK,
                0xab,
                Some(own),
            ),
            (Some("garbage"), TASK, 0xab, Some(own)),
            (
                None,
                TASK,
                0,
                Some("00-0190f5a0b1c27d3e8f90a1b2c3d4e5f6-0000000000000001-00"),
            ),
            (None, "tsk_nothex", 1, None),
        ];
        for (caller, task, span, want) in rows {
            let got = forwarded_traceparent(caller, task, span);
            assert_eq!(got.as_deref(), want, "{caller:?} {task} {span}");
            if let Some(tp) = got {
                assert!(crate::trace::otel_env::well_formed_traceparent(&tp), "{tp}");
            }
        }
    }

    #[test]
    fn http_refusals_fail_or_wait_within_their_bounds() {
        let s = |secs: u64| Refusal::Retry(Duration::from_secs(secs));
        let secs = |n: u64| Some(Duration::from_secs(n));
        let rows: [(u16, Option<Duration>, u32, Refusal); 13] = [
            (429, secs(2), 0, s(2)),
            (503, None, 0, Refusal::Retry(RETRY_FIRST)),
            (503, None, 2, Refusal::Retry(RETRY_FIRST * 4)),
            // A date already past (or `0`): no wait, as the one reader reads it for every caller.
            (502, secs(0), 1, Refusal::Retry(Duration::ZERO)),
            (503, Some(Duration::from_millis(1500)), 0, Refusal::Retry(Duration::from_millis(1500))),
            (429, secs(61), 0, Refusal::Reject("the remote agent is rate limiting (HTTP 429) and asks to wait longer than 60 s".into())),
            (429, secs(1), MAX_RETRIES, Refusal::Reject("the remote agent is rate limiting (HTTP 429) and still was after 4 retries".into())),
            (503, secs(61), 0, Refusal::Fail("the remote agent is unavailable (HTTP 503) and asks to wait longer than 60 s".into())),
            (500, None, MAX_RETRIES, Refusal::Fail("the remote agent is unavailable (HTTP 500) and still was after 4 retries".into())),
            (401, None, 0, Refusal::Reject("the remote agent refused this member's credential (HTTP 401)".into())),
            (403, None, 0, Refusal::Reject("the remote agent refused this member's credential (HTTP 403)".into())),
            (307, None, 0, Refusal::Fail("the remote agent answered with a redirect (HTTP 307), which is never followed: it could carry the credential to another origin".into())),
            (404, None, 0, Refusal::Fail("the remote agent answered HTTP 404".into())),
        ];
        for (status, after, attempt, want) in rows {
            assert_eq!(refusal(status, after, attempt), want, "{status} {after:?} {attempt}");
        }
    }

    #[test]
    fn a_card_signature_is_checked_under_the_pinned_key_or_the_key_it_names() {
        let key = card_sig::CardKey::from_seed(&[7; 32]);
        let other = card_sig::CardKey::from_seed(&[8; 32]).public();
        let bare: Value = serde_json::from_slice(&card(json!({}))).unwrap();
        let signed = key.sign(&bare);
        let bytes = |v: &Value| serde_json::to_vec(v).unwrap();
        let mut altered = signed.clone();
        altered["name"] = json!("someone else");
        // A signature by an algorithm this runtime does not check.
        let mut foreign = bare.clone();
        foreign["signatures"] = json!([{"protected": "eyJhbGciOiJFUzI1NiJ9", "signature": "AAAA"}]);
        let pinned = Some(key.public());
        type Row<'a> = (&'a str, Vec<u8>, Option<CardVerifyKey>, Result<CardSignature, &'a str>);
        let rows: Vec<Row> = vec![
            (
                "pinned, signed by it",
                bytes(&signed),
                pinned,
                Ok(CardSignature::Pinned),
            ),
            (
                "pinned, signed by another",
                bytes(&signed),
                Some(other),
                Err("not signed by the key remote.card_key names"),
            ),
            (
                "pinned, unsigned",
                bytes(&bare),
                pinned,
                Err("not signed by the key remote.card_key names"),
            ),
            (
                "pinned, altered",
                bytes(&altered),
                pinned,
                Err("not signed by the key remote.card_key names"),
            ),
            (
                "pinned, foreign algorithm",
                bytes(&foreign),
                pinned,
                Err("not signed by the key remote.card_key names"),
            ),
            ("unpinned, signed", bytes(&signed), None, Ok(CardSignature::Whole)),
            (
                "unpinned, altered after signing",
                bytes(&altered),
                None,
                Err("the card was altered after it was signed"),
            ),
            ("unpinned, unsigned", bytes(&bare), None, Ok(CardSignature::Unsigned)),
            (
                "unpinned, foreign algorithm",
                bytes(&foreign),
                None,
                Ok(CardSignature::NotChecked),
            ),
            ("not JSON", b"{".to_vec(), None, Err("not JSON")),
        ];
        for (what, body, pin, want) in rows {
            let got = check_card_signature(&body, pin.as_ref());
            match (got, want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{what}"),
                (Err(g), Err(w)) => assert!(g.contains(w), "{what}: {g}"),
                (g, w) => panic!("{what}: got {g:?}, want {w:?}"),
            }
        }
    }
}
