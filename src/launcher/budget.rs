//! The formation's authority channel (docs/reference/formation.md#the-authority-channel): every
//! member reaches the launcher over a channel of its own, a Unix socket pair made beside its
//! formation channel and lifeline. On it a member asks for its calls' grants
//! (docs/reference/formation.md#grants) and, when the formation keeps a token budget
//! (`mur run --roster --max-tokens`, docs/reference/formation.md#budgets), reserves and settles
//! its model turns: the launcher keeps the one [`Ledger`] of it. The launcher knows which member
//! each socket is, so a member reserves, settles and delegates only as itself; the channel
//! carries the authority lines alone (`wire::authority_line`), so nothing on it can mint a token
//! or reach another member, and a grant is only ever narrowed from one its asker holds. When a
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

use actix::Addr;

use super::authority::{GrantKeyOf, SealGrant, TokenAuthority};
use crate::budget::{Grant, Ledger};
use crate::grant::{self, Refusal, Request};
use crate::ids::{self, IdKind};
use crate::wire::authority_line::{self, Delegate, MAX_ASK_LINE, Parent};
use crate::wire::budget_line::{Ask, Reply};

/// One member's authority channel as the keeper serves it.
#[derive(Debug)]
pub struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Serving {
    /// Ends the channel and returns once everything its member held has been returned to the
    /// ledger and the grants' tree.
    pub async fn end(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.done).await;
    }
}

/// The formation's budget and who spent what of it, and the grants it narrowed.
#[derive(Debug)]
pub struct BudgetKeeper {
    /// `None` when the formation keeps no token budget: a budget line then breaks the channel.
    ledger: Option<Mutex<Ledger>>,
    names: Vec<String>,
    delegation: Delegation,
    /// The grants made, so a member's call is narrowed from its task's.
    grants: Mutex<Held>,
    /// `budget.json` in the formation's directory.
    file: PathBuf,
    written: Mutex<Written>,
}

/// What narrowing needs besides the grants: the formation, who may call whom, its deadline, and
/// the one holder of the members' grant keys.
#[derive(Debug)]
pub struct Delegation {
    pub formation_id: String,
    /// Per member (roster order), the members it may call.
    pub callees: Vec<Vec<String>>,
    /// The formation's `--deadline`, Unix ms: every root's.
    pub deadline_ms: Option<u64>,
    pub authority: Option<Addr<TokenAuthority>>,
}

/// The grants made, oldest first, at most [`MAX_HELD_GRANTS`]: a call narrowed from one
/// forgotten since is refused `unknown-parent`, and the member calls without a grant.
#[derive(Debug, Default)]
struct Held {
    by_id: std::collections::HashMap<String, grant::Grant>,
    order: std::collections::VecDeque<String>,
    /// Each grant's budget and what its subtree spent and holds.
    tree: crate::budget::GrantTree,
    /// The reservations made under a grant, by holder and id: the grant and the tokens held.
    under: std::collections::HashMap<(usize, u64), (String, u64)>,
}

/// Grants the launcher remembers (about a kilobyte each).
const MAX_HELD_GRANTS: usize = 65_536;

impl Held {
    fn keep(&mut self, g: grant::Grant, parent: Option<&str>) {
        if self.order.len() >= MAX_HELD_GRANTS
            && let Some(old) = self.order.pop_front()
        {
            self.by_id.remove(&old);
            self.tree.forget(&old);
        }
        self.tree.add(&g.id, parent, g.budget);
        self.order.push_back(g.id.clone());
        self.by_id.insert(g.id.clone(), g);
    }
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
    /// The authority of `delegation`'s formation for the members `names` (roster order), with a
    /// budget of `limit` tokens whose figures are kept in `file`, when it keeps one.
    pub fn new(limit: Option<u64>, names: Vec<String>, file: PathBuf, delegation: Delegation) -> Arc<BudgetKeeper> {
        let keeper = Arc::new(BudgetKeeper {
            ledger: limit.map(|limit| Mutex::new(Ledger::new(limit, names.len()))),
            names,
            delegation,
            grants: Mutex::new(Held::default()),
            file,
            written: Mutex::new(Written::default()),
        });
        keeper.write_figures();
        keeper
    }

    /// Whether the formation keeps a token budget.
    pub fn keeps_budget(&self) -> bool {
        self.ledger.is_some()
    }

    /// Answers member `holder` on `end` until it closes or the returned handle ends it; then
    /// returns what it still held. Runs on the launcher's actix system.
    ///
    /// A restarted member is served as the same `holder` on a new channel: the old channel's
    /// release must not return what the new process reserved, so a restart starts the new process
    /// only once [`Serving::end`] of the old channel has returned.
    pub fn serve(self: &Arc<Self>, holder: usize, end: OwnedFd) -> Serving {
        let std_stream = std::os::unix::net::UnixStream::from(end);
        let keeper = Arc::clone(self);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let done = actix::spawn(async move {
            let ended = tokio::select! {
                ended = keeper.converse(holder, std_stream) => ended,
                // Only when asked: a handle dropped without `end` leaves the channel served.
                Ok(()) = stop_rx => Err(std::io::Error::other("the member's process ended")),
            };
            if let Err(why) = ended {
                tracing::debug!("the budget channel of member {holder} ended: {why}");
            }
            let released = keeper
                .ledger
                .as_ref()
                .map_or(0, |l| crate::sync::lock(l).release(holder));
            {
                let mut held = crate::sync::lock(&keeper.grants);
                let Held { tree, under, .. } = &mut *held;
                under.retain(|(h, _), (grant, tokens)| {
                    if *h == holder {
                        tree.end(grant, *tokens, None);
                    }
                    *h != holder
                });
            }
            if released > 0 {
                tracing::debug!("member {holder} ended holding {released} reserved token(s); returned");
                keeper.write_figures();
            }
        });
        Serving {
            stop: Some(stop_tx),
            done,
        }
    }

    async fn converse(self: &Arc<Self>, holder: usize, stream: std::os::unix::net::UnixStream) -> std::io::Result<()> {
        stream.set_nonblocking(true)?;
        let mut stream = tokio::net::UnixStream::from_std(stream)?;
        let mut buf: Vec<u8> = Vec::with_capacity(MAX_ASK_LINE);
        let mut chunk = [0u8; MAX_ASK_LINE];
        loop {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            while let Some(at) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=at).collect();
                let ask = std::str::from_utf8(&line[..at])
                    .ok()
                    .and_then(authority_line::Ask::parse);
                let reply = match ask {
                    Some(authority_line::Ask::Budget(ask)) => {
                        self.answer(holder, ask).map(authority_line::Reply::Budget)
                    }
                    Some(authority_line::Ask::Delegate(d)) => Some(self.delegate(holder, d).await),
                    Some(authority_line::Ask::ReserveUnder { id, tokens, grant }) => self
                        .reserve_under(holder, id, tokens, &grant)
                        .map(authority_line::Reply::Budget),
                    Some(authority_line::Ask::GrantKey { id }) => Some(self.grant_key(holder, id).await),
                    None => None,
                };
                let Some(reply) = reply else {
                    return Err(std::io::Error::other("a line that is not an authority request"));
                };
                // Wiped once written: a `grant-key` line holds the member's key.
                let line = zeroize::Zeroizing::new(reply.line());
                stream.write_all(line.as_bytes()).await?;
                // After the reply, and not every time: the member never waits for the file.
                if matches!(
                    reply,
                    authority_line::Reply::Budget(Reply::Granted { .. } | Reply::Settled { .. })
                ) {
                    self.figures_changed();
                }
            }
            if buf.len() >= MAX_ASK_LINE {
                return Err(std::io::Error::other("a line longer than an authority request"));
            }
        }
    }

    /// The ledger's answer to one request; `None` breaks the channel (the member did not follow
    /// the protocol: a reused or unknown id). A `return` is answered `settled`.
    pub fn answer(&self, holder: usize, ask: Ask) -> Option<Reply> {
        match ask {
            Ask::Reserve { id, tokens } => {
                let mut l = crate::sync::lock(self.ledger.as_ref()?);
                Some(match l.reserve(holder, id, tokens).ok()? {
                    Grant::Granted { left } => Reply::Granted { id, left },
                    Grant::Refused { left } => Reply::Refused { id, left },
                })
            }
            Ask::Settle { id, used } => self.end(holder, id, Some(used)),
            Ask::Return { id } => self.end(holder, id, None),
        }
    }

    /// A reservation of member `holder` under `grant`, the grant its task runs under
    /// (docs/reference/formation.md#grants): granted only when it fits every capped grant above
    /// and the formation's budget, and counted against each. `None` breaks the channel: a grant
    /// that is another member's, or a reused id. A grant the keeper no longer holds has no cap.
    pub fn reserve_under(&self, holder: usize, id: u64, tokens: u64, grant: &str) -> Option<Reply> {
        let name = self.names.get(holder)?;
        let mut held = crate::sync::lock(&self.grants);
        if held.by_id.get(grant).is_some_and(|g| g.callee != *name) || held.under.contains_key(&(holder, id)) {
            return None;
        }
        let ledger_left = self.ledger.as_ref().map(|l| crate::sync::lock(l).left());
        if let Err(left) = held.tree.reserve(grant, tokens) {
            let left = i64::try_from(left).unwrap_or(i64::MAX);
            return Some(Reply::Refused {
                id,
                left: ledger_left.map_or(left, |l| l.min(left)),
            });
        }
        let mut left = held
            .tree
            .left(grant)
            .map_or(i64::MAX, |l| i64::try_from(l).unwrap_or(i64::MAX));
        if let Some(ledger) = &self.ledger {
            match crate::sync::lock(ledger).reserve(holder, id, tokens) {
                Ok(Grant::Granted { left: l }) => left = left.min(l),
                Ok(Grant::Refused { left: l }) => {
                    held.tree.end(grant, tokens, None);
                    return Some(Reply::Refused { id, left: l });
                }
                Err(_) => {
                    held.tree.end(grant, tokens, None);
                    return None;
                }
            }
        }
        held.under.insert((holder, id), (grant.to_string(), tokens));
        Some(Reply::Granted { id, left })
    }

    /// Ends reservation `id` of `holder`: settled with `used`, or returned (`None`), in the
    /// grants above it and the formation's budget, whichever hold it.
    fn end(&self, holder: usize, id: u64, used: Option<u64>) -> Option<Reply> {
        let mut held = crate::sync::lock(&self.grants);
        let under = held.under.remove(&(holder, id));
        if let Some((grant, tokens)) = &under {
            held.tree.end(grant, *tokens, used);
        }
        let tree_left = under
            .as_ref()
            .and_then(|(g, _)| held.tree.left(g))
            .map(|l| i64::try_from(l).unwrap_or(i64::MAX));
        drop(held);
        let ledger_left = match &self.ledger {
            Some(l) => {
                let mut l = crate::sync::lock(l);
                Some(match used {
                    Some(used) => l.settle(holder, id, used),
                    None => l.give_back(holder, id),
                })
            }
            None => None,
        };
        let left = match (under.is_some(), ledger_left) {
            (_, Some(Ok(left))) => left.min(tree_left.unwrap_or(i64::MAX)),
            (true, None) => tree_left.unwrap_or(i64::MAX),
            _ => return None,
        };
        Some(Reply::Settled { id, left })
    }

    /// The grant for member `holder`'s call (docs/reference/formation.md#grants): narrowed from
    /// the grant its task runs under, which it must hold, or from a root for a task that came
    /// with none, to a callee the roster lets it call; sealed by the token authority with the
    /// callee's grant key.
    pub async fn delegate(&self, holder: usize, d: Delegate) -> authority_line::Reply {
        let id = d.id;
        let refuse = |why: Refusal| authority_line::Reply::Undelegated { id, why };
        let grant = match self.narrowed(holder, &d) {
            Ok(g) => g,
            Err(why) => return refuse(why),
        };
        let parent = match &d.parent {
            Parent::Grant(id) => Some(id.clone()),
            Parent::Root(_) => None,
        };
        let Some(authority) = &self.delegation.authority else {
            return refuse(Refusal::Invalid);
        };
        match authority.send(SealGrant(grant.clone())).await {
            Ok(Some(wire)) => {
                crate::sync::lock(&self.grants).keep(grant, parent.as_deref());
                authority_line::Reply::Delegated { id, grant: wire }
            }
            Ok(None) | Err(_) => refuse(Refusal::Invalid),
        }
    }

    /// Member `holder`'s own grant key, for its door (docs/reference/formation.md#grants), from
    /// the token authority; `undelegated <id> invalid` when it holds none (no delegation, or the
    /// keys are gone).
    async fn grant_key(&self, holder: usize, id: u64) -> authority_line::Reply {
        let refused = authority_line::Reply::Undelegated {
            id,
            why: Refusal::Invalid,
        };
        let (Some(authority), Some(name)) = (&self.delegation.authority, self.names.get(holder)) else {
            return refused;
        };
        match authority.send(GrantKeyOf(name.clone())).await {
            Ok(Some(key)) => authority_line::Reply::GrantKey { id, key },
            Ok(None) | Err(_) => refused,
        }
    }

    /// [`BudgetKeeper::delegate`]'s decision, before sealing.
    pub fn narrowed(&self, holder: usize, d: &Delegate) -> Result<grant::Grant, Refusal> {
        let caller = self.names.get(holder).ok_or(Refusal::BadRequest)?;
        // What the formation's budget has left bounds every grant's, and what the parent's
        // subtree has left bounds its child's.
        let formation_left = self
            .ledger
            .as_ref()
            .map(|l| u64::try_from(crate::sync::lock(l).left()).unwrap_or(0));
        let root_of = |origin: &grant::Origin| {
            grant::Grant::root(
                &self.delegation.formation_id,
                ids::mint(IdKind::Grant),
                caller,
                origin.clone(),
                self.delegation.deadline_ms,
                None,
            )
        };
        let ask = Request {
            caller: caller.clone(),
            task: d.task.clone(),
            callee: d.callee.clone(),
            deadline_ms: d.deadline_ms,
            budget: d.budget,
        };
        // A member's own root, for a task a client sent with limits of its own
        // (docs/reference/formation.md#limits-across-the-formations-edge): the formation's root,
        // narrowed to them, with no hop.
        if let Parent::Root(origin) = &d.parent
            && d.callee == *caller
        {
            return grant::own_root(root_of(origin), formation_left, &ask, crate::timing::unix_ms());
        }
        let may_call = self
            .delegation
            .callees
            .get(holder)
            .is_some_and(|c| c.contains(&d.callee));
        if !may_call {
            return Err(Refusal::NotACallee);
        }
        let parent = match &d.parent {
            Parent::Grant(parent) => crate::sync::lock(&self.grants)
                .by_id
                .get(parent)
                .cloned()
                .ok_or(Refusal::UnknownParent)?,
            Parent::Root(origin) => root_of(origin),
        };
        let subtree_left = crate::sync::lock(&self.grants).tree.left(&parent.id);
        let left = match (formation_left, subtree_left) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        grant::narrow(&parent, left, &ask, crate::timing::unix_ms(), ids::mint(IdKind::Grant))
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
        let Some(ledger) = &self.ledger else { return };
        let figures = {
            let l = crate::sync::lock(ledger);
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

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
    const TSK: &str = "tsk_0199c4e2f1b7712a9d3e4f5061728394";

    fn no_delegation() -> Delegation {
        Delegation {
            formation_id: FRM.into(),
            callees: Vec::new(),
            deadline_ms: None,
            authority: None,
        }
    }

    fn delegate(parent: Parent, callee: &str, deadline_ms: Option<u64>, budget: Option<u64>) -> Delegate {
        Delegate {
            id: 1,
            parent,
            task: TSK.into(),
            callee: callee.into(),
            deadline_ms,
            budget,
        }
    }

    #[test]
    fn a_reservation_under_a_grant_counts_against_every_grant_above_it() {
        let dir = tempfile::tempdir().unwrap();
        let k = BudgetKeeper::new(
            None,
            vec!["lead".into(), "a".into(), "b".into()],
            dir.path().join("budget.json"),
            Delegation {
                formation_id: FRM.into(),
                callees: vec![vec!["a".into()], vec!["b".into()], vec![]],
                deadline_ms: None,
                authority: None,
            },
        );
        let a = k
            .narrowed(0, &delegate(Parent::Root(grant::Origin::Task), "a", None, Some(1000)))
            .unwrap();
        crate::sync::lock(&k.grants).keep(a.clone(), None);
        let b = k
            .narrowed(1, &delegate(Parent::Grant(a.id.clone()), "b", None, Some(5000)))
            .unwrap();
        assert_eq!(b.budget, Some(1000), "never more than the parent has");
        crate::sync::lock(&k.grants).keep(b.clone(), Some(&a.id));
        assert_eq!(
            k.reserve_under(2, 1, 700, &b.id),
            Some(Reply::Granted { id: 1, left: 300 })
        );
        assert_eq!(
            k.answer(2, Ask::Settle { id: 1, used: 900 }),
            Some(Reply::Settled { id: 1, left: 100 })
        );
        // a's own turn is counted against a, which b's spend already used.
        assert_eq!(
            k.reserve_under(1, 1, 200, &a.id),
            Some(Reply::Refused { id: 1, left: 100 })
        );
        assert_eq!(
            k.reserve_under(1, 2, 100, &a.id),
            Some(Reply::Granted { id: 2, left: 0 })
        );
        assert_eq!(k.reserve_under(2, 1, 100, &a.id), None, "not b's grant");
        // A new call's grant gets at most what is left: nothing.
        assert_eq!(
            k.narrowed(1, &delegate(Parent::Grant(a.id.clone()), "b", None, None)),
            Err(Refusal::Spent)
        );
        assert_eq!(
            k.answer(1, Ask::Return { id: 2 }),
            Some(Reply::Settled { id: 2, left: 100 })
        );
    }

    #[test]
    fn a_member_narrows_only_grants_it_holds_to_callees_it_may_call() {
        let dir = tempfile::tempdir().unwrap();
        let far = crate::timing::unix_ms() + 3_600_000;
        let k = BudgetKeeper::new(
            Some(1000),
            vec!["lead".into(), "a".into(), "b".into()],
            dir.path().join("budget.json"),
            Delegation {
                formation_id: FRM.into(),
                callees: vec![vec!["a".into()], vec!["b".into()], vec![]],
                deadline_ms: Some(far),
                authority: None,
            },
        );
        let root = Parent::Root(grant::Origin::Operator);
        let a = k.narrowed(0, &delegate(root.clone(), "a", None, Some(5000))).unwrap();
        assert_eq!(
            (a.deadline_ms, a.budget, a.callee.as_str()),
            (Some(far), Some(1000), "a")
        );
        assert_eq!(a.chain.len(), 1);
        crate::sync::lock(&k.grants).keep(a.clone(), None);
        // `a` narrows its own grant for `b`; nobody else may use it, and `a` only towards `b`.
        let b = k
            .narrowed(1, &delegate(Parent::Grant(a.id.clone()), "b", Some(far - 1), Some(10)))
            .unwrap();
        assert_eq!((b.deadline_ms, b.budget, b.chain.len()), (Some(far - 1), Some(10), 2));
        assert_eq!(
            k.narrowed(2, &delegate(Parent::Grant(a.id.clone()), "b", None, None)),
            Err(Refusal::NotACallee)
        );
        assert_eq!(
            k.narrowed(0, &delegate(Parent::Grant(a.id.clone()), "a", None, None)),
            Err(Refusal::NotTheHolder)
        );
        assert_eq!(
            k.narrowed(
                1,
                &delegate(
                    Parent::Grant("grt_0199c4e2f1b7712a9d3e4f5061728394".into()),
                    "b",
                    None,
                    None
                )
            ),
            Err(Refusal::UnknownParent)
        );
        assert_eq!(
            k.narrowed(1, &delegate(root, "lead", None, None)),
            Err(Refusal::NotACallee)
        );
    }

    #[test]
    fn each_member_gets_its_own_grant_key_and_a_grant_opens_only_with_its_callees() {
        use crate::runner::authority::{Authority, Undelegated};
        use actix::Actor as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budget.json");
        let (lead, lead_end) = std::os::unix::net::UnixStream::pair().unwrap();
        let (worker, worker_end) = std::os::unix::net::UnixStream::pair().unwrap();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        // The launcher's actors on an actix system of their own, as in the launcher; the members'
        // blocking links on this thread.
        std::thread::spawn(move || {
            actix::System::new().block_on(async move {
                let authority = TokenAuthority::default().start();
                let minted = authority
                    .send(super::super::authority::Mint {
                        formation_id: FRM.into(),
                        members: vec!["lead".into(), "worker".into()],
                        edges: vec![(0, 1)],
                    })
                    .await;
                assert!(matches!(minted, Ok(Ok(_))), "minted");
                let keeper = BudgetKeeper::new(
                    None,
                    vec!["lead".into(), "worker".into()],
                    file,
                    Delegation {
                        formation_id: FRM.into(),
                        callees: vec![vec!["worker".into()], vec![]],
                        deadline_ms: None,
                        authority: Some(authority.clone()),
                    },
                );
                keeper.serve(0, OwnedFd::from(lead_end));
                keeper.serve(1, OwnedFd::from(worker_end));
                let _ = addr_tx.send(authority);
                std::future::pending::<()>().await;
            })
        });
        let authority = addr_rx.recv().unwrap();
        let (lead, worker) = (Authority::new(lead), Authority::new(worker));
        let (leads_key, workers_key) = (lead.grant_key().unwrap(), worker.grant_key().unwrap());
        assert_ne!(leads_key, workers_key, "each member its own key");
        assert_eq!(worker.grant_key().unwrap(), workers_key, "asked again, the same key");

        let wire = lead
            .delegate(Parent::Root(grant::Origin::Operator), TSK, "worker", None, None)
            .unwrap();
        let g = grant::Grant::verify(&workers_key, &wire, FRM, "worker", "lead").unwrap();
        assert_eq!((g.callee.as_str(), g.chain.len()), ("worker", 1));
        assert_eq!(
            grant::Grant::open(&leads_key, &wire),
            Err(Refusal::Invalid),
            "the caller's own key does not open its callee's grant"
        );

        // Once the keys are gone, nobody gets one, and no grant is made.
        actix::System::new().block_on(async move {
            let _ = authority.send(super::super::authority::DropKey).await;
        });
        assert!(worker.grant_key().is_err());
        assert_eq!(
            lead.delegate(Parent::Root(grant::Origin::Operator), TSK, "worker", None, None),
            Err(Undelegated::Refused(Refusal::Invalid))
        );
    }

    #[test]
    fn a_member_reserves_and_settles_as_itself_and_its_figures_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("budget.json");
        let k = BudgetKeeper::new(
            Some(1000),
            vec!["lead".into(), "worker".into()],
            file.clone(),
            no_delegation(),
        );
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
        let k = BudgetKeeper::new(Some(1000), vec!["lead".into()], file.clone(), no_delegation());
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
