//! Every timing constant of runtime.md §18, in one place, with a test-only override.
//!
//! Production code reads durations from [`Timing::get`]. Integration tests shorten them by setting
//! `MURMUR_TEST_TIMING` in the environment of the `mur` processes they start, e.g.
//! `MURMUR_TEST_TIMING=member_teardown=300ms,launcher_grace=500ms`, so wind-down paths are
//! exercised in well under a second instead of 20–25 s. Unknown names or bad values are ignored:
//! this is a test hook, not an operator setting, and it never lengthens anything it does not name.

use std::sync::OnceLock;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A peer's readiness budget from its spawn (§9.5).
    pub peer_readiness: Duration,
    /// Door probe interval during readiness.
    pub probe_interval: Duration,
    pub probe_connect: Duration,
    pub probe_read: Duration,
    /// Launcher poll cadence.
    pub launcher_poll: Duration,
    /// Grace for a peer to exit after closing stdout before reporting.
    pub exit_grace_after_eof: Duration,
    /// Wait for the first channel line (§10.3).
    pub first_channel_line: Duration,
    /// Wait for a callee's door URL to arrive (§12.2).
    pub address_wait: Duration,
    /// Member teardown backstop after a wind-down starts → exit 143 (§13.2).
    pub member_teardown: Duration,
    /// Launcher grace before SIGKILL of a member's process group (§13.5).
    pub launcher_grace: Duration,
    /// Idle wait for a first task (`MURMUR_A2A_TIMEOUT_SECS`, §6.4).
    pub idle_first_task: Duration,
    /// Bound of one call-member call (`MURMUR_DELEGATION_TIMEOUT_SECS`, §11.4).
    pub call_bound: Duration,
    /// First busy re-offer wait, and its cap (§11.4).
    pub busy_first: Duration,
    pub busy_max: Duration,
    /// Answer polling interval and per-request timeout (§11.4).
    pub answer_poll: Duration,
    pub answer_request: Duration,
    /// Call-member send timeout (§11.2).
    pub call_send: Duration,
    /// A component task's time budget [ours].
    pub component_task: Duration,
    /// Bound of reading one request body at a door, from its first byte to its last [ours].
    pub door_body: Duration,
}

impl Timing {
    pub const SPEC: Timing = Timing {
        peer_readiness: Duration::from_secs(180),
        probe_interval: Duration::from_millis(100),
        probe_connect: Duration::from_secs(2),
        probe_read: Duration::from_secs(5),
        launcher_poll: Duration::from_millis(50),
        exit_grace_after_eof: Duration::from_secs(2),
        first_channel_line: Duration::from_secs(10),
        address_wait: Duration::from_secs(10),
        member_teardown: Duration::from_secs(20),
        launcher_grace: Duration::from_secs(25),
        idle_first_task: Duration::from_secs(30),
        call_bound: Duration::from_secs(600),
        busy_first: Duration::from_secs(1),
        busy_max: Duration::from_secs(8),
        answer_poll: Duration::from_millis(500),
        answer_request: Duration::from_secs(5),
        call_send: Duration::from_secs(30),
        component_task: Duration::from_secs(600),
        // The call-member send timeout: a caller of ours gives up on its request by then anyway,
        // and 8 MiB needs under 300 KB/s to arrive in time.
        door_body: Duration::from_secs(30),
    };

    /// The process-wide timing: the spec's values, the documented env knobs, then the test hook.
    pub fn get() -> &'static Timing {
        static T: OnceLock<Timing> = OnceLock::new();
        T.get_or_init(|| {
            let mut t = Timing::SPEC;
            if let Some(s) = env_secs("MURMUR_A2A_TIMEOUT_SECS") {
                t.idle_first_task = s;
            }
            if let Some(s) = env_secs("MURMUR_DELEGATION_TIMEOUT_SECS") {
                t.call_bound = s;
            }
            if let Ok(spec) = std::env::var("MURMUR_TEST_TIMING") {
                t.apply_overrides(&spec);
            }
            t
        })
    }

    /// Applies `name=value,…` overrides; values are `<n>ms` or `<n>s`.
    pub fn apply_overrides(&mut self, spec: &str) {
        for item in spec.split(',') {
            let Some((name, value)) = item.split_once('=') else {
                continue;
            };
            let Some(d) = parse_duration(value.trim()) else {
                continue;
            };
            let slot = match name.trim() {
                "peer_readiness" => &mut self.peer_readiness,
                "probe_interval" => &mut self.probe_interval,
                "launcher_poll" => &mut self.launcher_poll,
                "exit_grace_after_eof" => &mut self.exit_grace_after_eof,
                "first_channel_line" => &mut self.first_channel_line,
                "address_wait" => &mut self.address_wait,
                "member_teardown" => &mut self.member_teardown,
                "launcher_grace" => &mut self.launcher_grace,
                "idle_first_task" => &mut self.idle_first_task,
                "call_bound" => &mut self.call_bound,
                "busy_first" => &mut self.busy_first,
                "busy_max" => &mut self.busy_max,
                "answer_poll" => &mut self.answer_poll,
                "call_send" => &mut self.call_send,
                "component_task" => &mut self.component_task,
                "door_body" => &mut self.door_body,
                _ => continue,
            };
            *slot = d;
        }
    }
}

/// A positive integer number of seconds from the environment.
fn env_secs(var: &str) -> Option<Duration> {
    let v: u64 = std::env::var(var).ok()?.trim().parse().ok()?;
    (v > 0).then(|| Duration::from_secs(v))
}

fn parse_duration(v: &str) -> Option<Duration> {
    if let Some(ms) = v.strip_suffix("ms") {
        return ms.parse().ok().map(Duration::from_millis);
    }
    v.strip_suffix('s').unwrap_or(v).parse().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_name_only_what_they_name() {
        let mut t = Timing::SPEC;
        t.apply_overrides("member_teardown=300ms, launcher_grace=2s,bogus=1s,address_wait=x");
        assert_eq!(t.member_teardown, Duration::from_millis(300));
        assert_eq!(t.launcher_grace, Duration::from_secs(2));
        assert_eq!(t.address_wait, Timing::SPEC.address_wait);
        assert_eq!(t.peer_readiness, Duration::from_secs(180));
    }
}
