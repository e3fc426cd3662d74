//! Where a capsule's outgoing requests may go: the `capabilities.network.allow` rules of its
//! manifest (`allow`), and the virtual addresses its callees are known by (`virtual_peer`).

pub mod allow;
pub mod virtual_peer;
