//! The formation's token budget (`mur run --roster --max-tokens`,
//! docs/reference/formation.md#budgets): the launcher keeps the one [`Ledger`] of it, and each
//! model member reaches it over a budget channel of its own, a Unix socket pair made beside its
//! formation channel and lifeline. The launcher knows which member each socket is, so a member
//! can reserve and settle only as itself; the channel carries the budget lines alone
//! (`wire::budget_line`), so nothing on it can mint a token or reach another member. When a
//! member's socket ends (it exited, or broke the protocol) every reservation it held is returned.
//!
//! After each grant, settlement and return the figures are written to the formation's
//! `budget.json` (owner-only, like everything under `~/.murmur`), which `mur ps` and
//! `mur trace show` read: what is held there is what turns in flight hold now.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::budget::{Grant, Ledger};
use crate::wire::budget_line::{Ask, MAX_BUDGET_LINE, Reply};

/// The formation's budget and who spent what of it.
#[derive(Debug)]
pub struct BudgetKeeper {
    ledger: Mutex<Ledger>,
    names: Vec<String>,
    /// `budget.json` in the formation's directory.
    file: PathBuf,
    written: Mutex<Written>,
}

/// When the figures were last written, and whether they changed since: they are written at most
/// every [`WRITE_EVERY`], a change inside that window by a write scheduled for its end, and once
/// more when the last member's channel ends.
#[derive(Debug, Default)]
struct Written {
    at: Option<Instant>,
    changed: bool,
    scheduled: bool,
}

/// How stale `budget.json` may be while members spend: `mur ps` is a person's view.
const WRITE_EVERY: Duration = Duration::from_millis(50);

impl BudgetKeeper {
    /// A budget of `limit` tokens for the members `names` (roster order), its figures kept in
    /// `file`.
    pub fn new(limit: u64, names: Vec<String>, file: PathBuf) -> Arc<BudgetKeeper> {
        let keeper = Arc::new(BudgetKeeper {
            ledger: Mutex::new(Ledger::new(limit, names.len())),
            names,
            file,
            written: Mutex::new(Written::default()),
        });
        keeper.write_figures();
        keeper
    }

    /// Answers member `holder` on `end` until it closes; then returns what it still held. Runs on
    /// the launcher's actix system.
    pub fn serve(self: &Arc<Self>, holder: usize, end: OwnedFd) {
        let std_stream = std::os::unix::net::UnixStream::from(end);
        let keeper = Arc::clone(self);
        actix::spawn(async move {
            if let Err(why) = keeper.converse(holder, std_stream).await {
                tracing::debug!("the budget channel of member {holder} ended: {why}");
            }
            let released = crate::sync::lock(&keeper.ledger).release(holder);
            if released > 0 {
                tracing::debug!("member {holder} ended holding {released} reserved token(s); returned");
                keeper.write_figures();
            }
        });
    }

    async fn converse(self: &Arc<Self>, holder: usize, stream: std::os::unix::net::UnixStream) -> std::io::Result<()> {
        stream.set_nonblocking(true)?;
        let mut stream = tokio::net::UnixStream::from_std(stream)?;
        let mut buf: Vec<u8> = Vec::with_capacity(MAX_BUDGET_LINE);
        let mut chunk = [0u8; MAX_BUDGET_LINE];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(at) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=at).collect();
                let reply = std::str::from_utf8(&line[..at])
                    .ok()
                    .and_then(Ask::parse)
                    .and_then(|ask| self.answer(holder, ask));
                let Some(reply) = reply else {
                    return Err(std::io::Error::other("a line that is not a budget request"));
                };
                stream.write_all(reply.line().as_bytes()).await?;
                // After the reply, and not every time: the member never waits for the file.
                if matches!(reply, Reply::Granted { .. } | Reply::Settled { .. }) {
                    self.figures_changed();
                }
            }
            if buf.len() >= MAX_BUDGET_LINE {
                return Err(std::io::Error::other("a line longer than a budget request"));
            }
        }
    }

    /// The ledger's answer to one request; `None` breaks the channel (the member did not follow
    /// the protocol: a reused or unknown id). A `return` is answered `settled`.
    pub fn answer(&self, holder: usize, ask: Ask) -> Option<Reply> {
        let mut l = crate::sync::lock(&self.ledger);
        Some(match ask {
            Ask::Reserve { id, tokens } => match l.reserve(holder, id, tokens).ok()? {
                Grant::Granted { left } => Reply::Granted { id, left },
                Grant::Refused { left } => Reply::Refused { id, left },
            },
            Ask::Settle { id, used } => Reply::Settled {
                id,
                left: l.settle(holder, id, used).ok()?,
            },
            Ask::Return { id } => Reply::Settled {
                id,
                left: l.give_back(holder, id).ok()?,
            },
        })
    }

    fn figures_changed(self: &Arc<Self>) {
        let wait = {
            let mut w = crate::sync::lock(&self.written);
            w.changed = true;
            let since = w.at.map(|at| at.elapsed()).unwrap_or(WRITE_EVERY);
            if since < WRITE_EVERY && w.scheduled {
                return;
            }
            w.scheduled = since < WRITE_EVERY;
            WRITE_EVERY.checked_sub(since).filter(|d| !d.is_zero())
        };
        let Some(wait) = wait else {
            return self.write_figures();
        };
        // A hold taken or ended inside the window still shows once the window ends.
        let keeper = Arc::clone(self);
        actix::spawn(async move {
            actix_rt::time::sleep(wait).await;
            let changed = {
                let mut w = crate::sync::lock(&keeper.written);
                w.scheduled = false;
                w.changed
            };
            if changed {
                keeper.write_figures();
            }
        });
    }

    /// `budget.json`: the limit, what is spent, held and left, and each member's spend, turns and
    /// holds. Written whole to a temporary file at 0600 and renamed, so a reader never sees half
    /// of it.
    pub fn write_figures(&self) {
        let figures = {
            let l = crate::sync::lock(&self.ledger);
            let members: serde_json::Map<String, serde_json::Value> = self
                .names
                .iter()
                .enumerate()
                .filter_map(|(i, name)| {
                    let a = l.account(i)?;
                    Some((
                        name.clone(),
                        json!({"spent": a.spent, "turns": a.turns, "held": a.held}),
                    ))
                })
                .collect();
            json!({
                "limit": l.limit(),
                "spent": l.spent(),
                "held": l.held(),
                "left": l.left(),
                "members": members,
            })
        };
        {
            let mut w = crate::sync::lock(&self.written);
            w.at = Some(Instant::now());
            w.changed = false;
        }
        if let Err(e) = crate::file::write_atomic(&self.file, format!("{figures}\n").as_bytes(), 0o600) {
            tracing::debug!("{} could not be written: {e}", self.file.display());
        }
    }
}

impl Drop for BudgetKeeper {
    /// The last member's channel ended: the final figures are written if they changed.
    fn drop(&mut self) {
        if crate::sync::lock(&self.written).changed {
            self.write_figures();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_reserves_and_settles_as_itself_and_its_figures_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budget.json");
        let k = BudgetKeeper::new(1000, vec!["lead".into(), "worker".into()], file.clone());
        assert_eq!(
            k.answer(0, Ask::Reserve { id: 1, tokens: 700 }),
            Some(Reply::Granted { id: 1, left: 300 })
        );
        // The same id from another member is that member's own reservation.
        assert_eq!(
            k.answer(1, Ask::Reserve { id: 1, tokens: 400 }),
            Some(Reply::Refused { id: 1, left: 300 })
        );
        assert_eq!(
            k.answer(1, Ask::Settle { id: 1, used: 5 }),
            None,
            "nothing held under that id"
        );
        assert_eq!(k.answer(0, Ask::Reserve { id: 1, tokens: 1 }), None, "a reused id");
        assert_eq!(
            k.answer(0, Ask::Settle { id: 1, used: 120 }),
            Some(Reply::Settled { id: 1, left: 880 })
        );
        k.write_figures();
        let figures: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        assert_eq!(
            figures,
            json!({"limit": 1000, "spent": 120, "held": 0, "left": 880,
                   "members": {"lead": {"spent": 120, "turns": 1, "held": 0},
                               "worker": {"spent": 0, "turns": 0, "held": 0}}})
        );
    }

    #[test]
    fn live_holds_are_in_the_figures_and_a_return_gives_one_back_uncharged() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budget.json");
        let k = BudgetKeeper::new(1000, vec!["lead".into()], file.clone());
        let read = || -> serde_json::Value { serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap() };
        k.answer(0, Ask::Reserve { id: 1, tokens: 300 });
        k.write_figures();
        assert_eq!(read()["held"], 300);
        assert_eq!(read()["members"]["lead"]["held"], 300);
        assert_eq!(
            k.answer(0, Ask::Return { id: 1 }),
            Some(Reply::Settled { id: 1, left: 1000 })
        );
        assert_eq!(k.answer(0, Ask::Return { id: 1 }), None, "returned once");
        k.write_figures();
        assert_eq!(
            read(),
            json!({"limit": 1000, "spent": 0, "held": 0, "left": 1000,
                   "members": {"lead": {"spent": 0, "turns": 0, "held": 0}}})
        );
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "budget.json is the owner's alone");
    }
}
