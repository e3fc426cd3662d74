//! One seam per model provider (docs/reference/capsules.md#model-capsules): whatever differs
//! between the provider APIs is a method of [`Dialect`], and each provider's answers are one file
//! here: `openai` (both Chat Completions providers, `openai` and `openai-compatible`) and
//! `anthropic`.
//!
//! The invariant: [`dialect`] is the one `match` that tells providers apart, and it is
//! exhaustive. Nothing else decides behaviour by comparing a [`Provider`] with a variant (`==`,
//! `!=`, `matches!`) or by a catch-all arm, and [`Dialect`] has no default methods. A new variant
//! therefore does not compile until it has an arm here, nor that arm until its file answers every
//! method: a provider can never silently behave like another.
//!
//! Left outside, because it is the same for every provider today: the retry signals
//! (`retry-after-ms`, `retry-after`, `x-should-retry`), the failure text of a non-2xx reply (its
//! body quoted as is), and the event-stream framing and bounds of [`super::model_stream`].

use serde_json::{Map, Value};

use super::model::{Msg, Reply, Request};
use super::model_stream::Held;
use crate::manifest::Provider;

pub mod anthropic;
pub mod openai;

/// What one provider API does differently from the others.
pub trait Dialect: Sync {
    /// The base URL used when `inference.endpoint` is absent
    /// (docs/reference/capsules.md#model-capsules).
    fn default_endpoint(&self) -> &'static str;
    /// Whether requests carry `inference.reasoning_effort`; a manifest that sets it for a
    /// provider that does not take it is refused (E-MAN-003).
    fn takes_reasoning_effort(&self) -> bool;
    /// The API's name, as that refusal says it.
    fn api_name(&self) -> &'static str;
    /// The model `mur new` names when the configuration names none: a current model of the
    /// official SDK's model list. Any model of the provider works; the operator is expected to
    /// choose.
    fn default_model(&self) -> &'static str;
    /// The environment variable `mur new`'s members name for their key.
    fn key_var(&self) -> &'static str;
    /// The request URL's path after `/v1/` (see [`super::model::url`]).
    fn path(&self) -> &'static str;
    /// The credential header for `key`: its name and value.
    fn credential(&self, key: &str) -> (&'static str, String);
    /// The headers every request carries besides the credential, in order.
    fn fixed_headers(&self) -> &'static [(&'static str, &'static str)];
    /// The body of one turn, as a JSON object (see [`super::model::request_body`]).
    fn request_body(&self, req: &Request<'_>, messages: &[Msg]) -> Map<String, Value>;
    /// Reads a successful reply, already known to be a JSON object.
    fn parse_reply(&self, reply: &Value) -> Result<Reply, String>;
    /// A reader for the events of one streamed reply.
    fn stream(&self) -> Box<dyn StreamEvents>;
}

/// The [`Dialect`] of `provider`: the one match on providers (see the module doc).
pub fn dialect(provider: Provider) -> &'static dyn Dialect {
    match provider {
        Provider::OpenAi => &openai::OPENAI,
        Provider::OpenAiCompatible => &openai::COMPATIBLE,
        Provider::Anthropic => &anthropic::ANTHROPIC,
    }
}

/// The events of one streamed reply, read into the provider's unstreamed reply shape so that a
/// streamed turn means exactly what the same turn unstreamed means.
pub trait StreamEvents: std::fmt::Debug + Send {
    /// One event's `data`. Every byte it keeps is counted against `held` first.
    fn event(&mut self, data: &str, held: &mut Held) -> Result<Event, String>;
    /// The end marker, as the failure of a stream that stopped short names it.
    fn end_marker(&self) -> &'static str;
    /// The whole reply, once [`Event::End`] has come: the events assembled into the unstreamed
    /// reply and read by the provider's [`Dialect::parse_reply`].
    fn finish(&self) -> Result<Reply, String>;
}

/// What one event came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Nothing for the reader of answer text.
    Skip,
    /// A piece of answer text (possibly empty).
    Text(String),
    /// The end marker: nothing after it is read.
    End,
}

fn count(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// A short word the provider sent (`model`, a finish reason), bounded: a peer controls it.
fn word(v: Option<&Value>) -> Option<String> {
    const MAX: usize = 200;
    Some(crate::text::head(v?.as_str()?, MAX).to_string())
}

