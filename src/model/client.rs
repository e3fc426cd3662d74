//! One provider endpoint over awc (docs/reference/capsules.md#model-capsules): credential headers,
//! timeouts (connect 10 s, request 300 s) and retries: 429, 5xx (529 included) and transport
//! errors, up to four times, after the wait the provider asks for (`retry-after-ms`, `retry-after`)
//! or a jittered backoff (1 s doubling), never a single wait over 60 s nor one that ends past the
//! task's deadline. Every retry is reported to the caller, which traces it.
//!
//! awc futures are not `Send`: a [`ProviderClient`] is made inside the task that uses it, on the
//! arbiter that runs the task, and never crosses threads. The API key goes only into the request
//! header, marked sensitive; no error text, log line or trace carries it.

use std::time::{Duration, Instant, SystemTime};

use awc::http::header::{CONTENT_TYPE, HeaderValue};

use futures_util::StreamExt;
use mur_core::wire::provider::dialect;

use super::ModelConfig;
use super::stream::StreamReader;
use super::wire::{self, GiveUp, Reply, RetryPolicy, WaitSource};
use crate::manifest::Provider;
use crate::timing::Timing;

/// Largest reply body read; a provider reply is far smaller, this only bounds memory.
const MAX_BODY: usize = 32 << 20;

/// Retry and timeout settings of provider requests; tests shorten them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    pub policy: RetryPolicy,
    /// The task's deadline (the session's inherited one): no retry waits past it.
    pub deadline: Option<Instant>,
    /// Bound on opening a connection (TLS handshake included).
    pub connect: Duration,
    /// Bound on one attempt, from sending the request to reading the whole reply (the last event
    /// of a streamed one included).
    pub request: Duration,
    /// Bound on the silence between two events of a streamed reply.
    pub idle: Duration,
}

impl Default for Retry {
    /// The spec's values (docs/reference/capsules.md#model-capsules,
    /// docs/reference/formation.md#timing).
    fn default() -> Self {
        Retry::from_timing(&Timing::SPEC, None)
    }
}

impl Retry {
    /// The settings of `timing` (its test overrides included), bounded by `deadline`.
    pub fn from_timing(timing: &Timing, deadline: Option<Instant>) -> Retry {
        Retry {
            policy: RetryPolicy {
                retries: 4,
                first: timing.inference_retry,
                max_wait: timing.inference_retry_max,
                provider_cap: timing.inference_retry_after_cap,
            },
            deadline,
            connect: Duration::from_secs(10),
            request: Duration::from_secs(300),
            idle: timing.inference_stream_idle,
        }
    }
}

/// One retry, as the trace records it: no body, no prompt, no key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryNote {
    /// 1 for the first retry.
    pub attempt: u32,
    /// The status answered, `None` when no answer came (connection refused, timeout, …).
    pub status: Option<u16>,
    pub delay: Duration,
    pub source: WaitSource,
}

/// A fraction in `[0, 1)` for backoff jitter; 0 should the OS have no randomness to give.
fn jitter() -> f64 {
    let mut b = [0u8; 4];
    if getrandom::getrandom(&mut b).is_err() {
        return 0.0;
    }
    f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
}

/// A provider endpoint, as one task talks to it.
pub struct ProviderClient {
    http: crate::outbound::Client,
    url: String,
    provider: Provider,
    /// The credential header (`authorization`, `x-api-key`, …): its name and its value, marked
    /// sensitive.
    credential: Option<(&'static str, HeaderValue)>,
    /// The variable `inference.api_key` names, for a refused key's failure (never its value).
    key_var: Option<String>,
    retry: Retry,
}

impl std::fmt::Debug for ProviderClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderClient")
            .field("url", &self.url)
            .field("provider", &self.provider)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// How one attempt went.
enum Attempt {
    /// The provider answered with this status and body, asked for this wait (if it did) and
    /// sent this `x-should-retry` (if it did).
    Answered {
        status: u16,
        body: Vec<u8>,
        wait: Option<Duration>,
        should_retry: Option<String>,
    },
    /// No answer: connection refused or reset, TLS failure, timeout. `sent`: the request may have
    /// reached the provider (the connection was made) before it was given up on.
    Transport { why: String, sent: bool, refused: bool },
    /// A 2xx streamed reply, read to its end or broken off: never retried, since part of the
    /// answer may already be out.
    Streamed(Result<Reply, String>),
}

/// A turn that got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The task's failure text.
    pub text: String,
    /// Some attempt's request went out and was given up on without its reply (no complete reply
    /// in time, the connection cut): the provider may have billed it.
    pub abandoned: bool,
}

/// A successful reply.
#[derive(Debug)]
pub enum Answer {
    /// The whole body: the request was not streamed, or the server answered with plain JSON.
    Whole(Vec<u8>),
    /// A streamed reply, read to its end.
    Streamed(Reply),
    /// A streamed reply that broke off: the failure text, with the answer text received.
    Broken(String),
}

impl ProviderClient {
    /// A client for `config`'s endpoint. `Err` when TLS cannot be set up or the key cannot be a
    /// header value (a control character in it).
    pub fn new(config: &ModelConfig, retry: &Retry) -> Result<ProviderClient, String> {
        // Redirects are refused and a plain-http endpoint (loopback only, E-MAN-001) is used
        // only once this user serves it (`outbound`): the key goes nowhere else.
        let http = crate::outbound::Client::new(
            crate::outbound::Route::Origin(&config.url),
            crate::outbound::Bounds::connect(retry.connect),
        )?;
        let credential = match config.api_key.as_ref() {
            None => None,
            Some(key) => {
                let (name, value) = dialect(config.provider).credential(key.reveal());
                let value = zeroize::Zeroizing::new(value);
                let v = crate::outbound::credential(&value)
                    .ok_or_else(|| "the API key holds characters a header cannot carry".to_string())?;
                Some((name, v))
            }
        };
        Ok(ProviderClient {
            http,
            url: config.url.clone(),
            provider: config.provider,
            credential,
            key_var: config.key_var.clone(),
            retry: retry.clone(),
        })
    }

    /// POSTs one turn's body and returns the 2xx answer, retrying 429, 5xx and transport errors
    /// as [`Retry`] says; `on_retry` hears of each retry before its wait. A reply streamed as
    /// server-sent events is read as it comes, `on_text` hearing each piece of answer text; once
    /// such a reply has begun nothing is retried. `Err` is the task's failure.
    pub async fn send(
        &self,
        body: &str,
        mut on_retry: impl FnMut(&RetryNote),
        mut on_text: impl FnMut(&str),
    ) -> Result<Answer, Failure> {
        let mut retry = 0;
        let mut abandoned = false;
        let failed = |text: String, abandoned: bool| Err(Failure { text, abandoned });
        loop {
            retry += 1;
            let (status, asked, failure) = match self.attempt(body, &mut on_text).await {
                Attempt::Streamed(r) => return Ok(r.map_or_else(Answer::Broken, Answer::Streamed)),
                Attempt::Answered { status, body, .. } if (200..300).contains(&status) => {
                    return Ok(Answer::Whole(body));
                }
                Attempt::Answered {
                    status,
                    body,
                    wait,
                    should_retry,
                } => {
                    let text = wire::failure_text(status, &body);
                    if !wire::should_retry(status, should_retry.as_deref()) {
                        let context = wire::failure_context(status, &self.url, self.key_var.as_deref());
                        return failed(
                            context.map_or(text.clone(), |c| format!("{text} \u{2014} {c}")),
                            abandoned,
                        );
                    }
                    (Some(status), wait, text)
                }
                Attempt::Transport { why, sent, refused } => {
                    abandoned |= sent;
                    // Nothing listens at a loopback endpoint: the server is not started, or the
                    // port is wrong. Waiting 15 s of retries for it helps no one.
                    if refused && self.on_this_machine() {
                        return failed(
                            format!(
                                "inference failed: no reply from {}: {why}: nothing listens there; start the model server (llama-server, vLLM, Ollama, …), or correct inference.endpoint in the capsule's murmur.yaml",
                                wire::shown_url(&self.url)
                            ),
                            abandoned,
                        );
                    }
                    (
                        None,
                        None,
                        format!("inference failed: no reply from {}: {why}", self.url),
                    )
                }
            };
            let left = self.retry.deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let (delay, source) = match wire::plan_retry(&self.retry.policy, retry, asked, jitter(), left) {
                Ok(w) => w,
                Err(give_up) => return failed(give_up_text(&failure, &give_up, retry), abandoned),
            };
            on_retry(&RetryNote {
                attempt: retry,
                status,
                delay,
                source,
            });
            actix_rt::time::sleep(delay).await;
        }
    }

    /// The endpoint is this machine's loopback, where a refused connection is no passing fault.
    fn on_this_machine(&self) -> bool {
        let url = wire::shown_url(&self.url);
        let host = url
            .split_once("://")
            .map(|(_, rest)| rest.split('/').next().unwrap_or_default())
            .unwrap_or_default();
        let host = match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        };
        crate::address::allow::is_loopback_host(host.trim_start_matches('[').trim_end_matches(']'))
    }

    async fn attempt(&self, body: &str, on_text: &mut dyn FnMut(&str)) -> Attempt {
        let until = Instant::now() + self.retry.request;
        let mut req = self
            .http
            .post(&self.url)
            .insert_header((CONTENT_TYPE, "application/json"))
            .insert_header(("accept", "application/json, text/event-stream"));
        if let Some((name, v)) = &self.credential {
            req = req.insert_header((*name, v.clone()));
        }
        for &header in dialect(self.provider).fixed_headers() {
            req = req.insert_header(header);
        }
        // The connector bounds the connection on its own, so running out of `request` means the
        // request was out.
        let too_slow = || Attempt::Transport {
            why: format!("no complete reply within {:?}", self.retry.request),
            sent: true,
            refused: false,
        };
        let mut resp = match actix_rt::time::timeout(self.retry.request, req.send_body(body.to_string())).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => {
                return Attempt::Transport {
                    sent: !matches!(e, awc::error::SendRequestError::Connect(_)),
                    refused: matches!(&e, awc::error::SendRequestError::Connect(awc::error::ConnectError::Io(io))
                        if io.kind() == std::io::ErrorKind::ConnectionRefused),
                    why: e.to_string(),
                };
            }
            Err(_) => return too_slow(),
        };
        let status = resp.status().as_u16();
        let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok());
        let wait = crate::outbound::retry_after(resp.headers(), SystemTime::now());
        let should_retry = header("x-should-retry").map(str::to_string);
        let streamed = header(CONTENT_TYPE.as_str())
            .is_some_and(|t| t.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
        if streamed && (200..300).contains(&status) {
            return Attempt::Streamed(self.read_stream(&mut resp, until, on_text).await);
        }
        let left = until.saturating_duration_since(Instant::now());
        match actix_rt::time::timeout(left, resp.body().limit(MAX_BODY)).await {
            Ok(Ok(bytes)) => Attempt::Answered {
                status,
                body: bytes.to_vec(),
                wait,
                should_retry,
            },
            Ok(Err(e)) => Attempt::Transport {
                why: e.to_string(),
                sent: true,
                refused: false,
            },
            Err(_) => too_slow(),
        }
    }

    /// Reads a streamed reply to its end marker, each wait bounded by [`Retry::idle`] and the
    /// whole by `until`. `Err` is the failure text: why the stream broke, and the answer text
    /// received before it did (the client may have shown it already; the failure keeps it).
    async fn read_stream<S, E>(
        &self,
        body: &mut S,
        until: Instant,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Reply, String>
    where
        S: futures_util::Stream<Item = Result<actix_web::web::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let mut reader = StreamReader::new(self.provider);
        let broke = loop {
            let left = until.saturating_duration_since(Instant::now());
            let next = match actix_rt::time::timeout(self.retry.idle.min(left), body.next()).await {
                Ok(next) => next,
                Err(_) if left <= self.retry.idle => {
                    break format!("it was not over within {:?}", self.retry.request);
                }
                Err(_) => break format!("no event came for {:?}", self.retry.idle),
            };
            match next {
                None => break String::new(),
                Some(Err(e)) => break format!("the connection failed: {e}"),
                Some(Ok(bytes)) => {
                    let (deltas, read) = reader.push(&bytes);
                    // Streamed answer text is provider text too; the whole reply is scrubbed again
                    // once read, where a credential split across two deltas is caught.
                    deltas.into_iter().for_each(|d| on_text(&crate::secret::scrub(d)));
                    if let Err(why) = read {
                        break why;
                    }
                }
            }
            if reader.is_done() {
                // Whatever follows the end marker is not read.
                break String::new();
            }
        };
        let why = if broke.is_empty() {
            match reader.finish() {
                Ok(reply) => return Ok(reply),
                Err(why) => why,
            }
        } else {
            broke
        };
        Err(stream_failure(&why, reader.text()))
    }
}

/// Answer text quoted in a broken stream's failure text, at most.
pub const PARTIAL_QUOTED: usize = 64 << 10;

/// `inference failed: the provider's reply stream broke off (<why>)`, then the answer text
/// received before it did, cut to [`PARTIAL_QUOTED`] bytes at a character boundary. Every
/// credential the member holds is scrubbed from that text before it is cut
/// ([`crate::secret::scrub`]).
pub fn stream_failure(why: &str, partial: &str) -> String {
    let mut text = format!("inference failed: the provider's reply stream broke off ({why})");
    if !partial.is_empty() {
        let received = partial.len();
        let partial = crate::secret::scrub(partial.to_string());
        let shown = crate::text::head(&partial, PARTIAL_QUOTED);
        text.push_str(&format!("; the answer so far ({received} bytes"));
        if shown.len() < partial.len() {
            text.push_str(&format!(", the first {} shown", shown.len()));
        }
        text.push_str("): ");
        text.push_str(shown);
    }
    crate::secret::scrub(text)
}

/// The failure text of a request whose retries ended: the last failure, then why no retry came.
/// `retry` is the retry that was not made, so `retry - 1` were.
fn give_up_text(failure: &str, give_up: &GiveUp, retry: u32) -> String {
    match give_up {
        // No retries configured: the failure alone.
        GiveUp::Exhausted { retries: 0 } => failure.to_string(),
        _ => format!("{failure} {}", give_up.clause(retry - 1)),
    }
}
