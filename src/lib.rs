//! mur: launches formations of agent capsules and enforces who may call whom.

pub mod diag;
pub mod ids;
pub mod names;
pub mod paths;
pub mod procinfo;
pub mod running;
pub mod timing;
pub mod yaml;
