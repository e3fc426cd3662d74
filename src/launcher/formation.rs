//! `FormationActor`: owns one launch from minting to retention
//! (docs/reference/formation.md#launch-sequence, docs/reference/formation.md#lifelines,
//! docs/architecture.md).
//!
//! States: `Minting → StartingPeers → EntryRunning → Stopping → Done`. The first `PeerFailed`,
//! signal or pre-entry deadline turns a launch into a stop; the entry's exit does the same for a
//! running formation. Stopping closes lifelines only: the launcher never sends a member SIGTERM.
//!
//! It only orchestrates: every member, the entry included, is a [`PeerActor`] that owns its
//! process, lifeline, registry entry and stop timer.

use std::os::unix::fs::DirBuilderExt;
use std::time::Instant;

use actix::prelude::*;
use tokio::sync::oneshot;
use zeroize::Zeroizing;

use super::authority::{DropKey, Mint, TokenAuthority};
use super::news::{EntryExited, FormationInbox, PeerExited, PeerFailed, PeerReady, PeerStarted, PeerStopped};
use super::peer::{CloseLifeline, PeerActor, PeerSpec, Retire, Role, SendAddresses};
use super::report;
use super::spawn::MemberPipes;
use super::{LaunchPlan, retention};
use crate::channel::line::{Address, Call, DoorIdentity, FirstLine, withdrawal_line};
use crate::marker;
use crate::readiness::Reported;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Minting,
    StartingPeers,
    EntryRunning,
    Stopping,
    Done,
}

/// Why the formation is stopping; decides the report and the exit code.
#[derive(Debug, Clone)]
enum Ending {
    PeerFailed { index: usize, reason: String },
    Signal(i32),
    DeadlineBeforeEntry,
    EntryExited(i32),
    Internal(String),
}

pub struct FormationActor {
    plan: LaunchPlan,
    phase: Phase,
    authority: Addr<TokenAuthority>,
    /// Every member's actor (the entry's once it was started), until it reported `PeerStopped`.
    peers: Vec<Option<Addr<PeerActor>>>,
    ready: Vec<Option<(Reported, u32)>>,
    /// Each ready peer's door as the launcher vouches for it to its callers.
    doors: Vec<Option<DoorIdentity>>,
    /// Each ready peer's card key, as its probe learned it, handed to its callers.
    card_keys: Vec<Option<String>>,
    /// Peers whose process ended while the formation went on: withdrawn from their callers.
    gone: Vec<bool>,
    /// Every member's pipes, created before any spawn; taken as each member starts.
    pipes: Vec<Option<MemberPipes>>,
    /// Each member's first line, its edge tokens in it: wiped when written or dropped.
    first_lines: Vec<Zeroizing<String>>,
    verify_key: String,
    /// The entry's process runs: it was started and its actor has not reported its exit.
    entry_running: bool,
    /// Pids of the members that were started, by roster index.
    started: Vec<Option<u32>>,
    /// Members running when the stop began: `(index, pid)` in roster order.
    stopped: Vec<(usize, u32)>,
    pending_stops: usize,
    ending: Option<Ending>,
    done: Option<oneshot::Sender<u8>>,
    /// The formation's authority: a restarted peer gets a new channel to it.
    keeper: Option<std::sync::Arc<super::budget::BudgetKeeper>>,
    /// With `--restart`: each peer's first line, kept to be written again to a restarted
    /// process's new channel (tokens are per edge, not per process).
    restart_lines: Vec<Zeroizing<String>>,
    /// With `--restart`: each peer's recent restarts.
    intensity: Vec<Option<crate::restart::Intensity>>,
    /// Peers started again and not ready yet.
    restarting: Vec<bool>,
}

impl FormationActor {
    pub fn new(plan: LaunchPlan, authority: Addr<TokenAuthority>, done: oneshot::Sender<u8>) -> FormationActor {
        let n = plan.members.len();
        FormationActor {
            plan,
            phase: Phase::Minting,
            authority,
            peers: vec![None; n],
            ready: vec![None; n],
            doors: vec![None; n],
            card_keys: vec![None; n],
            gone: vec![false; n],
            pipes: Vec::new(),
            first_lines: vec![Zeroizing::default(); n],
            verify_key: String::new(),
            entry_running: false,
            started: vec![None; n],
            stopped: Vec::new(),
            pending_stops: 0,
            ending: None,
            done: Some(done),
            keeper: None,
            restart_lines: vec![Zeroizing::default(); n],
            intensity: vec![None; n],
            restarting: vec![false; n],
        }
    }

    fn minted(&mut self, mut minted: super::authority::Minted, ctx: &mut Context<Self>) {
        self.verify_key = minted.verify_key.to_b64();
        for (i, m) in self.plan.members.iter().enumerate() {
            let calls = std::mem::take(&mut minted.tokens[i])
                .into_iter()
                .map(|(to, token)| Call {
                    name: self.plan.members[to].name.clone(),
                    token: crate::secret::Secret::passed_on(token),
                })
                .collect();
            self.first_lines[i] = Zeroizing::new(
                FirstLine {
                    formation_id: self.plan.formation_id.clone(),
                    member: m.name.clone(),
                    launcher: self.plan.launcher.clone(),
                    entry: i == self.plan.entry,
                    verify_key: self.verify_key.clone(),
                    calls,
                }
                .to_line(),
            );
        }
        // Tokens now live only in the first lines (and in the authority's memory: the key).
        drop(minted);

        // docs/reference/formation.md#launch-sequence step 5: every lifeline exists before any
        // member is spawned.
        let peer_indices: Vec<usize> = (0..self.plan.members.len()).filter(|&i| i != self.plan.entry).collect();
        // The formation's directory is made once, owner-only, with its ownership marker, before
        // anything goes in it: the peers' directories and the budget's figures.
        // Every formation has one: its marker is how `mur trace list` and `mur trace show` find
        // it afterwards.
        self.make_directory();
        let mut pipes = Vec::with_capacity(self.plan.members.len());
        // Every member reaches the launcher's authority (its calls' grants, and the budget when
        // the formation keeps one) over a channel of its own.
        let keeper = super::budget::BudgetKeeper::new(
            self.plan.max_tokens,
            self.plan.members.iter().map(|m| m.name.clone()).collect(),
            self.plan.home.formation(&self.plan.formation_id).join("budget.json"),
            super::budget::Delegation {
                formation_id: self.plan.formation_id.clone(),
                callees: (0..self.plan.members.len())
                    .map(|i| {
                        self.plan
                            .callees(i)
                            .iter()
                            .filter_map(|&c| self.plan.members.get(c).map(|m| m.name.clone()))
                            .collect()
                    })
                    .collect(),
                deadline_ms: self.plan.deadline.as_ref().map(|d| d.unix_ms),
                authority: Some(self.authority.clone()),
            },
        );
        for _ in &self.plan.members {
            let made = MemberPipes::new().and_then(|p| p.with_budget(std::sync::Arc::clone(&keeper)));
            match made {
                Ok(p) => pipes.push(Some(p)),
                Err(e) => {
                    return self.begin_stop(
                        Ending::Internal(format!("the member pipes could not be made: {e}")),
                        ctx,
                    );
                }
            }
        }
        self.pipes = pipes;
        self.keeper = Some(keeper);
        if let Some(policy) = self.plan.restart {
            for &i in &peer_indices {
                self.restart_lines[i] = self.first_lines[i].clone();
                self.intensity[i] = Some(crate::restart::Intensity::new(policy));
            }
        }

        self.phase = Phase::StartingPeers;
        let me = inbox(&ctx.address());
        for i in peer_indices {
            let Some(pipes) = self.pipes[i].take() else { continue };
            let first_line = std::mem::take(&mut self.first_lines[i]);
            let spec = self.peer_spec(i, pipes, first_line, false);
            self.peers[i] = Some(PeerActor::new(spec, me.clone()).start());
        }
        self.maybe_start_entry(ctx);
    }

    /// What peer `i` is started with: at launch, or again after its process ended.
    fn peer_spec(&self, i: usize, pipes: MemberPipes, first_line: Zeroizing<String>, restarted: bool) -> PeerSpec {
        let name = &self.plan.members[i].name;
        PeerSpec {
            role: Role::Peer,
            index: i,
            name: name.clone(),
            formation_id: self.plan.formation_id.clone(),
            dir: self.plan.home.member_dir(&self.plan.formation_id, name),
            command: self.plan.command(i, &pipes),
            first_line,
            pipes,
            socket: Some(self.plan.home.door_socket(&self.plan.formation_id, name)),
            restarted,
        }
    }

    /// Peer `index` ended while the formation runs (`why`: how, for the launcher's line):
    /// started again when the restart policy allows it, else withdrawn from its callers.
    fn peer_ended(&mut self, index: usize, status: Option<i32>, why: String, ctx: &mut Context<Self>) {
        let past_deadline = self.plan.deadline.as_ref().is_some_and(|d| Instant::now() >= d.instant);
        // A peer that wound down by itself (status 0) ended normally: it is not started again.
        let abnormal = status != Some(0);
        let decision = match self.intensity[index].as_mut() {
            Some(i) if abnormal && !past_deadline => Some(i.ended(Instant::now())),
            _ => None,
        };
        let name = self.plan.members[index].name.clone();
        let frm = self.plan.formation_id.clone();
        match (decision, self.plan.restart) {
            (Some(crate::restart::Decision::Restart { nth }), Some(policy)) => {
                eprintln!(
                    "[mur run] member '{name}' {why} while formation {frm} runs; restarting it (restart {nth} of at most {} within {} s)",
                    policy.max,
                    policy.within.as_secs()
                );
                // The old actor is retired first, whether its process ended or never became
                // ready.
                return self.restart(index, ctx);
            }
            (Some(crate::restart::Decision::GiveUp), Some(policy)) => {
                let callers = self.callers_named(index);
                crate::diag::Diagnostic::new(
                    crate::diag::W_RST_001,
                    format!(
                        "member '{name}' {why} while formation {frm} runs, after {} restart(s) within {} s (--restart {policy}); it is withdrawn: {}",
                        policy.max,
                        policy.within.as_secs(),
                        callers.map_or("no member calls it".to_string(), |c| format!("calls to it from {c} now end unreachable"))
                    ),
                )
                .eprint("[mur run] ");
                self.withdraw(index, None);
            }
            _ => self.withdraw(index, Some(why)),
        }
        if std::mem::take(&mut self.restarting[index]) {
            // A restart that never became ready may still run: end it.
            if let Some(old) = self.peers[index].take() {
                old.do_send(Retire);
            }
        }
    }

    /// The members that may call peer `index`, quoted, or `None`.
    fn callers_named(&self, index: usize) -> Option<String> {
        let names: Vec<String> = (0..self.plan.members.len())
            .filter(|&i| self.plan.callees(i).contains(&index))
            .map(|c| format!("'{}'", self.plan.members[c].name))
            .collect();
        (!names.is_empty()).then(|| names.join(", "))
    }

    /// Starts peer `index` again once its old actor let go of the old process and its
    /// authority channel (so the old channel's release never returns what the new process
    /// reserves): a new process group, lifeline and channels, and its first line again. Its
    /// callers keep the old door, which no longer answers as that process (`peer_door` checks
    /// the pid), until the new one is ready.
    fn restart(&mut self, index: usize, ctx: &mut Context<Self>) {
        self.ready[index] = None;
        self.doors[index] = None;
        self.card_keys[index] = None;
        self.restarting[index] = true;
        let old = self.peers[index].take();
        let retired = async move {
            if let Some(old) = old {
                let _ = old.send(Retire).await;
            }
        };
        ctx.spawn(
            retired
                .into_actor(self)
                .map(move |(), act, ctx| act.start_again(index, ctx)),
        );
    }

    fn start_again(&mut self, index: usize, ctx: &mut Context<Self>) {
        if !matches!(self.phase, Phase::StartingPeers | Phase::EntryRunning) {
            self.restarting[index] = false;
            return;
        }
        let made = MemberPipes::new().and_then(|p| match &self.keeper {
            Some(k) => p.with_budget(std::sync::Arc::clone(k)),
            None => Ok(p),
        });
        let pipes = match made {
            Ok(p) => p,
            Err(e) => {
                self.restarting[index] = false;
                return self.withdraw(
                    index,
                    Some(format!("could not be started again: its pipes could not be made: {e}")),
                );
            }
        };
        let mut first_line = self.restart_lines[index].clone();
        if let Some(addr) = self.address_line_for(index) {
            first_line.push_str(&addr);
        }
        let spec = self.peer_spec(index, pipes, first_line, true);
        self.peers[index] = Some(PeerActor::new(spec, inbox(&ctx.address())).start());
    }

    /// `~/.murmur/formations/<frm>/`, 0700, and its ownership marker
    /// (docs/reference/formation.md#retention).
    fn make_directory(&self) {
        let m = marker::Marker {
            launcher_pid: std::process::id(),
            launcher_start: self
                .plan
                .launcher
                .as_ref()
                .map(|l| l.process_start.clone())
                .unwrap_or_default(),
            project_dir: self.plan.project_dir.display().to_string(),
            members: std::iter::once(self.plan.entry)
                .chain((0..self.plan.members.len()).filter(|&i| i != self.plan.entry))
                .map(|i| self.plan.members[i].name.clone())
                .collect(),
            task: self.plan.task.as_deref().map(marker::first_words),
        };
        if let Err(e) = marker::write(&self.plan.home, &self.plan.formation_id, &m) {
            eprintln!(
                "[mur run] warning: formation {} has no ownership marker ({e}); its directory will never be removed automatically",
                self.plan.formation_id
            );
            // What goes in it still needs its owner-only parents.
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(self.plan.home.formation(&self.plan.formation_id));
        }
    }

    fn all_peers_ready(&self) -> bool {
        (0..self.plan.members.len()).all(|i| i == self.plan.entry || self.ready[i].is_some())
    }

    fn maybe_start_entry(&mut self, ctx: &mut Context<Self>) {
        if self.phase != Phase::StartingPeers || !self.all_peers_ready() {
            return;
        }
        // Addresses go to every peer with callees, then the formation line, then the entry.
        for (i, peer) in self.peers.iter().enumerate() {
            let Some(peer) = peer else { continue };
            if let Some(line) = self.address_line_for(i) {
                peer.do_send(SendAddresses(line));
            }
        }
        report::formation_line(&self.plan, &self.ready);
        if self.plan.deadline.as_ref().is_some_and(|d| Instant::now() >= d.instant) {
            return self.begin_stop(Ending::DeadlineBeforeEntry, ctx);
        }
        let entry = self.plan.entry;
        let Some(pipes) = self.pipes[entry].take() else {
            return self.begin_stop(Ending::Internal("the entry member's pipes are gone".into()), ctx);
        };
        let mut lines = std::mem::take(&mut self.first_lines[entry]);
        if let Some(addr) = self.address_line_for(entry) {
            lines.push_str(&addr);
        }
        let spec = PeerSpec {
            role: Role::Entry,
            index: entry,
            name: self.plan.members[entry].name.clone(),
            formation_id: self.plan.formation_id.clone(),
            dir: self.plan.project_dir.clone(),
            command: self.plan.command(entry, &pipes),
            first_line: lines,
            pipes,
            socket: None,
            restarted: false,
        };
        let (actor, started) = PeerActor::start_entry(spec, inbox(&ctx.address()));
        self.peers[entry] = Some(actor);
        match started {
            Ok(pid) => {
                self.started[entry] = Some(pid);
                self.entry_running = true;
                self.phase = Phase::EntryRunning;
            }
            Err(reason) => self.begin_stop(Ending::Internal(reason), ctx),
        }
    }

    fn address_line_for(&self, i: usize) -> Option<String> {
        let callees = self.plan.callees(i);
        if callees.is_empty() {
            return None;
        }
        let addrs: Vec<Address> = callees
            .iter()
            .filter(|&&c| !self.gone[c])
            .filter_map(|&c| {
                self.ready[c].as_ref().map(|(r, _)| Address {
                    name: self.plan.members[c].name.clone(),
                    url: r.url.clone(),
                    door: self.doors[c].clone(),
                    card_key: self.card_keys[c].clone(),
                })
            })
            .collect();
        let gone: Vec<&str> = callees
            .iter()
            .filter(|&&c| self.gone[c])
            .map(|&c| self.plan.members[c].name.as_str())
            .collect();
        Some(withdrawal_line(&addrs, &gone))
    }

    /// A peer's process ended while the formation goes on: it is withdrawn from every member
    /// that may call it (the entry included), so their calls to it end `unreachable` at once
    /// instead of dialling a port that anyone may bind by now.
    /// `why` completes the launcher's line about it ("exited with status 137"); `None` when a
    /// line was printed already.
    fn withdraw(&mut self, index: usize, why: Option<String>) {
        if self.gone[index] {
            return;
        }
        self.gone[index] = true;
        let name = &self.plan.members[index].name;
        let callers: Vec<usize> = (0..self.plan.members.len())
            .filter(|&i| self.plan.callees(i).contains(&index))
            .collect();
        let line = withdrawal_line(&[], &[name.as_str()]);
        if let Some(why) = why {
            eprintln!(
                "[mur run] member '{name}' {why} while formation {} runs; {}",
                self.plan.formation_id,
                self.callers_named(index)
                    .map_or("no member calls it".to_string(), |c| format!(
                        "calls to it from {c} now end unreachable"
                    ))
            );
        }
        for c in callers {
            if let Some(peer) = &self.peers[c] {
                peer.do_send(SendAddresses(line.clone()));
            }
        }
    }

    fn begin_stop(&mut self, ending: Ending, ctx: &mut Context<Self>) {
        if matches!(self.phase, Phase::Stopping | Phase::Done) {
            return;
        }
        self.phase = Phase::Stopping;
        self.ending = Some(ending);
        for (i, peer) in self.peers.iter().enumerate() {
            if let Some(peer) = peer {
                // An entry that already exited is not listed as stopped.
                let listed = i != self.plan.entry || self.entry_running;
                if let Some(pid) = self.started[i].filter(|_| listed) {
                    self.stopped.push((i, pid));
                }
                self.pending_stops += 1;
                peer.do_send(CloseLifeline);
            }
        }
        self.stopped.sort_unstable();
        self.maybe_finish(ctx);
    }

    fn maybe_finish(&mut self, ctx: &mut Context<Self>) {
        if self.phase != Phase::Stopping || self.pending_stops > 0 || self.entry_running {
            return;
        }
        self.phase = Phase::Done;
        self.authority.do_send(DropKey);
        let code = report::ending(
            &self.plan,
            self.ending
                .as_ref()
                .map(ending_view)
                .unwrap_or(report::EndingView::Internal("")),
            &self.stopped,
        );
        if let Some(retain) = &self.plan.retention {
            retention::run(&self.plan.home, &self.plan.project_dir, &self.plan.formation_id, retain);
        }
        if let Some(done) = self.done.take() {
            let _ = done.send(code);
        }
        ctx.stop();
    }
}

/// The formation as its members' actors see it.
fn inbox(addr: &Addr<FormationActor>) -> FormationInbox {
    FormationInbox {
        ready: addr.clone().recipient(),
        exited: addr.clone().recipient(),
        started: addr.clone().recipient(),
        failed: addr.clone().recipient(),
        stopped: addr.clone().recipient(),
        entry_exited: addr.clone().recipient(),
    }
}

fn ending_view(e: &Ending) -> report::EndingView<'_> {
    match e {
        Ending::PeerFailed { index, reason } => report::EndingView::PeerFailed { index: *index, reason },
        Ending::Signal(n) => report::EndingView::Signal(*n),
        Ending::DeadlineBeforeEntry => report::EndingView::DeadlineBeforeEntry,
        Ending::EntryExited(code) => report::EndingView::EntryExited(*code),
        Ending::Internal(m) => report::EndingView::Internal(m),
    }
}

impl Actor for FormationActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let mint = Mint {
            formation_id: self.plan.formation_id.clone(),
            members: self.plan.members.iter().map(|m| m.name.clone()).collect(),
            edges: self.plan.edges.clone(),
        };
        self.authority
            .send(mint)
            .into_actor(self)
            .map(|res, act, ctx| match res {
                Ok(Ok(minted)) => act.minted(minted, ctx),
                Ok(Err(e)) => act.begin_stop(Ending::Internal(e), ctx),
                Err(e) => act.begin_stop(
                    Ending::Internal(format!("the token authority did not answer: {e}")),
                    ctx,
                ),
            })
            .wait(ctx);
        if let Some(d) = &self.plan.deadline {
            let wait = d.instant.saturating_duration_since(Instant::now());
            ctx.run_later(wait, |act, ctx| {
                if matches!(act.phase, Phase::Minting | Phase::StartingPeers) {
                    act.begin_stop(Ending::DeadlineBeforeEntry, ctx);
                }
                // Once the entry runs, every member ends itself at the deadline.
            });
        }
    }
}

impl Handler<PeerReady> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: PeerReady, ctx: &mut Context<Self>) {
        let i = msg.index;
        let again = std::mem::take(&mut self.restarting[i]);
        if !again {
            self.plan
                .progress
                .show(&self.plan.members[i].name, report::PeerState::Ready);
        }
        self.ready[i] = Some((msg.readiness, msg.pid));
        self.doors[i] = msg.door;
        self.card_keys[i] = msg.card_key;
        if again && self.phase == Phase::EntryRunning {
            // Its callers learn its new door (docs/reference/formation.md#restarts).
            if let Some((r, _)) = &self.ready[i] {
                let line = withdrawal_line(
                    &[Address {
                        name: self.plan.members[i].name.clone(),
                        url: r.url.clone(),
                        door: self.doors[i].clone(),
                        card_key: self.card_keys[i].clone(),
                    }],
                    &[],
                );
                for c in (0..self.plan.members.len()).filter(|&c| self.plan.callees(c).contains(&i)) {
                    if let Some(peer) = &self.peers[c] {
                        peer.do_send(SendAddresses(line.clone()));
                    }
                }
            }
        }
        // Also while the launch still runs: the entry then learns the new door with the rest.
        if again {
            eprintln!(
                "[mur run] member '{}' was restarted and is ready again (pid {})",
                self.plan.members[i].name, msg.pid
            );
        }
        self.maybe_start_entry(ctx);
    }
}

impl Handler<PeerExited> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: PeerExited, ctx: &mut Context<Self>) {
        // Before readiness its PeerFailed tells; once stopping, nobody calls it any more.
        if matches!(self.phase, Phase::StartingPeers | Phase::EntryRunning) && self.ready[msg.index].is_some() {
            let why = format!(
                "exited with {}",
                msg.status
                    .map_or("an unknown status".to_string(), |s| format!("status {s}"))
            );
            self.peer_ended(msg.index, msg.status, why, ctx);
        }
    }
}

impl Handler<PeerStarted> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: PeerStarted, _: &mut Context<Self>) {
        self.plan
            .progress
            .show(&self.plan.members[msg.index].name, report::PeerState::Starting);
        self.started[msg.index] = Some(msg.pid);
    }
}

impl Handler<PeerFailed> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: PeerFailed, ctx: &mut Context<Self>) {
        if self.restarting[msg.index] && matches!(self.phase, Phase::StartingPeers | Phase::EntryRunning) {
            // A restart that did not become ready counts as another end.
            let why = format!("did not become ready again after its restart ({})", msg.reason);
            return self.peer_ended(msg.index, None, why, ctx);
        }
        if self.phase == Phase::StartingPeers || self.phase == Phase::Minting {
            self.plan
                .progress
                .show(&self.plan.members[msg.index].name, report::PeerState::Failed);
            self.begin_stop(
                Ending::PeerFailed {
                    index: msg.index,
                    reason: msg.reason,
                },
                ctx,
            );
        }
    }
}

impl Handler<PeerStopped> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: PeerStopped, ctx: &mut Context<Self>) {
        if self.peers[msg.index].take().is_some() {
            self.pending_stops = self.pending_stops.saturating_sub(1);
        }
        self.maybe_finish(ctx);
    }
}

/// The launcher received SIGINT, SIGTERM or SIGHUP.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Signal(pub i32);

impl Handler<Signal> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: Signal, ctx: &mut Context<Self>) {
        self.begin_stop(Ending::Signal(msg.0), ctx);
    }
}

impl Handler<EntryExited> for FormationActor {
    type Result = ();
    fn handle(&mut self, msg: EntryExited, ctx: &mut Context<Self>) {
        use std::os::unix::process::ExitStatusExt;
        self.entry_running = false;
        let code = msg
            .0
            .map(|s| s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)))
            .unwrap_or(1);
        self.begin_stop(Ending::EntryExited(code), ctx);
        self.maybe_finish(ctx);
    }
}
