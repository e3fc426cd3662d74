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
}
