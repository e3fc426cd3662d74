//! The provider wire formats, as pure functions (docs/reference/capsules.md#model-capsules): the
//! request URL, the request body of one turn, the reading of a reply, the runtime tools' schemas,
//! the `[Capsule]` block and the failure text. No actix, HTTP or process code: `mur`'s
//! `model::client` moves the bytes, this module decides what they are. What differs between
//! providers is each one's [`Dialect`](super::provider::Dialect); this module holds the rest.
//!
//! A conversation is kept provider-neutral as [`Msg`]s; an assistant reply keeps the provider's
//! own message ([`Reply::echo`]) so it goes back exactly as it came (tool call ids, Anthropic
//! `thinking` blocks). Bodies are `serde_json::Value`s, so their keys are sorted at every depth and
//! the bytes are deterministic (docs/reference/cli.md#conventions).

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::provider::Provider;
pub use super::provider::anthropic::ANTHROPIC_VERSION;
use super::provider::dialect;

/// The runtime tool that hands a member a task (docs/reference/capsules.md#model-capsules).
pub const CALL_MEMBER: &str = "call-member";
/// The runtime tool that ends a member-sent task without an answer
/// (docs/reference/capsules.md#model-capsules).
pub const END_WITHOUT_ANSWER: &str = "end-without-answer";
/// The runtime tool a capsule that may ask asks its caller with (docs/reference/door.md#asking).
pub const REQUEST_INPUT: &str = "request-input";

/// Bytes of a failed reply's body quoted in the failure text
/// (docs/reference/capsules.md#model-capsules).
pub const FAILURE_BODY_BYTES: usize = 200;

/// The request URL: `<endpoint>/v1/chat/completions` or `<endpoint>/v1/messages`, without the
/// `/v1` when the endpoint already ends in it (docs/reference/capsules.md#model-capsules). A
/// trailing `/` on the endpoint is ignored.
pub fn url(provider: Provider, endpoint: Option<&str>) -> String {
    let base = endpoint.unwrap_or(provider.default_endpoint()).trim_end_matches('/');
    let tail = dialect(provider).path();
    // An endpoint written as the whole request URL (`…/v1/chat/completions`, as many servers'
    // own pages show it) is taken as it is, not doubled.
    if base.ends_with(&format!("/{tail}")) {
        base.to_string()
    } else if base.ends_with("/v1") {
        format!("{base}/{tail}")
    } else {
        format!("{base}/v1/{tail}")
    }
}

/// The system prompt: the `[Capsule]` block (the capsule's full name and, in a formation, the
/// member's roster name and the formation id), then `inference.system_prompt` after a blank line
/// (docs/reference/capsules.md#model-capsules, docs/reference/formation.md#trace-records).
pub fn system_prompt(capsule: &str, member: Option<&str>, formation: Option<&str>, prompt: &str) -> String {
    let mut s = format!("[Capsule]\nname: {capsule}\n");
    if let Some(m) = member {
        s.push_str(&format!("member: {m}\n"));
    }
    if let Some(f) = formation {
        s.push_str(&format!("formation: {f}\n"));
    }
    if !prompt.is_empty() {
        s.push('\n');
        s.push_str(prompt);
    }
    s
}

/// One tool as the model is offered it, provider-neutral: a runtime tool, a WebAssembly tool or
/// an MCP server's (`mur::tools` builds them).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The JSON schema of its input.
    pub schema: Value,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The provider's id, echoed in the result.
    pub id: String,
    pub name: String,
    /// The input object, or why it could not be read (an OpenAI `arguments` string that is not
    /// JSON).
    pub input: Result<Value, String>,
}

/// What a tool call gives back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub id: String,
    pub text: String,
    /// A tool error or a failed call (Anthropic's `is_error`; OpenAI has no such flag).
    pub is_error: bool,
}

/// Why the provider stopped a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `stop` / `end_turn`, a tool call, or anything else that is not a cut.
    Done,
    /// The reply was cut at `max_tokens`: `length` / `max_tokens`
    /// (docs/reference/capsules.md#model-capsules: the task fails).
    Truncated,
    /// Anthropic's `model_context_window_exceeded`: the conversation filled the context window.
    ContextFull,
    /// The model declined: an OpenAI `refusal` (or `content_filter` cut), Anthropic's `refusal`
    /// stop. The text is the refusal, as the provider worded it (may be empty).
    Refused(String),
}

/// Tokens one reply used, as the provider reported them: `None` when it reported no count
/// (a compatible server that sends no `usage`), never a guess.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// One provider reply, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The text of the reply (all text parts, concatenated).
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub stop: Stop,
    pub usage: Usage,
    /// Why the provider stopped, in its own word (`stop`, `tool_calls`, `end_turn`, …), when it
    /// gave one: what a trace and a span report, beside [`Reply::stop`]'s meaning.
    pub finish_reason: Option<String>,
    /// The model the provider says answered, when it said.
    pub model: Option<String>,
    /// The assistant message to send back in later turns, in the provider's own shape; `None`
    /// when there is nothing to send back (an empty Anthropic reply, which the API would refuse).
    pub echo: Option<Value>,
}

impl Reply {
    /// This reply with every credential the member holds scrubbed from everything a provider
    /// wrote into it ([`crate::secret::scrub`]): what is read of a provider goes on scrubbed.
    pub fn scrubbed(self) -> Reply {
        use crate::secret::{scrub, scrub_json};
        let scrub_value = |mut v: Value| {
            scrub_json(&mut v);
            v
        };
        Reply {
            text: scrub(self.text),
            tool_calls: self
                .tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: scrub(c.id),
                    name: scrub(c.name),
                    input: c.input.map(scrub_value).map_err(scrub),
                })
                .collect(),
            finish_reason: self.finish_reason.map(scrub),
            model: self.model.map(scrub),
            echo: self.echo.map(scrub_value),
            ..self
        }
    }
}

/// One message of a task's conversation after the system prompt.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// A user message: the task text, or a continuation with member answers
    /// (docs/reference/capsules.md#calls-between-members).
    User(String),
    /// An assistant reply, as the provider sent it ([`Reply::echo`]).
    Assistant(Value),
    /// The results of one reply's tool calls, in call order.
    ToolResults(Vec<ToolOutput>),
}

/// Everything fixed about a task's requests.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub provider: Provider,
    pub model: &'a str,
    pub max_tokens: u32,
    /// `inference.reasoning_effort` (Chat Completions only; the manifest refuses it for Anthropic).
    pub reasoning_effort: Option<&'a str>,
    pub system: &'a str,
    pub tools: &'a [ToolSpec],
    /// Ask for a streamed reply (server-sent events): `"stream": true`, and for the Chat
    /// Completions providers `stream_options.include_usage`, so the last event carries the usage.
    pub stream: bool,
}

/// The body of one turn: compact JSON, keys sorted. `tools` is left out when there are none.
/// The fields are the provider's ([`super::provider::Dialect::request_body`]).
pub fn request_body(req: &Request<'_>, messages: &[Msg]) -> String {
    Value::Object(dialect(req.provider).request_body(req, messages)).to_string()
}

/// Reads a successful (2xx) reply body. `Err` says what is wrong with it.
pub fn parse_reply(provider: Provider, body: &[u8]) -> Result<Reply, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("it is not JSON ({e})"))?;
    if !v.is_object() {
        return Err("it is not a JSON object".into());
    }
    dialect(provider).parse_reply(&v)
}

/// `inference failed: <status> <first 200 bytes of body>`
/// (docs/reference/capsules.md#model-capsules). The body is scrubbed of every credential the
/// member holds ([`crate::secret::scrub`]), should a provider echo one, before it is cut.
pub fn failure_text(status: u16, body: &[u8]) -> String {
    let text = crate::secret::scrub(String::from_utf8_lossy(body).into_owned());
    format!(
        "inference failed: {status} {}",
        crate::text::head(&text, FAILURE_BODY_BYTES)
    )
    .trim_end()
    .to_string()
}

/// `url` as a failure may show it: without a userinfo part (`user:key@`) or a query, either of
/// which may carry a credential.
pub fn shown_url(url: &str) -> String {
    let url = url.split(['?', '#']).next().unwrap_or(url);
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            format!("{scheme}://{host}{path}")
        }
        None => url.to_string(),
    }
}

/// What a refused request most likely means, after its failure text: a 401 or 403 is the key
/// (named by its variable, never its value), a 404 or 405 the URL.
pub fn failure_context(status: u16, url: &str, key_var: Option<&str>) -> Option<String> {
    let url = shown_url(url);
    match status {
        401 | 403 => Some(match key_var {
            Some(var) => format!(
                "POST {url} refused the key in ${var} (inference.api_key): check that it holds a valid key for this provider"
            ),
            None => format!(
                "POST {url} wants a key: add `api_key: ${{VAR}}` under inference, naming the variable that holds it"
            ),
        }),
        404 | 405 => Some(format!(
            "POST {url} is not an API path of this server: inference.endpoint should be the server's base URL (e.g. http://127.0.0.1:8080), and the provider the API it speaks"
        )),
        _ => None,
    }
}

/// Whether a status is retried: 429 (rate limited), 5xx (Anthropic's 529 `overloaded_error`
/// among them), and the 408 and 409 both official SDKs retry. A provider's `x-should-retry`
/// header overrides this either way (see [`should_retry`]).
pub fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..600).contains(&status)
}

/// Whether to retry `status`, given the provider's `x-should-retry` header when it sent one.
pub fn should_retry(status: u16, x_should_retry: Option<&str>) -> bool {
    match x_should_retry.map(str::trim) {
        Some("true") => !(200..300).contains(&status),
        Some("false") => false,
        _ => retryable(status),
    }
}

/// The wait a provider asked for: `retry-after-ms` (milliseconds, OpenAI), else `retry-after`
/// (seconds, possibly fractional, or an HTTP date). Unreadable or negative values are ignored;
/// a date in the past means no wait.
pub fn provider_wait(retry_after_ms: Option<&str>, retry_after: Option<&str>, now: SystemTime) -> Option<Duration> {
    let secs = |v: &str| v.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0);
    if let Some(ms) = retry_after_ms.and_then(secs) {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(MAX_PROVIDER_WAIT_SECS)));
    }
    let v = retry_after?;
    if let Some(s) = secs(v) {
        return Some(Duration::from_secs_f64(s.min(MAX_PROVIDER_WAIT_SECS)));
    }
    let at: SystemTime = chrono::DateTime::parse_from_rfc2822(v.trim())
        .ok()?
        .with_timezone(&chrono::Utc)
        .into();
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Caps a parsed wait so that it is a valid `Duration` (a day: far past any retry budget).
const MAX_PROVIDER_WAIT_SECS: f64 = 86_400.0;

/// The retry policy of provider requests, as numbers; `client` applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt.
    pub retries: u32,
    /// The first backoff wait; each later one doubles. A jitter of up to a quarter is added.
    pub first: Duration,
    /// The longest single wait. A provider asking for longer ends the retries at once: waiting
    /// less would only be refused again.
    pub max_wait: Duration,
    /// Provider-asked waits are shortened to this first (a test-timing hook; `Duration::MAX`
    /// otherwise).
    pub provider_cap: Duration,
}

/// Where a retry's wait came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSource {
    /// The provider's `retry-after-ms` / `retry-after`.
    Provider,
    /// Exponential backoff with jitter.
    Backoff,
}

impl WaitSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitSource::Provider => "retry-after",
            WaitSource::Backoff => "backoff",
        }
    }
}

/// Why no retry is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GiveUp {
    /// Every retry of the budget was used.
    Exhausted { retries: u32 },
    /// The provider asked for a longer wait than one retry may take.
    TooLong { asked: Duration, max: Duration },
    /// The wait would end after the task's deadline.
    Deadline { wait: Duration },
}

impl GiveUp {
    /// The clause appended to the failure text, after `retried` retries were made.
    pub fn clause(&self, retried: u32) -> String {
        let head = match retried {
            0 => "gave up".to_string(),
            1 => "gave up after 1 retry".to_string(),
            n => format!("gave up after {n} retries"),
        };
        match self {
            GiveUp::Exhausted { .. } => format!("({head})"),
            GiveUp::TooLong { asked, max } => format!(
                "({head}: the provider asked to wait {}, longer than the {} a retry may wait)",
                secs_text(*asked),
                secs_text(*max)
            ),
            GiveUp::Deadline { wait } => format!(
                "({head}: a retry after {} would end past the task's deadline)",
                secs_text(*wait)
            ),
        }
    }
}

fn secs_text(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The wait before retry number `retry` (1-based), or why there is none. `provider` is the wait
/// the provider asked for; `jitter` is a fraction in `[0, 1)`; `left` is the time until the
/// task's deadline, when it has one.
pub fn plan_retry(
    policy: &RetryPolicy,
    retry: u32,
    provider: Option<Duration>,
    jitter: f64,
    left: Option<Duration>,
) -> Result<(Duration, WaitSource), GiveUp> {
    if retry > policy.retries {
        return Err(GiveUp::Exhausted {
            retries: policy.retries,
        });
    }
    let (wait, source) = match provider {
        Some(asked) => {
            let asked = asked.min(policy.provider_cap);
            if asked > policy.max_wait {
                return Err(GiveUp::TooLong {
                    asked,
                    max: policy.max_wait,
                });
            }
            (asked, WaitSource::Provider)
        }
        None => {
            let base = policy.first.saturating_mul(1u32 << retry.saturating_sub(1).min(16));
            let extra = base.mul_f64(jitter.clamp(0.0, 1.0) / 4.0);
            ((base + extra).min(policy.max_wait), WaitSource::Backoff)
        }
    };
    if left.is_some_and(|l| wait >= l) {
        return Err(GiveUp::Deadline { wait });
    }
    Ok((wait, source))
}

#[cfg(test)]
mod url_tests {
    use super::*;

    #[test]
    fn an_endpoint_written_as_the_whole_url_is_not_doubled() {
        for (endpoint, want) in [
            ("http://127.0.0.1:8080", "http://127.0.0.1:8080/v1/chat/completions"),
            ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1/chat/completions"),
            (
                "http://127.0.0.1:8080/v1/chat/completions",
                "http://127.0.0.1:8080/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:8080/v1/chat/completions/",
                "http://127.0.0.1:8080/v1/chat/completions",
            ),
        ] {
            assert_eq!(url(Provider::OpenAiCompatible, Some(endpoint)), want, "{endpoint}");
        }
        assert_eq!(
            url(Provider::Anthropic, Some("https://a.example/v1/messages")),
            "https://a.example/v1/messages"
        );
    }

    #[test]
    fn a_failure_shows_the_url_without_credentials_and_names_the_keys_variable() {
        assert_eq!(
            shown_url("https://u:sk-1@h.example:8443/v1/x?key=sk-2"),
            "https://h.example:8443/v1/x"
        );
        let key = failure_context(401, "https://u:sk-1@h.example/v1/messages", Some("ANTHROPIC_API_KEY")).unwrap();
        assert!(key.contains("$ANTHROPIC_API_KEY") && !key.contains("sk-1"), "{key}");
        assert!(
            failure_context(404, "http://127.0.0.1:1/v1/chat/completions", None)
                .unwrap()
                .contains("inference.endpoint")
        );
        assert_eq!(failure_context(500, "http://x", None), None);
    }
}
