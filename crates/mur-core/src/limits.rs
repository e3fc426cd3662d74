//! What a formation asks of the launcher's process limits, decided without touching them.
//!
//! The launcher holds descriptors for every member at once: before the first spawn every
//! member's channel and lifeline pipe exists (four ends each, docs/reference/formation.md#launch-sequence), and each
//! running peer adds its relayed stdout and stderr and the runtime's handle on the child. At 256
//! members that is well past the common soft limit of 1024, so the launcher raises its soft
//! limit to the hard one when the formation needs it, and refuses before starting anything when
//! even the hard limit is too low ([`nofile`]).

/// Descriptors the launcher may hold per member at its peak: the channel's and the lifeline's
/// write ends, a peer's stdout and stderr read ends, the child's process handle, and while a
/// member is being spawned its two read ends and the exec-error pipe. Counted with headroom:
/// a peer in steady state holds five.
pub const FDS_PER_MEMBER: u64 = 6;

/// Descriptors besides the members': standard streams, the async runtime's poller and wakers,
/// the signal pipe, the store and records files the launcher opens, a terminal.
pub const FDS_BASE: u64 = 64;

/// Descriptors a launch of `members` members needs.
pub fn descriptors_needed(members: usize) -> u64 {
    FDS_BASE.saturating_add(FDS_PER_MEMBER.saturating_mul(members as u64))
}

/// What to do with `RLIMIT_NOFILE` before a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nofile {
    /// The soft limit is enough.
    Enough,
    /// Raise the soft limit to this (the hard limit).
    Raise(u64),
    /// Even the hard limit is below what the launch needs.
    TooLow { needed: u64, hard: u64 },
}

/// The decision for a launch of `members` members under limits `soft` / `hard`
/// (`u64::MAX` is unlimited).
pub fn nofile(members: usize, soft: u64, hard: u64) -> Nofile {
    let needed = descriptors_needed(members);
    if soft >= needed {
        Nofile::Enough
    } else if hard >= needed {
        // The whole hard limit, not just `needed`: the members inherit it, and a member with
        // many callees opens a connection per call in flight.
        Nofile::Raise(hard)
    } else {
        Nofile::TooLow { needed, hard }
    }
}

/// Descriptors a member keeps for itself beside its door's connections: its runtime, records
/// and trace files, the compiled cache, its calls to other members and its provider
/// connections. A door that used them all for connections would lock its own member out.
pub const DOOR_RESERVE: u64 = 96;

/// The fewest connections a door accepts, however low the limit.
pub const DOOR_MIN_CONNECTIONS: usize = 8;

/// Connections a door may hold open under a soft `RLIMIT_NOFILE` of `soft`: below the limit by
/// [`DOOR_RESERVE`], and never above `max`.
pub fn door_connections(soft: u64, max: usize) -> usize {
    let room = usize::try_from(soft.saturating_sub(DOOR_RESERVE)).unwrap_or(usize::MAX);
    room.clamp(DOOR_MIN_CONNECTIONS, max.max(DOOR_MIN_CONNECTIONS))
}

/// How a door's requests in flight are shared among the credentials that hold them, once a
/// request's token is known. The door-wide bound (`max`) is checked first, before any token;
/// past it anyone gets `503`. Within it, one credential other than the operator holds at most
/// a quarter, and all of them together leave an eighth for the operator, so a peer with a
/// genuine token (or several peers) cannot fill the door with streams on its own tasks and
/// keep the operator from the requests that would stop them (GetTask, CancelTask, ListTasks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorShares {
    /// What one credential other than the operator may hold.
    pub per_credential: usize,
    /// What every credential other than the operator may hold together.
    pub all_but_operator: usize,
}

impl DoorShares {
    pub const fn of(max: usize) -> DoorShares {
        DoorShares {
            per_credential: max / 4,
            all_but_operator: max - max / 8,
        }
    }

    /// Whether one more request is admitted, for a caller that is the operator or not, that
    /// already holds `its_own`, while the credentials other than the operator hold
    /// `all_but_operator` together. The operator is bound only by the door-wide bound.
    pub fn admits(&self, operator: bool, its_own: usize, all_but_operator: usize) -> bool {
        operator || (its_own < self.per_credential && all_but_operator < self.all_but_operator)
    }
}

/// The linear memory a component capsule's instances may hold during one task
/// (docs/reference/capsules.md#what-the-host-grants); a member pod's memory limit counts it.
pub const COMPONENT_MEMORY_BYTES: u64 = 256 << 20;

/// The linear memory of one WebAssembly tool call's instance (docs/reference/capsules.md#tools).
pub const TOOL_MEMORY_BYTES: u64 = 128 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_door_keeps_a_reserve_of_descriptors_below_the_limit() {
        let table: [(u64, usize, usize); 6] = [
            (256, 25_600, 160),
            (1024, 25_600, 928),
            (u64::MAX, 25_600, 25_600),
            (1_048_576, 25_600, 25_600),
            (64, 25_600, DOOR_MIN_CONNECTIONS),
            (0, 25_600, DOOR_MIN_CONNECTIONS),
        ];
        for (soft, max, want) in table {
            assert_eq!(door_connections(soft, max), want, "{soft}");
            assert!(
                want == DOOR_MIN_CONNECTIONS || (want as u64) + DOOR_RESERVE <= soft,
                "{soft}"
            );
        }
    }

    #[test]
    fn the_soft_limit_is_raised_only_when_needed_and_only_to_the_hard_one() {
        let unlimited = u64::MAX;
        let table: [(usize, u64, u64, Nofile); 8] = [
            (2, 1024, 1024, Nofile::Enough),
            (160, 1024, 4096, Nofile::Enough),
            (161, 1024, 4096, Nofile::Raise(4096)),
            (256, 1024, 524_288, Nofile::Raise(524_288)),
            (256, 1024, unlimited, Nofile::Raise(unlimited)),
            (256, 1600, 1600, Nofile::Enough),
            (
                256,
                1024,
                1024,
                Nofile::TooLow {
                    needed: 1600,
                    hard: 1024,
                },
            ),
            (12, 32, 32, Nofile::TooLow { needed: 136, hard: 32 }),
        ];
        for (members, soft, hard, want) in table {
            assert_eq!(nofile(members, soft, hard), want, "{members} members, {soft}/{hard}");
        }
        assert_eq!(descriptors_needed(usize::MAX), u64::MAX);
    }

    #[test]
    fn a_credential_holds_a_quarter_of_a_door_and_the_operator_keeps_an_eighth() {
        let shares = DoorShares::of(256);
        assert_eq!((shares.per_credential, shares.all_but_operator), (64, 224));
        // (operator, its own, all but the operator's, admitted)
        let table: [(bool, usize, usize, bool); 9] = [
            (false, 0, 0, true),
            (false, 63, 63, true),
            (false, 64, 64, false),
            (false, 65, 65, false),
            (false, 0, 223, true),
            (false, 0, 224, false),
            (true, 0, 224, true),
            (true, 255, 224, true),
            (false, 10, 200, true),
        ];
        for (operator, its_own, others, want) in table {
            assert_eq!(
                shares.admits(operator, its_own, others),
                want,
                "{operator} {its_own} {others}"
            );
        }
    }
}
