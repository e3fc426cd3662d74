//! Supervised restarts of a formation's peers [ours] (docs/reference/formation.md#restarts):
//! `mur run --roster --restart N/SECS` lets the launcher start again a peer whose process ended
//! while the formation runs, at most `N` times within any `SECS` seconds, as OTP's restart
//! intensity has it; one more end within the window and the peer is withdrawn as without the
//! policy.
//!
//! Pure: the policy as written, and the count of recent restarts against an instant the caller
//! passes in (an injectable clock, so the window is tested without waiting for it).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The most restarts a window may allow: far beyond any useful policy, and it bounds what the
/// launcher remembers per peer.
pub const MAX_RESTARTS: u32 = 1000;
/// The longest window, in seconds: a day.
pub const MAX_WINDOW_SECS: u64 = 86_400;

/// At most `max` restarts of one peer within any `within`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub max: u32,
    pub within: Duration,
}

impl Policy {
    /// `N/SECS` as `--restart` takes it; the error says what is wrong with it (E-RST-001's
    /// message).
    pub fn parse(text: &str) -> Result<Policy, String> {
        let shown = crate::diag::shown(text);
        let Some((n, secs)) = text.split_once('/') else {
            return Err(format!(
                "--restart {shown}: the policy is not N/SECS (restarts per window of seconds)"
            ));
        };
        // Digits only (no sign, no space), and few enough that the bounds below decide.
        let number = |s: &str| -> Option<u64> {
            if s.is_empty() || s.len() > 6 || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        let (Some(n), Some(secs)) = (number(n), number(secs)) else {
            return Err(format!(
                "--restart {shown}: N and SECS must be whole numbers (restarts per window of seconds)"
            ));
        };
        if n == 0 || n > u64::from(MAX_RESTARTS) {
            return Err(format!(
                "--restart {shown}: N must be from 1 to {MAX_RESTARTS} restarts"
            ));
        }
        if secs == 0 || secs > MAX_WINDOW_SECS {
            return Err(format!(
                "--restart {shown}: SECS must be from 1 to {MAX_WINDOW_SECS} seconds"
            ));
        }
        Ok(Policy {
            max: n as u32,
            within: Duration::from_secs(secs),
        })
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.max, self.within.as_secs())
    }
}

/// What to do with a peer whose process just ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Start it again: this is restart `nth` within the window (1-based).
    Restart { nth: u32 },
    /// It already had `max` restarts within the window: withdraw it.
    GiveUp,
}

/// One peer's recent restarts.
#[derive(Debug, Clone)]
pub struct Intensity {
    policy: Policy,
    /// When each restart within the window was decided, oldest first; at most `policy.max`.
    recent: VecDeque<Instant>,
}

impl Intensity {
    pub fn new(policy: Policy) -> Intensity {
        Intensity {
            policy,
            recent: VecDeque::new(),
        }
    }

    /// The peer's process ended at `now`: restart it, or give up when it was restarted `max`
    /// times within the `within` before `now` (a restart exactly `within` ago is outside).
    pub fn ended(&mut self, now: Instant) -> Decision {
        while let Some(&first) = self.recent.front() {
            if now.saturating_duration_since(first) >= self.policy.within {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        if self.recent.len() >= self.policy.max as usize {
            return Decision::GiveUp;
        }
        self.recent.push_back(now);
        Decision::Restart {
            nth: self.recent.len() as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_are_read_or_refused_with_their_reason() {
        let ok = |max, secs| {
            Ok(Policy {
                max,
                within: Duration::from_secs(secs),
            })
        };
        let cases: &[(&str, Result<Policy, &str>)] = &[
            ("3/60", ok(3, 60)),
            ("1/1", ok(1, 1)),
            ("1000/86400", ok(1000, 86_400)),
            ("3", Err("the policy is not N/SECS")),
            ("", Err("the policy is not N/SECS")),
            ("3/", Err("must be whole numbers")),
            ("/60", Err("must be whole numbers")),
            ("-1/60", Err("must be whole numbers")),
            ("3/6.5", Err("must be whole numbers")),
            ("3/60/1", Err("must be whole numbers")),
            (" 3/60", Err("must be whole numbers")),
            ("99999999999999999999/1", Err("must be whole numbers")),
            ("0/60", Err("N must be from 1 to 1000")),
            ("1001/60", Err("N must be from 1 to 1000")),
            ("3/0", Err("SECS must be from 1 to 86400")),
            ("3/86401", Err("SECS must be from 1 to 86400")),
        ];
        for (text, want) in cases {
            match (Policy::parse(text), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{text:?}"),
                (Err(got), Err(want)) => {
                    assert!(got.starts_with("--restart "), "{text:?}: {got}");
                    assert!(got.contains(want), "{text:?}: {got}");
                }
                (got, _) => panic!("{text:?}: {got:?}"),
            }
        }
        assert_eq!(ok(3, 60).unwrap().to_string(), "3/60");
    }

    #[test]
    fn at_most_n_restarts_within_the_window() {
        use Decision::{GiveUp, Restart};
        let s = Duration::from_secs;
        // (policy, ends at these seconds after the start, decisions)
        type Case<'a> = ((u32, u64), &'a [u64], &'a [Decision]);
        let cases: &[Case] = &[
            ((1, 10), &[0], &[Restart { nth: 1 }]),
            ((1, 10), &[0, 5], &[Restart { nth: 1 }, GiveUp]),
            // The window slides: the first restart is 10 s old at the second end, so outside.
            ((1, 10), &[0, 10], &[Restart { nth: 1 }, Restart { nth: 1 }]),
            (
                (3, 60),
                &[0, 1, 2, 3],
                &[Restart { nth: 1 }, Restart { nth: 2 }, Restart { nth: 3 }, GiveUp],
            ),
            (
                (2, 60),
                &[0, 30, 61, 62],
                &[Restart { nth: 1 }, Restart { nth: 2 }, Restart { nth: 2 }, GiveUp],
            ),
            // A refused end counts for nothing: the next one is judged by the restarts alone.
            (
                (1, 10),
                &[0, 1, 9, 10],
                &[Restart { nth: 1 }, GiveUp, GiveUp, Restart { nth: 1 }],
            ),
        ];
        let start = Instant::now();
        for ((max, secs), ends, want) in cases {
            let mut i = Intensity::new(Policy {
                max: *max,
                within: s(*secs),
            });
            let got: Vec<Decision> = ends.iter().map(|at| i.ended(start + s(*at))).collect();
            assert_eq!(got, *want, "{max}/{secs} ending at {ends:?}");
        }
    }
}
