//! The formation's token budget (`mur run --roster --max-tokens`,
//! docs/reference/formation.md#budgets): the launcher keeps the one [`Ledger`] of it, and each
//! model member reaches it over a budget channel of its own, a Unix socket pair made beside its
//! formation channel and lifeline. The launcher knows which member each socket is, so a member
//! can reserve and settle only as itself; the channel carries the budget lines alone
//! (`wire::budget_line`), so nothing on it can mint a token or reach another member. When a
//! member's socket ends (it exited, or broke the protocol) every reservation it held is returned.
//!
//! After each settlement the figures are written to the formation's `budget.json`, which
//! `mur ps` and `mur trace show` read.

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
    /// When the figures were last written, and whether they changed since: they are written at
    /// most every [`WRITE_EVERY`], and once more when the last member's channel ends.
    written: Mutex<(Option<Instant>, bool)>,
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
            written: Mutex::new((None, false)),
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

    async fn converse(&self, holder: usize, stream: std::os::unix::net::UnixStream) -> std::io::Result<()> {
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
                if matches!(reply, Reply::Settled { .. }) {
                    self.figures_changed();
                }
            }
            if buf.len() >= MAX_BUDGET_LINE {
                return Err(std::io::Error::other("a line longer than a budget request"));
            }
        }
    }

    /// The ledger's answer to one request; `None` breaks the channel (the member did not follow
    /// the protocol: a reused or unknown id).
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
        })
    }

    fn figures_changed(&self) {
        let due = {
            let mut w = crate::sync::lock(&self.written);
            w.1 = true;
            w.0.is_none_or(|at| at.elapsed() >= WRITE_EVERY)
        };
        if due {
            self.write_figures();
        }
    }

    /// `budget.json`: the limit, what is spent, held and left, and each member's spend.
    /// Written whole to a temporary file and renamed, so a reader never sees half of it.
    pub fn write_figures(&self) {
        let figures = {
            let l = crate::sync::lock(&self.ledger);
            let members: serde_json::Map<String, serde_json::Value> = self
                .names
                .iter()
                .enumerate()
                .filter_map(|(i, name)| {
                    let a = l.account(i)?;
                    Some((name.clone(), json!({"spent": a.spent, "turns": a.turns})))
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
        *crate::sync::lock(&self.written) = (Some(Instant::now()), false);
        let tmp = self.file.with_extension("json.tmp");
        let written = std::fs::write(&tmp, format!("{figures}\n")).and_then(|()| std::fs::rename(&tmp, &self.file));
        if let Err(e) = written {
            tracing::debug!("{} could not be written: {e}", self.file.display());
        }
    }
}

impl Drop for BudgetKeeper {
    /// The last member's channel ended: the final figures are written if they changed.
    fn drop(&mut self) {
        if crate::sync::lock(&self.written).1 {
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
                   "members": {"lead": {"spent": 120, "turns": 1}, "worker": {"spent": 0, "turns": 0}}})
        );
    }
}
