//! A member's side of its token budgets (docs/reference/formation.md#budgets): the session's own
//! (`inference.max_session_tokens`, a [`Ledger`] of one holder kept here) and the formation's
//! (`mur run --roster --max-tokens`, kept by the launcher and reached over the budget channel,
//! `MURMUR_FORMATION_BUDGET`). Before each provider request the agent reserves the most the
//! request can cost from both; after it, it settles both with what the provider reported.
//!
//! A reservation is a [`Hold`], which ends exactly once whatever ends the turn: settled with the
//! turn's cost, or, dropped unsettled (the task was cancelled, by a caller, the operator or the
//! formation's deadline, or its future was dropped), settled by its own `Drop`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::budget::{Grant, Ledger};
use crate::runner::authority::Authority;
use crate::wire::budget_line::{Ask, Reply};

/// Why a turn may not be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The session's own budget has no room: what is left of it, and what set it
    /// (`inference.max_session_tokens` or `--max-tokens`).
    Session {
        limit: u64,
        left: i64,
        source: &'static str,
    },
    /// The formation's budget has no room: what is left of it.
    Formation { left: i64 },
    /// The budget of the task's grant, or the formation's, has no room: what is left of it.
    Grant { left: i64 },
    /// The launcher's budget cannot be reached (it ended, or its channel broke).
    Unreachable(String),
}

impl Refusal {
    /// The task's failure text (E-BUD-001 / E-BUD-002), naming the budget.
    pub fn failure(&self, asked: u64) -> String {
        match self {
            Refusal::Session { limit, left, source } => crate::diag::Diagnostic::new(
                crate::diag::E_BUD_002,
                format!(
                    "the session's token budget ({source}: {limit}) has {} token(s) left, and the next model turn may cost up to {asked}",
                    left.max(&0)
                ),
            )
            .to_string(),
            Refusal::Formation { left } => crate::diag::Diagnostic::new(
                crate::diag::E_BUD_001,
                format!(
                    "the formation's token budget (--max-tokens, or the default guard of {} tokens) has {} token(s) left, and the next model turn may cost up to {asked}",
                    crate::guard::DEFAULT_MAX_TOKENS,
                    left.max(&0)
                ),
            )
            .to_string(),
            Refusal::Grant { left } => crate::diag::Diagnostic::new(
                crate::diag::E_BUD_004,
                format!(
                    "the task's token budget (its grant's, narrowed along the calls above it) has {} token(s) left, and the next model turn may cost up to {asked}",
                    left.max(&0)
                ),
            )
            .to_string(),
            Refusal::Unreachable(why) => crate::diag::Diagnostic::new(
                crate::diag::E_BUD_001,
                format!("the formation's token budget cannot be reached ({why}), so no model turn is sent"),
            )
            .with_hint("the launcher keeps the formation's budget; `mur ps` shows whether it still runs")
            .to_string(),
        }
    }

    /// What is left, when the refusal says: the reserve a last turn may use.
    pub fn left(&self) -> Option<i64> {
        match self {
            Refusal::Session { left, .. } | Refusal::Formation { left } | Refusal::Grant { left } => Some(*left),
            Refusal::Unreachable(_) => None,
        }
    }
}

/// A granted reservation. It ends exactly once: [`Hold::settle`] with what the turn cost, or,
/// dropped unsettled, its `Drop`: once its request may have reached the provider
/// ([`Hold::sending`]) it is charged its whole reservation, as a reply without usage is (the
/// provider may bill a request nobody waited for); before that it is returned uncharged.
#[derive(Debug)]
pub struct Hold {
    spending: Arc<Spending>,
    id: u64,
    tokens: u64,
    session: bool,
    formation: bool,
    sent: bool,
    ended: bool,
}

impl Hold {
    /// The tokens reserved.
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// The request is about to be sent: from now on, abandoning it charges the reservation.
    pub fn sending(&mut self) {
        self.sent = true;
    }

    /// Settles the hold with `used` tokens in both budgets.
    pub fn settle(mut self, used: u64) -> Settled {
        self.ended = true;
        self.spending.end(&self, Some(used))
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        self.ended = true;
        let used = self.sent.then_some(self.tokens);
        let _ = self.spending.end(&*self, used);
    }
}

/// What settling reported: the formation's and the session's budgets after it, where kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    pub formation_left: Option<i64>,
    pub session_left: Option<i64>,
}

/// What sets a session's budget unless a lone session's `--max-tokens` does.
pub const SESSION_SOURCE: &str = "inference.max_session_tokens";

/// Both budgets of one session; shared by its tasks.
#[derive(Debug, Default)]
pub struct Spending {
    session: Option<Mutex<Ledger>>,
    session_limit: Option<u64>,
    launcher: Option<Arc<Authority>>,
    /// The launcher keeps a formation budget (`--max-tokens`): every turn reserves there.
    formation: bool,
    /// What set `session_limit`, named in its refusal.
    session_source: &'static str,
    next: AtomicU64,
}

impl Spending {
    /// No budget: every reservation is granted at once and nothing is kept.
    pub fn unlimited() -> Spending {
        Spending::default()
    }

    /// The session's budget `session` (tokens), and the formation's over `launcher`, either
    /// optional.
    pub fn new(session: Option<u64>, launcher: Option<Arc<Authority>>) -> Spending {
        Spending {
            session: session.map(|n| Mutex::new(Ledger::new(n, 1))),
            session_limit: session,
            formation: launcher.is_some(),
            launcher,
            session_source: SESSION_SOURCE,
            next: AtomicU64::new(1),
        }
    }

    /// Whether the launcher keeps a formation budget; without one, its link still carries the
    /// reservations of a task whose grant has a budget.
    pub fn with_formation_budget(mut self, formation: bool) -> Spending {
        self.formation = formation;
        self
    }

    /// Names what set the session's budget, for its refusal (`--max-tokens` for a lone session's
    /// flag; the manifest's key otherwise).
    pub fn session_named(mut self, source: &'static str) -> Spending {
        self.session_source = source;
        self
    }

    /// Whether any budget is kept (the `inference` record then carries the reservation).
    pub fn kept(&self) -> bool {
        self.session.is_some() || (self.launcher.is_some() && self.formation)
    }

    /// [`Spending::kept`] for a task under a grant with a budget (`grant`, its id).
    pub fn kept_for(&self, grant: Option<&str>) -> bool {
        self.kept() || (grant.is_some() && self.launcher.is_some())
    }

    /// Reserves `tokens` from the session's budget, then from the formation's; a refusal of the
    /// second returns the first.
    pub fn reserve(self: &Arc<Self>, tokens: u64) -> Result<Hold, Refusal> {
        self.reserve_under(tokens, None)
    }

    /// [`Spending::reserve`] for a task under the grant `grant` with a budget: the launcher's
    /// reservation is counted against it and every grant above it
    /// (docs/reference/formation.md#grants).
    pub fn reserve_under(self: &Arc<Self>, tokens: u64, grant: Option<&str>) -> Result<Hold, Refusal> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut hold = Hold {
            spending: Arc::clone(self),
            id,
            tokens,
            session: false,
            formation: false,
            sent: false,
            ended: false,
        };
        if let Some(ledger) = &self.session {
            let mut l = crate::sync::lock(ledger);
            match l.reserve(0, id, tokens) {
                Ok(Grant::Granted { .. }) => hold.session = true,
                Ok(Grant::Refused { .. }) | Err(_) => {
                    return Err(Refusal::Session {
                        limit: self.session_limit.unwrap_or_default(),
                        left: l.left(),
                        source: self.session_source,
                    });
                }
            }
        }
        if let Some(link) = &self.launcher
            && (self.formation || grant.is_some())
        {
            let answer = match grant {
                Some(g) => link.reserve_under(id, tokens, g),
                None => link.budget(Ask::Reserve { id, tokens }),
            };
            let refusal = match answer {
                Ok(Reply::Granted { id: got, .. }) if got == id => None,
                Ok(Reply::Refused { id: got, left }) if got == id && grant.is_some() => Some(Refusal::Grant { left }),
                Ok(Reply::Refused { id: got, left }) if got == id => Some(Refusal::Formation { left }),
                Ok(other) => Some(Refusal::Unreachable(format!(
                    "the launcher answered out of turn: {}",
                    other.line().trim_end()
                ))),
                Err(why) => Some(Refusal::Unreachable(why)),
            };
            if let Some(refusal) = refusal {
                // Dropping the hold gives the session's part back.
                return Err(refusal);
            }
            hold.formation = true;
        }
        Ok(hold)
    }

    /// Ends `hold` in both budgets: settled with `used` tokens, or, `None`, returned uncharged.
    /// Only a [`Hold`] calls this, once.
    fn end(&self, hold: &Hold, used: Option<u64>) -> Settled {
        let mut out = Settled::default();
        if hold.session
            && let Some(ledger) = &self.session
        {
            let mut l = crate::sync::lock(ledger);
            out.session_left = match used {
                Some(used) => l.settle(0, hold.id, used),
                None => l.give_back(0, hold.id),
            }
            .ok();
        }
        if hold.formation
            && let Some(link) = &self.launcher
        {
            let ask = match used {
                Some(used) => Ask::Settle { id: hold.id, used },
                None => Ask::Return { id: hold.id },
            };
            match link.budget(ask) {
                Ok(Reply::Settled { id, left }) if id == hold.id => out.formation_left = Some(left),
                Ok(_) | Err(_) => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;

    /// A launcher's side on a thread: answers lines with `ledger`, as the keeper does.
    fn launcher_of(ledger: Arc<Mutex<Ledger>>) -> UnixStream {
        let (member, launcher) = UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let mut w = launcher.try_clone().unwrap();
            for line in BufReader::new(launcher).lines().map_while(Result::ok) {
                let mut ledger = crate::sync::lock(&ledger);
                let reply = match Ask::parse(&line).unwrap() {
                    Ask::Reserve { id, tokens } => match ledger.reserve(0, id, tokens).unwrap() {
                        Grant::Granted { left } => Reply::Granted { id, left },
                        Grant::Refused { left } => Reply::Refused { id, left },
                    },
                    Ask::Settle { id, used } => Reply::Settled {
                        id,
                        left: ledger.settle(0, id, used).unwrap(),
                    },
                    Ask::Return { id } => Reply::Settled {
                        id,
                        left: ledger.give_back(0, id).unwrap(),
                    },
                };
                drop(ledger);
                w.write_all(reply.line().as_bytes()).unwrap();
            }
        });
        member
    }

    fn launcher(limit: u64) -> UnixStream {
        launcher_of(Arc::new(Mutex::new(Ledger::new(limit, 1))))
    }

    fn spending(session: Option<u64>, launcher: UnixStream) -> Arc<Spending> {
        Arc::new(Spending::new(session, Some(Arc::new(Authority::new(launcher)))))
    }

    #[test]
    fn both_budgets_grant_settle_and_refuse_in_turn() {
        let s = spending(Some(500), launcher(1000));
        let h = s.reserve(300).unwrap();
        assert_eq!(
            h.settle(120),
            Settled {
                formation_left: Some(880),
                session_left: Some(380)
            }
        );
        // The session's budget refuses first; the formation's is not asked.
        assert_eq!(
            s.reserve(400).err(),
            Some(Refusal::Session {
                limit: 500,
                left: 380,
                source: SESSION_SOURCE
            })
        );
        // The formation's refuses, and the session's hold is returned.
        let s = spending(Some(10_000), launcher(100));
        assert_eq!(s.reserve(200).err(), Some(Refusal::Formation { left: 100 }));
        let h = s.reserve(100).unwrap();
        assert_eq!(h.settle(100).session_left, Some(9_900));
    }

    #[test]
    fn a_hold_ends_exactly_once_whatever_ends_it() {
        let formation = Arc::new(Mutex::new(Ledger::new(10_000, 1)));
        let s = spending(Some(10_000), launcher_of(Arc::clone(&formation)));
        let session = |s: &Spending| {
            let l = crate::sync::lock(s.session.as_ref().unwrap());
            (l.spent(), l.held(), l.account(0).unwrap().turns)
        };
        let figures = || {
            let l = crate::sync::lock(&formation);
            (l.spent(), l.held(), l.account(0).unwrap().turns)
        };
        // Dropped before its request was sent: returned in both budgets, uncharged, no turn.
        let h = s.reserve(300).unwrap();
        assert_eq!((figures().1, session(&s).1), (300, 300), "held while the turn runs");
        drop(h);
        assert_eq!((figures(), session(&s)), ((0, 0, 0), (0, 0, 0)));
        // Dropped once its request was out (a cancelled turn, a dropped future): charged its
        // whole reservation, once.
        let mut h = s.reserve(400).unwrap();
        h.sending();
        drop(h);
        assert_eq!((figures(), session(&s)), ((400, 0, 1), (400, 0, 1)));
        // Settled: charged what it used, and its drop adds nothing.
        let mut h = s.reserve(500).unwrap();
        h.sending();
        h.settle(20);
        assert_eq!((figures(), session(&s)), ((420, 0, 2), (420, 0, 2)));
        // A future holding a hold, dropped mid-flight (what a cancel does to a turn).
        let mut h = s.reserve(600).unwrap();
        h.sending();
        let in_flight = async move {
            std::future::pending::<()>().await;
            h.settle(0);
        };
        let mut in_flight = Box::pin(in_flight);
        let _ = in_flight
            .as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        assert_eq!(figures().1, 600, "held while in flight");
        drop(in_flight);
        assert_eq!((figures(), session(&s)), ((1020, 0, 3), (1020, 0, 3)));
    }

    #[test]
    fn a_launcher_that_is_gone_refuses_every_turn() {
        let (member, launcher) = UnixStream::pair().unwrap();
        drop(launcher);
        let s = Arc::new(Spending::new(None, Some(Arc::new(Authority::new(member)))));
        let refused = s.reserve(10).unwrap_err();
        assert!(matches!(&refused, Refusal::Unreachable(_)), "{refused:?}");
        assert!(refused.failure(10).contains("E-BUD-001"), "{}", refused.failure(10));
        assert!(matches!(s.reserve(10), Err(Refusal::Unreachable(_))));
        assert!(!Spending::unlimited().kept());
    }
}
