//! What a member's actor reports to the formation, and the formation as the member sees it:
//! only the messages it takes, so `peer` never names `FormationActor`.

use std::process::ExitStatus;

use actix::prelude::*;

use crate::channel::line::DoorIdentity;
use crate::readiness::Reported;

/// Where one member reports: the formation's handlers of each message.
#[derive(Clone)]
pub struct FormationInbox {
    pub ready: Recipient<PeerReady>,
    pub exited: Recipient<PeerExited>,
    pub started: Recipient<PeerStarted>,
    pub failed: Recipient<PeerFailed>,
    pub stopped: Recipient<PeerStopped>,
    pub entry_exited: Recipient<EntryExited>,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct PeerReady {
    pub index: usize,
    pub readiness: Reported,
    pub pid: u32,
    /// Its door's socket and process, when it serves one.
    pub door: Option<DoorIdentity>,
    /// The key its card is signed with, when it is.
    pub card_key: Option<String>,
}

/// A peer's process ended on its own (not stopped by the launcher).
#[derive(Message)]
#[rtype(result = "()")]
pub struct PeerExited {
    pub index: usize,
    pub status: Option<i32>,
}

/// A peer's process exists (sent before readiness, so a failed launch can name it).
#[derive(Message)]
#[rtype(result = "()")]
pub struct PeerStarted {
    pub index: usize,
    pub pid: u32,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct PeerFailed {
    pub index: usize,
    pub reason: String,
}

#[derive(Message)]
#[rtype(result = "()")]
pub struct PeerStopped {
    pub index: usize,
}

/// The entry's process was reaped: its exit code is the formation's.
#[derive(Message)]
#[rtype(result = "()")]
pub struct EntryExited(pub Option<ExitStatus>);
