//! The wire formats members and the launcher exchange, as pure functions over bytes and
//! `serde_json`: the runtime (`mur`) moves the bytes, these modules decide what they are.
//!
//! - `calls` — a member call's request bodies and how the caller reads the callee's replies
//!   (SendMessage, GetTask, SubscribeToTask events;
//!   docs/reference/capsules.md#calls-between-members).
//! - `channel_line` — the formation channel's first line and address lines
//!   (docs/reference/formation.md#the-formation-channel).
//! - `jsonrpc` — the door's JSON-RPC 2.0 framing (docs/reference/door.md#request-pipeline,
//!   docs/reference/door.md#errors).
//! - `limits` — the limits extension [ours]: a task's deadline and token budget across the
//!   formation's edge (from clients, to remote agents), which only narrow.
//! - `live_task` — what `mur ui` shows of a task as its door reports it (state, question,
//!   the answer text as it streams), bounded.
//! - `mcp_tasks` — the MCP tasks extension (`io.modelcontextprotocol/tasks`) and input requests:
//!   a tool call's task handle, its polling and cancel requests, the questions it asks.
//! - `mcp` — the Model Context Protocol's lifecycle and tools messages, as a model capsule's
//!   runtime reads a tool server's answers.
//! - `sse` — event-stream framing, as a caller reads SubscribeToTask
//!   (docs/reference/capsules.md#calls-between-members) and a model capsule
//!   a streamed provider reply.
//! - `model` — what the provider formats share (docs/reference/capsules.md#model-capsules): the
//!   URL rule, the tools, the `[Capsule]` block, failure texts, retries.
//! - `provider` — one seam per provider: the OpenAI Chat Completions and Anthropic Messages
//!   formats, each in its own file.
//! - `model_stream` — a streamed provider reply read into the same reply as an unstreamed one.
//! - `replay` — streams that resume: `Last-Event-ID` and the bounded per-task event log a door
//!   replays a reconnecting stream from (docs/a2a.md, "Resuming a stream").
//! - `remote` — a remote capsule's A2A client side: the agent card's check, the bodies it sends
//!   the remote agent, and the reading of its replies and events.
//! - `http1` — an HTTP/1.1 reply's head and chunked body, as `mur send` reads a door's stream;
//!   and a head whose body ends with the connection, relabelled so the HTTP client reads it to the
//!   close.

pub mod authority_line;
pub mod budget_line;
pub mod calls;
pub mod channel_line;
pub mod http1;
pub mod jsonrpc;
pub mod limits;
pub mod live_task;
pub mod mcp;
pub mod mcp_tasks;
pub mod model;
pub mod model_stream;
pub mod provider;
pub mod remote;
pub mod replay;
pub mod sse;
