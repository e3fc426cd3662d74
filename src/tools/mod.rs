//! Tools a model capsule's agent loop offers its model besides the runtime's own (issue #31).
//!
//! - `mcp` — a tool server spoken to over the Model Context Protocol's Streamable HTTP: the
//!   handshake, the allowed tools' listing, and calls.

pub mod mcp;
