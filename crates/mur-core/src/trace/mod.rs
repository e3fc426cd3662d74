//! Trace records (docs/reference/formation.md#trace-records): `trace.jsonl`, one record per line.
//!
//! `writer` appends records with the key order of docs/reference/cli.md#conventions (common keys
//! first, then the record's own fields in the order docs/reference/formation.md#trace-records lists
//! them); `read` reads them back, skipping lines that do not parse. Pure of actix and HTTP; callers
//! pass only ids and texts, never a token.

pub mod formation;
pub mod read;
pub mod writer;

pub use read::read_records;
pub use writer::{TraceWriter, render_record};
