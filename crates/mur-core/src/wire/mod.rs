//! The wire formats members and the launcher exchange, as pure functions over bytes and
//! `serde_json`: the runtime (`mur`) moves the bytes, these modules decide what they are.
//!
//! - `calls` — a member call's request bodies and how the caller reads the callee's replies
//!   (SendMessage, GetTask, SubscribeToTask events; §11.2–§11.4).
//! - `channel_line` — the formation channel's first line and address lines (runtime.md §10).
//! - `jsonrpc` — the door's JSON-RPC 2.0 framing (§7.2, §7.5).
//! - `sse` — event-stream framing, as a caller reads SubscribeToTask (§11.2) and a model capsule
//!   a streamed provider reply.
//! - `model` — the OpenAI Chat Completions and Anthropic Messages formats (§16.3).
//! - `model_stream` — a streamed provider reply read into the same reply as an unstreamed one.

pub mod calls;
pub mod channel_line;
pub mod jsonrpc;
pub mod model;
pub mod model_stream;
pub mod sse;
