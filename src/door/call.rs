//! One request as a method handler sees it: where its task comes from, everything the handler
//! needs from the request, and what it answers. `methods` and `push` both serve through it.

use std::sync::Arc;

use serde_json::Value;

use super::auth::Caller;
use super::card::Card;
use super::jsonrpc::RpcError;
use super::sse::Start;
use crate::tasks::{Board, Origin, Pinned, TaskSnapshot, Trust};

/// Step 1 of the pipeline: where the request says its task comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Provenance {
    pub origin: Origin,
    pub trust: Trust,
}

impl Provenance {
    /// `x-murmur-task-origin` `peer`/`completion` carries `x-murmur-task-trust` (missing →
    /// untrusted); anything else is an untrusted `event`.
    pub fn from_headers(origin: Option<&str>, trust: Option<&str>) -> Provenance {
        let origin = match origin {
            Some("peer") => Origin::Peer,
            Some("completion") => Origin::Completion,
            _ => {
                return Provenance {
                    origin: Origin::Event,
                    trust: Trust::Untrusted,
                };
            }
        };
        let trust = if trust == Some("trusted") {
            Trust::Trusted
        } else {
            Trust::Untrusted
        };
        Provenance { origin, trust }
    }
}

/// What a method answers.
#[derive(Debug)]
pub enum Reply {
    Result(Value),
    /// A Task object as the result (GetTask, CancelTask), written straight from the snapshot.
    Task(TaskSnapshot),
    Error(RpcError),
    /// An SSE stream of this task (SendStreamingMessage, SubscribeToTask), starting at `start`;
    /// `pin` keeps the task on the board until the stream has shown its end.
    Stream {
        task_id: String,
        start: Start,
        pin: Pinned,
    },
}

/// Everything a method needs from the request.
pub struct Call<'a> {
    pub board: &'a Arc<Board>,
    pub caller: &'a Caller,
    pub provenance: Provenance,
    pub traceparent: Option<String>,
    /// The grant FormationAuth verified for a calling member (docs/reference/formation.md#grants).
    pub grant: Option<std::sync::Arc<crate::grant::Grant>>,
    pub card: &'a Card,
    pub push: &'a super::push::Configs,
    /// SubscribeToTask's `Last-Event-ID`, already read (docs/a2a.md, "Resuming a stream").
    pub last_event_id: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_rule() {
        let table = [
            (None, None, Origin::Event, Trust::Untrusted),
            (Some("event"), Some("trusted"), Origin::Event, Trust::Untrusted),
            (Some("peer"), None, Origin::Peer, Trust::Untrusted),
            (Some("peer"), Some("trusted"), Origin::Peer, Trust::Trusted),
            (
                Some("completion"),
                Some("untrusted"),
                Origin::Completion,
                Trust::Untrusted,
            ),
            (
                Some("completion"),
                Some("TRUSTED"),
                Origin::Completion,
                Trust::Untrusted,
            ),
            (Some("Peer"), Some("trusted"), Origin::Event, Trust::Untrusted),
        ];
        for (o, t, origin, trust) in table {
            assert_eq!(
                Provenance::from_headers(o, t),
                Provenance { origin, trust },
                "{o:?} {t:?}"
            );
        }
    }
}
