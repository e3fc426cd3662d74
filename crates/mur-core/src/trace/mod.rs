//! Trace records (runtime.md §14): `trace.jsonl`, one record per line.
//!
//! `writer` appends records with the key order of §1.2 (common keys first, then the record's own
//! fields in the order §14.2 lists them); `read` reads them back, skipping lines that do not parse.
//! Pure of actix and HTTP; callers pass only ids and texts, never a token.

pub mod formation;
pub mod read;
pub mod writer;

pub use read::read_records;
pub use writer::{TraceWriter, render_record};
