//! Trace records (docs/reference/formation.md#trace-records): `trace.jsonl`, one record per line.
//!
//! `turn` is one model turn (the `inference` record, and the names its OpenTelemetry span uses);
//! `otel_env` decides from the `OTEL_*` variables whether spans are exported.
//! `questions` reads the questions tasks asked (`input_requested`/`input_received`).
//! `texts` bounds the texts a session keeps beside its trace (`texts.jsonl`) for `mur ui`.
//! `timeline` is one task's steps in order with their timing, as `mur ui` shows them.
//! `usage` sums a session's tasks, calls, model time and tokens for `mur trace show`.
//! `view` is what `mur ui` shows of a formation: its members, edges, calls, tasks and turns.
//! `writer` appends records with the key order of docs/reference/cli.md#conventions (common keys
//! first, then the record's own fields in the order docs/reference/formation.md#trace-records lists
//! them); `read` reads them back, skipping lines that do not parse. Pure of actix and HTTP; callers
//! pass only ids and texts, never a token.

pub mod formation;
pub mod otel_env;
pub mod questions;
pub mod read;
pub mod texts;
pub mod timeline;
pub mod tool_call;
pub mod turn;
pub mod usage;
pub mod view;
pub mod writer;

pub use read::read_records;
pub use writer::{TraceWriter, render_record};
