//! mur's pure core: everything a formation is made of that needs no runtime. Roster parsing and
//! admission, the manifest subset, archives, stores and the lock, tokens, the readiness line,
//! trace records, ids, paths under `~/.murmur`, timing constants, MCP tools' pinned definitions
//! (`tool_pins`), what `mur build` records to skip an unchanged toolchain run (`build_stamp`) and
//! the one diagnostics registry;
//! the small shared helpers (`text` bounds peer text, `sync` locks without panicking, `digest`
//! spells hashes, `secret` holds credentials and scrubs them from what servers send back, `fence`
//! fences foreign text for a model, `file` writes a file atomically, `suggest` finds what a
//! misspelt key or name meant);
//! the wire formats (`wire`: channel lines, JSON-RPC, event streams, model providers) and the
//! addresses a capsule may reach (`address`: allow rules, virtual peer addresses).
//!
//! This crate depends on no actix, tokio, wasmtime or process control (`tests/deps.rs`
//! checks its dependency list), so the boundary `docs/architecture.md` draws between the pure
//! core and the runtime is the compiler's to keep. The `mur` crate re-exports every module here
//! under its own name (`mur::roster`, `mur::diag`, …).

#![forbid(unsafe_code)]

pub mod address;
pub mod budget;
pub mod build_stamp;
pub mod card_sig;
pub mod checkup;
pub mod compiled;
pub mod cost;
pub mod diag;
pub mod digest;
pub mod fence;
pub mod file;
pub mod grant;
pub mod guard;
pub mod ids;
pub mod jcs;
pub mod limits;
pub mod manifest;
pub mod marker;
pub mod member_env;
pub mod names;
pub mod outcome;
pub mod paths;
pub mod procinfo;
pub mod push;
pub mod question;
pub mod readiness;
pub mod restart;
pub mod retention;
pub mod roster;
pub mod running;
pub mod schema;
pub mod secret;
pub mod store;
pub mod suggest;
pub mod sync;
pub mod task;
pub mod text;
pub mod timing;
pub mod token;
pub mod tool_pins;
pub mod trace;
pub mod wire;
pub mod yaml;
