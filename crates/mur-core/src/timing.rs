//! Every timing constant of docs/reference/formation.md#timing, in one place, with a test-only
//! override.
//!
//! Production code reads durations from [`Timing::get`]. Integration tests shorten them by setting
//! `MURMUR_TEST_TIMING` in the environment of the `mur` processes they start, e.g.
//! `MURMUR_TEST_TIMING=member_teardown=300ms,launcher_grace=500ms`, so wind-down paths are
//! exercised in well under a second instead of 20–25 s. Unknown names or bad values are ignored,
//! and every value is clamped to the spec's: this is a test hook, not an operator setting, so it
//! can only shorten what it names. A process where it takes effect says so on stderr (W-ENV-001);
//! the launcher hands members the clamped overrides explicitly (`launcher::spawn`).

use std::sync::OnceLock;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// A peer's readiness budget from its spawn
    /// (docs/reference/formation.md#how-the-launcher-waits).
    pub peer_readiness: Duration,
    /// Door probe interval during readiness.
    pub probe_interval: Duration,
    pub probe_connect: Duration,
    pub probe_read: Duration,
    /// Launcher poll cadence.
    pub launcher_poll: Duration,
    /// Grace for a peer to exit after closing stdout before reporting.
    pub exit_grace_after_eof: Duration,
    /// Wait for the first channel line (docs/reference/formation.md#member-intake).
    pub first_channel_line: Duration,
    /// Wait for a callee's door URL to arrive (docs/reference/capsules.md#calls-by-address).
    pub address_wait: Duration,
    /// Member teardown backstop after a wind-down starts → exit 143
    /// (docs/reference/formation.md#how-a-member-ends).
    pub member_teardown: Duration,
    /// Launcher grace before SIGKILL of a member's process group
    /// (docs/reference/formation.md#lifelines).
    pub launcher_grace: Duration,
    /// Idle wait for a first task (`MURMUR_A2A_TIMEOUT_SECS`, docs/reference/manifest.md#keys).
    pub idle_first_task: Duration,
    /// Bound of one call-member call (`MURMUR_DELEGATION_TIMEOUT_SECS`,
    /// docs/reference/capsules.md#calls-between-members).
    pub call_bound: Duration,
    /// First busy re-offer wait, and its cap (docs/reference/capsules.md#calls-between-members).
    pub busy_first: Duration,
    pub busy_max: Duration,
    /// Answer polling interval and per-request timeout
    /// (docs/reference/capsules.md#calls-between-members).
    pub answer_poll: Duration,
    pub answer_request: Duration,
    /// Call-member send timeout (docs/reference/capsules.md#calls-between-members).
    pub call_send: Duration,
    /// A component task's time budget [ours].
    pub component_task: Duration,
    /// Bound of reading one request body at a door, from its first byte to its last [ours].
    pub door_body: Duration,
    /// Bound of a door connection between requests: from its accept, or the end of its last
    /// reply, until the next request head has arrived whole; past it the connection closes
    /// [ours].
    pub door_head: Duration,
    /// Bound of a door reply that makes no write progress (a client that stopped reading);
    /// past it the connection closes and what the reply held is freed [ours].
    pub door_write_stall: Duration,
    /// How long a member that ends after a door task keeps its door open for that task's caller
    /// to read the end, at most; it closes as soon as every such end was shown [ours].
    pub answer_linger: Duration,
    /// A provider request's first backoff wait (doubling, jittered), and the longest single
    /// wait, the provider's `retry-after` included (docs/reference/capsules.md#model-capsules)
    /// [ours].
    pub inference_retry: Duration,
    pub inference_retry_max: Duration,
    /// Shortens the waits a provider asks for; only tests set it (no limit otherwise).
    pub inference_retry_after_cap: Duration,
    /// Longest silence between two events of a streamed provider reply before the task fails
    /// [ours]. Anthropic pings every few seconds; a reasoning model may think a while before its
    /// first token, which the whole reply's 300 s bound covers anyway.
    pub inference_stream_idle: Duration,
    /// Bound of one call of a model capsule's tool, WebAssembly or MCP
    /// (docs/reference/capsules.md#tools).
    pub tool_call: Duration,
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
        // actix-web's keep-alive (5 s) plus its first-head timeout (5 s): what the first request
        // of a connection already had, now for every request of it.
        door_head: Duration::from_secs(10),
        door_write_stall: Duration::from_secs(30),
        // Ten of a caller's GetTask polls (answer_poll, 500 ms).
        answer_linger: Duration::from_secs(5),
        inference_retry: Duration::from_secs(1),
        inference_retry_max: Duration::from_secs(60),
        inference_retry_after_cap: Duration::MAX,
        inference_stream_idle: Duration::from_secs(120),
        tool_call: Duration::from_secs(60),
    };

    /// The process-wide timing: the spec's values, the documented env knobs, then the test hook.
    pub fn get() -> &'static Timing {
        &state().0
    }

    /// The test overrides in effect, as `MURMUR_TEST_TIMING` text naming only known names with
    /// their clamped values; `None` when none is in effect. The launcher passes this to members.
    pub fn test_overrides() -> Option<&'static str> {
        state().1.as_deref()
    }

    /// The timing `env` describes, and the canonical text of the test overrides applied.
    fn from_env(env: impl Fn(&str) -> Option<String>) -> (Timing, Option<String>) {
        let mut t = Timing::SPEC;
        if let Some(s) = env_secs(env("MURMUR_A2A_TIMEOUT_SECS")) {
            t.idle_first_task = s;
        }
        if let Some(s) = env_secs(env("MURMUR_DELEGATION_TIMEOUT_SECS")) {
            t.call_bound = s;
        }
        let applied = env("MURMUR_TEST_TIMING")
            .map(|spec| t.apply_overrides(&spec))
            .unwrap_or_default();
        let text = (!applied.is_empty()).then(|| {
            applied
                .iter()
                .map(|(name, d)| format!("{name}={}ms", d.as_millis()))
                .collect::<Vec<_>>()
                .join(",")
        });
        (t, text)
    }

    /// Applies `name=value,…` overrides; values are `<n>ms` or `<n>s`, each clamped to the spec's
    /// value of its name. Returns what was applied, in order.
    pub fn apply_overrides(&mut self, spec: &str) -> Vec<(&'static str, Duration)> {
        let mut applied = Vec::new();
        for item in spec.split(',') {
            let Some((name, value)) = item.split_once('=') else {
                continue;
            };
            let Some(d) = parse_duration(value.trim()) else {
                continue;
            };
            let Some(name) = OVERRIDABLE.iter().copied().find(|n| *n == name.trim()) else {
                continue;
            };
            let (slot, spec_value) = self.slot(name);
            *slot = d.min(spec_value);
            applied.retain(|(n, _)| *n != name);
            applied.push((name, *slot));
        }
        applied
    }

    /// The field `name` sets, and its spec value (the most an override may set).
    fn slot(&mut self, name: &str) -> (&mut Duration, Duration) {
        let s = Timing::SPEC;
        match name {
            "peer_readiness" => (&mut self.peer_readiness, s.peer_readiness),
            "probe_interval" => (&mut self.probe_interval, s.probe_interval),
            "launcher_poll" => (&mut self.launcher_poll, s.launcher_poll),
            "exit_grace_after_eof" => (&mut self.exit_grace_after_eof, s.exit_grace_after_eof),
            "first_channel_line" => (&mut self.first_channel_line, s.first_channel_line),
            "address_wait" => (&mut self.address_wait, s.address_wait),
            "member_teardown" => (&mut self.member_teardown, s.member_teardown),
            "launcher_grace" => (&mut self.launcher_grace, s.launcher_grace),
            "idle_first_task" => (&mut self.idle_first_task, s.idle_first_task),
            "call_bound" => (&mut self.call_bound, s.call_bound),
            "busy_first" => (&mut self.busy_first, s.busy_first),
            "busy_max" => (&mut self.busy_max, s.busy_max),
            "answer_poll" => (&mut self.answer_poll, s.answer_poll),
            "call_send" => (&mut self.call_send, s.call_send),
            "door_body" => (&mut self.door_body, s.door_body),
            "door_head" => (&mut self.door_head, s.door_head),
            "door_write_stall" => (&mut self.door_write_stall, s.door_write_stall),
            "answer_linger" => (&mut self.answer_linger, s.answer_linger),
            "inference_retry" => (&mut self.inference_retry, s.inference_retry),
            "inference_retry_max" => (&mut self.inference_retry_max, s.inference_retry_max),
            "inference_retry_after_cap" => (&mut self.inference_retry_after_cap, s.inference_retry_after_cap),
            "inference_stream_idle" => (&mut self.inference_stream_idle, s.inference_stream_idle),
            "tool_call" => (&mut self.tool_call, s.tool_call),
            _ => (&mut self.component_task, s.component_task),
        }
    }
}

/// The names `MURMUR_TEST_TIMING` may set.
const OVERRIDABLE: [&str; 24] = [
    "peer_readiness",
    "probe_interval",
    "launcher_poll",
    "exit_grace_after_eof",
    "first_channel_line",
    "address_wait",
    "member_teardown",
    "launcher_grace",
    "idle_first_task",
    "call_bound",
    "busy_first",
    "busy_max",
    "answer_poll",
    "call_send",
    "component_task",
    "door_body",
    "door_head",
    "door_write_stall",
    "answer_linger",
    "inference_retry",
    "inference_retry_max",
    "inference_retry_after_cap",
    "inference_stream_idle",
    "tool_call",
];

/// The most the documented knobs (`MURMUR_A2A_TIMEOUT_SECS`, `MURMUR_DELEGATION_TIMEOUT_SECS`)
/// set: a year, far inside what `Instant + Duration` holds, so no deadline built on them overflows.
pub const MAX_KNOB: Duration = Duration::from_secs(365 * 86_400);

/// `d` in whole milliseconds, saturating at `u64::MAX` (trace records and spans carry `u64`).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The wall clock in Unix ms: the time grants' deadlines count in, the same in every process of
/// a formation (0 before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, millis)
}

/// The process's timing and test-override text, read once; announces the overrides on first read.
fn state() -> &'static (Timing, Option<String>) {
    static T: OnceLock<(Timing, Option<String>)> = OnceLock::new();
    T.get_or_init(|| {
        let state = Timing::from_env(|v| std::env::var(v).ok());
        // A formation member's launcher has announced them already
        // (docs/reference/formation.md#member-environment).
        let reported = std::env::var_os("MURMUR_HOST_WARNINGS_REPORTED").is_some_and(|v| v == "1");
        if let (Some(text), false) = (&state.1, reported) {
            crate::diag::Diagnostic::new(
                crate::diag::W_ENV_001,
                format!("MURMUR_TEST_TIMING is set, so these test-only timings are in effect: {text}"),
            )
            .with_hint("unset MURMUR_TEST_TIMING: it shortens the runtime's waits for its own tests")
            .eprint("");
        }
        state
    })
}

/// A positive integer number of seconds, at most [`MAX_KNOB`].
fn env_secs(value: Option<String>) -> Option<Duration> {
    let v: u64 = value?.trim().parse().ok()?;
    (v > 0).then(|| Duration::from_secs(v).min(MAX_KNOB))
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

    #[test]
    fn huge_values_are_clamped_and_every_deadline_built_on_them_fits() {
        let env = |spec: &'static str| {
            move |v: &str| match v {
                "MURMUR_TEST_TIMING" => Some(spec.to_string()),
                "MURMUR_A2A_TIMEOUT_SECS" | "MURMUR_DELEGATION_TIMEOUT_SECS" => Some(u64::MAX.to_string()),
                _ => None,
            }
        };
        let (t, text) = Timing::from_env(env(
            "launcher_grace=18446744073709551615s,member_teardown=18446744073709551615ms,peer_readiness=99999999999999999999999s",
        ));
        assert_eq!(t.launcher_grace, Timing::SPEC.launcher_grace);
        assert_eq!(t.member_teardown, Timing::SPEC.member_teardown);
        assert_eq!(
            t.peer_readiness,
            Timing::SPEC.peer_readiness,
            "an unparsable value is ignored"
        );
        assert_eq!(t.idle_first_task, MAX_KNOB);
        assert_eq!(t.call_bound, MAX_KNOB);
        assert_eq!(text.as_deref(), Some("launcher_grace=25000ms,member_teardown=20000ms"));
        let now = std::time::Instant::now();
        for d in [t.launcher_grace, t.member_teardown, t.idle_first_task, t.call_bound] {
            assert!(now.checked_add(d).is_some(), "{d:?}");
        }
    }

    #[test]
    fn the_override_text_names_what_took_effect_once_each() {
        let table = [
            ("", None),
            ("bogus=1s,launcher_grace=x", None),
            ("launcher_grace=300ms", Some("launcher_grace=300ms")),
            (
                "busy_first=1s, busy_first=100ms ,call_send=2s",
                Some("busy_first=100ms,call_send=2000ms"),
            ),
        ];
        for (spec, want) in table {
            let (_, text) = Timing::from_env(|v| (v == "MURMUR_TEST_TIMING").then(|| spec.to_string()));
            assert_eq!(text.as_deref(), want, "{spec}");
        }
        let (t, text) = Timing::from_env(|_| None);
        assert_eq!((t, text), (Timing::SPEC, None));
    }
}
