//! mur: launches formations of agent capsules and enforces who may call whom.
//!
//! See `docs/architecture.md` for the codemap. The pure core (`yaml`, `names`, `roster`,
//! `manifest`, `store`, `token`, `channel::line`, `trace`) builds without the `runtime` feature, so
//! it cannot reach actix, HTTP or the capsule host; the fuzz targets build it alone.

pub mod channel;
#[cfg(feature = "kubernetes")]
pub mod deploy;
pub mod diag;
pub mod ids;
pub mod manifest;
pub mod names;
pub mod outcome;
pub mod paths;
pub mod procinfo;
pub mod readiness;
pub mod retention;
pub mod roster;
pub mod running;
pub mod schema;
pub mod store;
pub mod timing;
pub mod token;
pub mod trace;
pub mod yaml;

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
pub mod scaffold;
#[cfg(feature = "runtime")]
pub mod session;
