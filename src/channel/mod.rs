//! The formation channel (docs/reference/formation.md#the-formation-channel): a pipe per member
//! carrying its credentials (the first line) and later its callees' door URLs (address lines).
//!
//! `line` is the pure wire format (`mur_core::wire::channel_line`); `intake` reads the inherited descriptor in a member process.

#[cfg(feature = "runtime")]
pub mod intake;
pub use mur_core::wire::channel_line as line;

#[cfg(feature = "runtime")]
pub use intake::{ChannelEvent, Intake, read_first_line, refusal, unreadable_notice};
pub use line::{
    Address, AddressLine, Call, DoorIdentity, FirstLine, LauncherId, MAX_LINE, address_line, door_socket,
    parse_address_line, withdrawal_line,
};
