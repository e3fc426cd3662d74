//! mur: launches formations of agent capsules and enforces who may call whom.
//!
//! See `docs/architecture.md` for the codemap. The pure core is its own crate, `mur-core`
//! (`crates/mur-core`), re-exported here module by module; what stays pure in this crate
//! (`deploy`) builds without the `runtime` feature.

// The unit-test target links the dev-dependencies meant for tests/ and benches/.
#![cfg_attr(test, allow(unused_crate_dependencies))]

pub use mur_core::{
    address, budget, build_stamp, card_sig, checkup, compiled, cost, diag, digest, fence, file, grant, guard, ids, jcs,
    limits, manifest, marker, member_env, names, outcome, paths, procinfo, push, question, readiness, restart,
    retention, roster, running, schema, secret, store, sync, task, text, timing, token, tool_pins, trace, wire, yaml,
};

pub mod channel;
#[cfg(feature = "kubernetes")]
pub mod deploy;

#[cfg(feature = "runtime")]
pub mod calls;
#[cfg(feature = "runtime")]
pub mod capsule;
#[cfg(feature = "runtime")]
pub mod cli;
#[cfg(feature = "runtime")]
pub mod door;
#[cfg(feature = "runtime")]
pub mod launcher;
#[cfg(feature = "runtime")]
pub mod model;
#[cfg(feature = "runtime")]
pub mod operator;
#[cfg(feature = "runtime")]
pub mod otel;
#[cfg(feature = "runtime")]
pub mod outbound;
#[cfg(feature = "runtime")]
pub mod peer_door;
#[cfg(feature = "runtime")]
pub mod progress;
#[cfg(feature = "runtime")]
pub mod remote;
#[cfg(feature = "runtime")]
pub mod runner;
#[cfg(feature = "runtime")]
pub mod scaffold;
#[cfg(feature = "runtime")]
pub mod session;
#[cfg(feature = "runtime")]
pub mod tasks;
#[cfg(feature = "runtime")]
pub mod tools;
#[cfg(feature = "runtime")]
pub mod ui;
