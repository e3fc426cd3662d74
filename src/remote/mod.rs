//! Remote capsules (docs/reference/capsules.md#remote-capsules): a member whose door forwards
//! each task it accepts to an A2A v1.0 agent someone else runs. What the card must be, the
//! bodies sent and the reading of the replies are the core's (`wire::remote`); `client.rs` moves
//! the bytes.
//!
//! Invariants:
//! - **Readiness is the card's check** ([`prepare`]): the credential variable is read, and the
//!   card fetched, parsed and checked, before the member reports ready; otherwise start-up
//!   refuses with E-RUN-071 or E-RUN-070, naming why, and the launcher names the member.
//! - **The credential goes to the remote agent only**: read once into zeroizing memory, sent in
//!   a header marked sensitive to the card's JSON-RPC interface (the card's origin, or one
//!   `capabilities.network.allow` lists), never with the card's GET, never redirected, never in
//!   an error, a record or a `Debug` output. Callers' tokens stay at the member's door.
//! - **What the remote agent says back goes on without the credential**: every reply is read
//!   through `wire::remote::rpc_value`, which scrubs what the member holds (`secret::scrub`),
//!   so a failed status or an error quoting the key reaches no caller, record, log or span.
//! - **Every size and wait the remote controls is bounded**: card, reply, event and answer in
//!   bytes (`wire::remote`), each task by `remote.timeout`, the formation's deadline and
//!   cancellation (which is forwarded as CancelTask).

mod client;

use std::sync::Arc;
use std::time::{Duration, Instant};

use awc::http::header::{AUTHORIZATION, HeaderName, HeaderValue};
use zeroize::Zeroizing;

use crate::secret::Secret;

use crate::diag::{self, Diagnostic, shown};
use crate::manifest::Manifest;
use crate::tasks::{Asked, Asker, Board, TaskOutcome, Work};
use crate::timing::Timing;
use crate::wire::jsonrpc::Method;
use crate::wire::remote::{self as wire, Credential, Ended, News, Refusal, RemoteTask};

use client::Client;

/// A remote capsule's agent, checked: what each task is forwarded with. Plain data, so it
/// crosses to the executor's arbiter; each task makes its own HTTP client there.
pub struct RemoteAgent {
    card: wire::Card,
    /// The credential's header, marked sensitive; `None` when nothing is sent.
    credential: Option<(HeaderName, HeaderValue)>,
    timeout: Duration,
    connect: Duration,
    /// The member's name, first of `askedBy` when the remote agent asks.
    member: Option<String>,
    /// The key itself, held so that the member-wide scrub replaces it in every reply.
    _key: Option<Secret>,
}

impl std::fmt::Debug for RemoteAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteAgent")
            .field("endpoint", &self.card.endpoint)
            .field("streaming", &self.card.streaming)
            .field(
                "credential",
                &self.credential.as_ref().map(|(k, _)| (k.as_str(), "[redacted]")),
            )
            .finish_non_exhaustive()
    }
}

/// The credential of `manifest`'s remote agent, read from `env` (`None` when the manifest
/// names no variable). An unset or empty variable is E-RUN-071, at start-up, not at the first
/// task.
pub fn credential(
    capsule: &str,
    manifest: &Manifest,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, Diagnostic> {
    let Some(var) = manifest.remote.as_ref().and_then(|r| r.api_key_var.as_deref()) else {
        return Ok(None);
    };
    match env(var).filter(|v| !v.is_empty()) {
        Some(v) => Ok(Some(Secret::new(v))),
        None => Err(Diagnostic::new(
            diag::E_RUN_071,
            format!(
                "capsule '{capsule}' cannot be run: its murmur.yaml names ${{{var}}} as the remote agent's credential, and {var} is not set in this environment"
            ),
        )
        .with_hint(format!("export {var}=<the remote agent's key> before `mur run`"))),
    }
}

/// Readiness (docs/reference/capsules.md#remote-capsules): the credential read, the card fetched
/// and checked, within the bound `within`, on an actix system of its own (ended before the
/// session's starts). `capsule` is `<scope>/<name>@<version>`, for the messages.
pub fn prepare(
    capsule: &str,
    manifest: &Manifest,
    member: Option<String>,
    within: Duration,
) -> Result<RemoteAgent, Diagnostic> {
    let Some(remote) = &manifest.remote else {
        return Err(not_ready(capsule, "its murmur.yaml has no remote block".to_string()));
    };
    let key = credential(capsule, manifest, |v| std::env::var(v).ok())?;
    let Some(card_url) = wire::card_url(&remote.url) else {
        return Err(not_ready(
            capsule,
            format!("its remote.url '{}' is not an http(s) URL", shown(&remote.url)),
        ));
    };
    let allow = crate::address::allow::AllowList::parse(&manifest.network_allow);
    let connect = within.min(Duration::from_secs(10));
    let fetched = actix_rt::System::new().block_on(async {
        let client = Client::new(&card_url, connect)?;
        client.get(&card_url, wire::MAX_CARD_BYTES, within).await
    });
    let host = crate::manifest::endpoint::split(&card_url)
        .map_or("?", |e| e.authority)
        .to_string();
    let body = match fetched {
        Ok((200, body)) => body,
        Ok((status, _)) if (300..400).contains(&status) => {
            return Err(not_ready(
                capsule,
                format!(
                    "its agent card at {card_url} answered with a redirect (HTTP {status}), which is never followed"
                ),
            ));
        }
        Ok((status, _)) => {
            return Err(not_ready(
                capsule,
                format!("its agent card at {card_url} answered HTTP {status}"),
            ));
        }
        Err(why) => {
            return Err(not_ready(
                capsule,
                format!("its agent card at {card_url} cannot be fetched from {host}: {why}"),
            ));
        }
    };
    let card = wire::check_card(&body, &card_url, key.is_some(), |u| allow.allows_url(u))
        .map_err(|why| not_ready(capsule, why))?;
    // The manifest's key was checked when it was parsed.
    let pinned = remote
        .card_key
        .as_deref()
        .and_then(crate::card_sig::CardVerifyKey::from_b64);
    wire::check_card_signature(&body, pinned.as_ref()).map_err(|why| not_ready(capsule, why))?;
    let credential = match (&card.credential, &key) {
        (Credential::None, _) | (_, None) => None,
        (Credential::Bearer, Some(k)) => Some((
            AUTHORIZATION,
            sensitive(&Zeroizing::new(format!("Bearer {}", k.reveal())))?,
        )),
        (Credential::Header(name), Some(k)) => {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                not_ready(
                    capsule,
                    "its agent card names an API key header that is not a header name".into(),
                )
            })?;
            Some((name, sensitive(k.reveal())?))
        }
    };
    Ok(RemoteAgent {
        card,
        credential,
        timeout: Duration::from_secs(remote.timeout_secs).min(crate::timing::MAX_KNOB),
        connect,
        member,
        _key: key,
    })
}

/// A header value that is never printed (its bytes are the credential).
fn sensitive(value: &str) -> Result<HeaderValue, Diagnostic> {
    let mut v = HeaderValue::from_str(value).map_err(|_| {
        Diagnostic::new(
            diag::E_RUN_071,
            "the remote agent's credential holds characters a header cannot carry",
        )
        .with_hint("check the variable's value: a key is one line of visible ASCII")
    })?;
    v.set_sensitive(true);
    Ok(v)
}

fn not_ready(capsule: &str, why: String) -> Diagnostic {
    Diagnostic::new(
        diag::E_RUN_070,
        format!("capsule '{capsule}' is not ready: the remote agent cannot be used: {why}"),
    )
}

impl RemoteAgent {
    /// Whether tasks go out as SendStreamingMessage (the card offers streaming).
    pub fn streaming(&self) -> bool {
        self.card.streaming
    }

    fn headers(&self, traceparent: Option<&str>) -> Vec<(HeaderName, HeaderValue)> {
        let mut h: Vec<(HeaderName, HeaderValue)> = self.credential.iter().cloned().collect();
        if let Some(tp) = traceparent.and_then(|t| HeaderValue::from_str(t).ok()) {
            h.push((HeaderName::from_static("traceparent"), tp));
        }
        h
    }
}

thread_local! {
    /// This thread's client for the remote agent, by endpoint: its connections outlive a task,
    /// so the next task's requests reuse them (`client.rs`).
    static CLIENT: std::cell::RefCell<Option<(String, std::rc::Rc<Client>)>> = const { std::cell::RefCell::new(None) };
}

/// The client `agent`'s tasks share on this thread (awc clients are not `Send`).
fn client_for(agent: &RemoteAgent) -> Result<std::rc::Rc<Client>, String> {
    CLIENT.with(|slot| {
        let mut slot = slot.borrow_mut();
        if let Some((endpoint, c)) = slot.as_ref()
            && *endpoint == agent.card.endpoint
        {
            return Ok(std::rc::Rc::clone(c));
        }
        let c = std::rc::Rc::new(Client::new(&agent.card.endpoint, agent.connect)?);
        *slot = Some((agent.card.endpoint.clone(), std::rc::Rc::clone(&c)));
        Ok(c)
    })
}

/// A random W3C parent id for a task's own trace (zero, the one invalid value, if the OS has no
/// randomness to give: `forwarded_traceparent` makes that 1).
fn span_id() -> u64 {
    let mut b = [0u8; 8];
    match getrandom::getrandom(&mut b) {
        Ok(()) => u64::from_le_bytes(b),
        Err(_) => 0,
    }
}

/// How long a cancelled task waits for the remote task's id, so the cancel can be forwarded.
const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// How one exchange (a message sent, its replies followed) came out.
enum Step {
    End(Ended),
    /// The remote task asks this question.
    Ask(String),
}

/// How an exchange stopped short of a step.
enum Stop {
    Canceled,
    TimedOut,
    Failed(String),
    /// The remote agent would not take the task (its credential refused, busy past the bound).
    Rejected(String),
}

/// Runs one task on the remote agent: forwards it, relays its states, streamed answer text and
/// question onto `board`, forwards the answer to its question, and ends as the remote task did.
/// `asker`: how the task asks its own caller (with `lifecycle.input_timeout_secs`; else
/// `remote.timeout` bounds the wait).
pub async fn run_task(agent: &RemoteAgent, work: &Work, board: &Arc<Board>, asker: Option<Asker>) -> TaskOutcome {
    let deadline = Instant::now() + agent.timeout;
    let client = match client_for(agent) {
        Ok(c) => c,
        Err(why) => return TaskOutcome::Failed(format!("the remote agent cannot be reached: {why}")),
    };
    let asker =
        asker.unwrap_or_else(|| Asker::new(Arc::clone(board), &work.task_id, agent.member.clone(), agent.timeout));
    // Every request carries the task's trace context, whether or not spans are exported.
    let traceparent = crate::otel::task_traceparent(&work.task_id)
        .or_else(|| wire::forwarded_traceparent(work.traceparent.as_deref(), &work.task_id, span_id()));
    // The task's deadline and budget go with it, under the limits extension; the deadline is
    // this member's to keep whatever the agent does (the executor cancels the task at it, and
    // the cancel is forwarded).
    let limits = match &work.grant {
        Some(g) => Some(crate::wire::limits::Limits {
            deadline_ms: g.deadline_ms,
            budget: g.budget,
        }),
        None => work.limits,
    }
    .filter(|l| !l.is_none());
    let mut headers = agent.headers(traceparent.as_deref());
    if limits.is_some() {
        headers.push((
            HeaderName::from_static("a2a-extensions"),
            HeaderValue::from_static(crate::wire::limits::URI),
        ));
    }
    let x = Exchange {
        agent,
        client: &client,
        headers: &headers,
        limits: limits.as_ref(),
        board,
        task_id: &work.task_id,
        poll: Timing::get().answer_poll,
        learned: std::cell::RefCell::new(None),
    };
    let mut remote = RemoteTask::default();
    let mut text = work.text.clone();
    let mut round = 0u32;
    let stop = loop {
        round += 1;
        let step = {
            let exchange = x.run(&mut remote, &text, round, deadline);
            tokio::pin!(exchange);
            tokio::select! {
                biased;
                _ = work.cancel.cancelled() => {
                    // Cancelled before the remote task was named: its name is on its way (the
                    // stream's first event), and without it the cancel cannot be forwarded.
                    let grace = Instant::now() + CANCEL_GRACE.min(left(deadline));
                    let _ = tokio::time::timeout_at(grace.into(), async {
                        while x.learned().is_none() {
                            tokio::select! {
                                _ = &mut exchange => break,
                                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
                            }
                        }
                    })
                    .await;
                    Err(Stop::Canceled)
                }
                s = &mut exchange => s,
                _ = tokio::time::sleep_until(deadline.into()) => Err(Stop::TimedOut),
            }
        };
        let question = match step {
            Ok(Step::End(Ended::Completed(answer))) => return TaskOutcome::Completed(answer),
            Ok(Step::End(Ended::Failed(why))) => return TaskOutcome::Failed(why),
            Ok(Step::End(Ended::Rejected(why))) => return TaskOutcome::Rejected(why),
            Ok(Step::End(Ended::Canceled)) => return TaskOutcome::Canceled,
            Ok(Step::Ask(q)) => q,
            Err(stop) => break stop,
        };
        if x.learned().is_none() {
            break Stop::Failed("the remote agent asked a question without naming its task".to_string());
        }
        // The question is this task's now: the caller answers at this member's door.
        let asked = tokio::select! {
            biased;
            _ = work.cancel.cancelled() => Asked::Ended,
            a = asker.ask(&question, &[]) => a,
            _ = tokio::time::sleep_until(deadline.into()) => Asked::TimedOut,
        };
        match asked {
            Asked::Answered { text: answer, .. } => text = answer,
            Asked::TimedOut => {
                break Stop::Failed(crate::tasks::ask::no_answer_text(asker.timeout()));
            }
            Asked::Ended => break Stop::Canceled,
        }
    };
    x.cancel_remote().await;
    match stop {
        Stop::Canceled => TaskOutcome::Canceled,
        Stop::TimedOut => TaskOutcome::Failed(format!(
            "the remote agent did not finish within remote.timeout ({} s); its task was cancelled",
            agent.timeout.as_secs()
        )),
        Stop::Failed(why) => TaskOutcome::Failed(why),
        Stop::Rejected(why) => TaskOutcome::Rejected(why),
    }
}

/// One task's requests to the remote agent.
struct Exchange<'a> {
    agent: &'a RemoteAgent,
    client: &'a Client,
    headers: &'a [(HeaderName, HeaderValue)],
    /// The task's deadline and budget, sent with each message.
    limits: Option<&'a crate::wire::limits::Limits>,
    board: &'a Arc<Board>,
    task_id: &'a str,
    poll: Duration,
    /// The remote task's id, once a reply named it: what a cancel is forwarded to.
    learned: std::cell::RefCell<Option<String>>,
}

impl Exchange<'_> {
    /// Sends `text` (continuing the remote task once it has an id) and follows the replies until
    /// the remote task ends or asks.
    async fn run(&self, remote: &mut RemoteTask, text: &str, round: u32, deadline: Instant) -> Result<Step, Stop> {
        let streaming = self.agent.streaming();
        let request_id = format!("{}-{round}", self.task_id);
        let message_id = format!("msg_{}-{round}", self.task_id);
        let body = wire::message_body_within(
            streaming,
            &request_id,
            &message_id,
            text,
            (remote.task_id.as_deref(), remote.context_id.as_deref()),
            self.limits,
        );
        let head = self.send(body, streaming, deadline).await?;
        if head.stream {
            let mut events = head.events(wire::MAX_EVENT_BYTES);
            loop {
                let Some(batch) = events.next().await.map_err(Stop::Failed)? else {
                    break;
                };
                for event in batch {
                    let result = wire::rpc_value(&event).map_err(Stop::Failed)?;
                    if let Some(step) = self.apply(remote, &result)? {
                        return Ok(step);
                    }
                }
            }
            // The stream ended with the task live (a server that closes streams early): poll.
            if remote.task_id.is_none() {
                return Err(Stop::Failed(
                    "the remote agent's stream ended before it named a task or an answer".to_string(),
                ));
            }
        } else {
            let body = head
                .body(wire::MAX_REPLY_BYTES, left(deadline))
                .await
                .map_err(Stop::Failed)?;
            let result = wire::rpc_result(&body).map_err(Stop::Failed)?;
            if let Some(step) = self.apply(remote, &result)? {
                return Ok(step);
            }
            if remote.task_id.is_none() {
                return Err(Stop::Failed(
                    "the remote agent answered with a task without an id".to_string(),
                ));
            }
        }
        self.follow(remote, deadline).await
    }

    /// GetTask every poll interval until the remote task ends or asks.
    async fn follow(&self, remote: &mut RemoteTask, deadline: Instant) -> Result<Step, Stop> {
        let id = remote.task_id.clone().unwrap_or_default();
        let mut n = 0u32;
        loop {
            tokio::time::sleep(self.poll).await;
            n += 1;
            let body = crate::wire::calls::task_method_body(Method::GetTask, &format!("{}-get-{n}", self.task_id), &id);
            let head = self.send(body, false, deadline).await?;
            let bytes = head
                .body(wire::MAX_REPLY_BYTES, left(deadline))
                .await
                .map_err(Stop::Failed)?;
            let result = wire::rpc_result(&bytes).map_err(Stop::Failed)?;
            if let Some(step) = self.apply(remote, &result)? {
                return Ok(step);
            }
        }
    }

    fn learned(&self) -> Option<String> {
        self.learned.borrow().clone()
    }

    /// Applies a result to `remote` and shows its news; `Some` when the exchange is over.
    fn apply(&self, remote: &mut RemoteTask, result: &serde_json::Value) -> Result<Option<Step>, Stop> {
        let news = remote.apply(result).map_err(Stop::Failed);
        if self.learned.borrow().is_none() && remote.task_id.is_some() {
            *self.learned.borrow_mut() = remote.task_id.clone();
        }
        Ok(self.show(news?))
    }

    /// What a piece of news changes on the board; `Some` when the exchange is over.
    fn show(&self, news: News) -> Option<Step> {
        match news {
            News::Quiet => None,
            News::Working(note) => {
                self.board.set_working(self.task_id, note.as_deref());
                None
            }
            News::Chunk(text) => {
                self.board.stream_text(self.task_id, 1, &text);
                None
            }
            News::Asked(q) => Some(Step::Ask(q)),
            News::Ended(e) => Some(Step::End(e)),
        }
    }

    /// POSTs `body`, retrying a 429 or 5xx after its `retry-after` while the deadline allows;
    /// the head of a 200 reply.
    async fn send(&self, body: String, stream: bool, deadline: Instant) -> Result<client::Head, Stop> {
        let mut attempt = 0u32;
        loop {
            let head = self
                .client
                .post(
                    &self.agent.card.endpoint,
                    body.clone(),
                    stream,
                    self.headers,
                    left(deadline),
                )
                .await
                .map_err(|why| Stop::Failed(format!("the remote agent cannot be reached: {why}")))?;
            if head.status == 200 {
                return Ok(head);
            }
            match wire::refusal(head.status, head.retry_after, attempt) {
                Refusal::Fail(why) => return Err(Stop::Failed(why)),
                Refusal::Reject(why) => return Err(Stop::Rejected(why)),
                Refusal::Retry(wait) if Instant::now() + wait >= deadline => {
                    let why = format!(
                        "the remote agent answered HTTP {} and asked to wait {} ms, past this task's bound",
                        head.status,
                        wait.as_millis()
                    );
                    // Busy past the bound is a refusal, as a busy callee's call ends `rejected`.
                    return Err(if head.status == 429 {
                        Stop::Rejected(why)
                    } else {
                        Stop::Failed(why)
                    });
                }
                Refusal::Retry(wait) => {
                    tracing::debug!(
                        status = head.status,
                        wait_ms = wait.as_millis() as u64,
                        "the remote agent asks to retry"
                    );
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
            }
        }
    }

    /// Forwards the end of this task to the remote one (CancelTask), bounded; its answer does
    /// not matter.
    async fn cancel_remote(&self) {
        let Some(id) = self.learned() else { return };
        let body = crate::wire::calls::task_method_body(Method::CancelTask, &format!("{}-cancel", self.task_id), &id);
        let within = Timing::get().answer_request.min(Duration::from_secs(5));
        if let Ok(head) = self
            .client
            .post(&self.agent.card.endpoint, body, false, self.headers, within)
            .await
        {
            let _ = head.body(wire::MAX_REPLY_BYTES, within).await;
        }
    }
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
