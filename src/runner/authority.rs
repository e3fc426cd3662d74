//! A member's side of its authority channel (docs/reference/formation.md#the-authority-channel):
//! one Unix socket to the launcher (`MURMUR_FORMATION_AUTHORITY`), shared by the model's budget
//! (`model::budget`) and the grants of member calls (`calls`). The launcher answers in
//! microseconds and in order, so a bounded blocking exchange is all most requests take; a
//! grant prepared ahead of a call is sent at once and its answer read when the call needs it
//! (answers read meanwhile by another asker are kept for theirs). A link that broke stays
//! broken, and every later request is refused.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};

use crate::grant::Refusal;
use crate::wire::authority_line::{Ask, Delegate, MAX_REPLY_LINE, Parent, Reply};
use crate::wire::budget_line;

/// How long a member waits for the launcher's answer: it answers in microseconds, so only a
/// stopped launcher takes this long, and then the request is refused rather than waited on.
const LAUNCHER_ANSWER: Duration = Duration::from_secs(5);

/// The link to the launcher's authority.
#[derive(Debug)]
pub struct Authority {
    link: Mutex<Link>,
    next: AtomicU64,
}

#[derive(Debug)]
struct Link {
    reader: BufReader<UnixStream>,
    /// `Err` once the link broke, saying why.
    writer: Result<UnixStream, String>,
    /// The lines sent and not answered yet, by sequence, oldest first: the launcher answers in
    /// order, so the next line read answers the first.
    sent: VecDeque<u64>,
    /// Answers read while waiting for a later one, kept for whoever asked.
    stash: HashMap<u64, Reply>,
    /// Lines whose answers nobody will collect: read and dropped.
    dropped: HashSet<u64>,
    seq: u64,
}

/// A delegation sent ahead and not collected yet ([`Authority::delegate_ahead`]).
#[derive(Debug)]
pub struct Ahead {
    seq: u64,
    id: u64,
}

/// Why a call got no grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undelegated {
    /// The launcher refused to narrow.
    Refused(Refusal),
    /// The launcher cannot be reached (it ended, or its channel broke).
    Unreachable(String),
}

impl Authority {
    pub fn new(stream: UnixStream) -> Authority {
        let _ = stream.set_read_timeout(Some(LAUNCHER_ANSWER));
        let _ = stream.set_write_timeout(Some(LAUNCHER_ANSWER));
        Authority {
            link: Mutex::new(Link {
                writer: stream
                    .try_clone()
                    .map_err(|e| format!("its channel cannot be used: {e}")),
                reader: BufReader::with_capacity(MAX_REPLY_LINE, stream),
                sent: VecDeque::new(),
                stash: HashMap::new(),
                dropped: HashSet::new(),
                seq: 0,
            }),
            next: AtomicU64::new(1),
        }
    }

    /// One budget line out, its answer back.
    pub fn budget(&self, ask: budget_line::Ask) -> Result<budget_line::Reply, String> {
        match crate::sync::lock(&self.link).ask(&Ask::Budget(ask))? {
            Reply::Budget(r) => Ok(r),
            other => Err(format!(
                "the launcher answered out of turn: {}",
                crate::text::head(other.line().trim_end(), 64)
            )),
        }
    }

    /// A reservation of `tokens` under `grant` (the grant the task runs under), answered as a
    /// budget reservation is.
    pub fn reserve_under(&self, id: u64, tokens: u64, grant: &str) -> Result<budget_line::Reply, String> {
        let ask = Ask::ReserveUnder {
            id,
            tokens,
            grant: grant.to_string(),
        };
        match crate::sync::lock(&self.link).ask(&ask)? {
            Reply::Budget(r) => Ok(r),
            _ => Err("the launcher answered out of turn".into()),
        }
    }

    /// This member's grant key, which its door opens its callers' grants with
    /// (docs/reference/formation.md#grants). Asked for once, as the session starts.
    pub fn grant_key(&self) -> Result<crate::token::GrantKey, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        match crate::sync::lock(&self.link).ask(&Ask::GrantKey { id })? {
            Reply::GrantKey { id: got, key } if got == id => Ok(key),
            Reply::Undelegated { id: got, .. } if got == id => Err("the launcher holds no grant key for it".into()),
            _ => Err("the launcher answered out of turn".into()),
        }
    }

    /// The grant for a call of task `task` to `callee`, narrowed from `parent`, optionally
    /// narrower still (`deadline_ms`, `budget`).
    pub fn delegate(
        &self,
        parent: Parent,
        task: &str,
        callee: &str,
        deadline_ms: Option<u64>,
        budget: Option<u64>,
    ) -> Result<String, Undelegated> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ask = Ask::Delegate(Delegate {
            id,
            parent,
            task: task.to_string(),
            callee: callee.to_string(),
            deadline_ms,
            budget,
        });
        match crate::sync::lock(&self.link)
            .ask(&ask)
            .map_err(Undelegated::Unreachable)?
        {
            Reply::Delegated { id: got, grant } if got == id => Ok(grant),
            Reply::Undelegated { id: got, why } if got == id => Err(Undelegated::Refused(why)),
            _ => Err(Undelegated::Unreachable("the launcher answered out of turn".into())),
        }
    }
}

impl Authority {
    /// [`Authority::delegate`] with no limits of its own, sent now and collected later with
    /// [`Authority::collect`] (or dropped with [`Authority::drop_ahead`]), so the launcher
    /// narrows while the member goes on.
    pub fn delegate_ahead(&self, parent: Parent, task: &str, callee: &str) -> Result<Ahead, Undelegated> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ask = Ask::Delegate(Delegate {
            id,
            parent,
            task: task.to_string(),
            callee: callee.to_string(),
            deadline_ms: None,
            budget: None,
        });
        let seq = crate::sync::lock(&self.link)
            .send(&ask)
            .map_err(Undelegated::Unreachable)?;
        Ok(Ahead { seq, id })
    }

    /// The grant a [`Authority::delegate_ahead`] asked for; waits for it when it has not come.
    pub fn collect(&self, ahead: Ahead) -> Result<String, Undelegated> {
        match crate::sync::lock(&self.link)
            .collect(ahead.seq)
            .map_err(Undelegated::Unreachable)?
        {
            Reply::Delegated { id, grant } if id == ahead.id => Ok(grant),
            Reply::Undelegated { id, why } if id == ahead.id => Err(Undelegated::Refused(why)),
            _ => Err(Undelegated::Unreachable("the launcher answered out of turn".into())),
        }
    }

    /// A [`Authority::delegate_ahead`] whose grant nobody will use: its answer is dropped when
    /// it comes.
    pub fn drop_ahead(&self, ahead: Ahead) {
        crate::sync::lock(&self.link).drop_answer(ahead.seq);
    }
}

impl Link {
    /// One line out, its answer back. A failure breaks the link for good.
    fn ask(&mut self, ask: &Ask) -> Result<Reply, String> {
        let seq = self.send(ask)?;
        self.collect(seq)
    }

    /// One line out; its answer is [`Link::collect`]ed later. The answers that have already come
    /// are read first ([`Link::absorb_ready`]).
    fn send(&mut self, ask: &Ask) -> Result<u64, String> {
        self.absorb_ready()?;
        if let Err(why) = self.wait_writable() {
            self.writer = Err(why.clone());
            self.sent.clear();
            return Err(why);
        }
        let result = match self.writer.as_mut() {
            Err(why) => Err(why.clone()),
            Ok(writer) => writer
                .write_all(ask.line().as_bytes())
                .map_err(|e| format!("the launcher's channel cannot be written: {e}")),
        };
        if let Err(why) = result {
            self.writer = Err(why.clone());
            return Err(why);
        }
        self.seq += 1;
        self.sent.push_back(self.seq);
        Ok(self.seq)
    }

    /// The answer to line `seq`, reading (and keeping for their askers) the answers before it.
    fn collect(&mut self, seq: u64) -> Result<Reply, String> {
        loop {
            if let Some(reply) = self.stash.remove(&seq) {
                return Ok(reply);
            }
            let (first, reply) = self.read_next()?;
            if first == seq {
                return Ok(reply);
            }
            self.keep(first, reply);
        }
    }

    /// Reads every answer that has already come, without waiting for one that has not, and keeps
    /// it for its asker (or drops it, when nobody will collect it). An answer is otherwise read
    /// only when someone waits for it or for a later one, so a member whose tasks ask ahead and
    /// make no call would leave every answer in the socket: once it is full the launcher blocks
    /// writing, stops reading this member's lines, and the member's next line blocks its
    /// executor until the link breaks.
    fn absorb_ready(&mut self) -> Result<(), String> {
        while !self.sent.is_empty() && self.answer_ready() {
            let (first, reply) = self.read_next()?;
            self.keep(first, reply);
        }
        Ok(())
    }

    /// Waits until a line can be written, reading the answers that come meanwhile: a launcher
    /// blocked writing answers this member has not read yet stops reading its lines, so waiting
    /// only to write would wait for each other. (A Unix stream socket reports itself writable
    /// while three quarters of its buffer are free, far more than one line.) `Err` when neither
    /// happens within [`LAUNCHER_ANSWER`].
    fn wait_writable(&mut self) -> Result<(), String> {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let until = std::time::Instant::now() + LAUNCHER_ANSWER;
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            let (writable, readable) = {
                let writer = self.writer.as_ref().map_err(|why| why.clone())?;
                let mut fds = vec![PollFd::new(writer.as_fd(), PollFlags::POLLOUT)];
                if !self.sent.is_empty() {
                    fds.push(PollFd::new(self.reader.get_ref().as_fd(), PollFlags::POLLIN));
                }
                let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
                match poll(&mut fds, timeout) {
                    Ok(0) => {
                        return Err(format!(
                            "the launcher's channel cannot be written: it took no line for {} s",
                            LAUNCHER_ANSWER.as_secs()
                        ));
                    }
                    Ok(_) => {}
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(format!("the launcher's channel cannot be watched: {e}")),
                }
                let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                (ready(&fds[0]), fds.get(1).is_some_and(ready))
            };
            // Anything but room (the peer gone, an error) is for the write to report.
            if writable {
                return Ok(());
            }
            if readable {
                let (first, reply) = self.read_next()?;
                self.keep(first, reply);
            }
        }
    }

    /// Whether an answer can be read now: a whole line is buffered, or the socket has bytes (the
    /// launcher writes each line whole, so the rest of one follows at once).
    fn answer_ready(&self) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        if self.reader.buffer().contains(&b'\n') {
            return true;
        }
        let mut fds = [PollFd::new(self.reader.get_ref().as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
    }

    /// The answer to the oldest line not answered yet. A failure breaks the link for good.
    fn read_next(&mut self) -> Result<(u64, Reply), String> {
        let Some(first) = self.sent.pop_front() else {
            return Err("the launcher was asked nothing under this line".into());
        };
        match self.read() {
            Ok(reply) => Ok((first, reply)),
            Err(why) => {
                self.writer = Err(why.clone());
                self.sent.clear();
                Err(why)
            }
        }
    }

    /// An answer read before its asker came for it: kept, unless nobody will.
    fn keep(&mut self, seq: u64, reply: Reply) {
        if !self.dropped.remove(&seq) {
            self.stash.insert(seq, reply);
        }
    }

    /// Line `seq`'s answer will not be collected.
    fn drop_answer(&mut self, seq: u64) {
        if self.stash.remove(&seq).is_none() && self.sent.contains(&seq) {
            self.dropped.insert(seq);
        }
    }

    fn read(&mut self) -> Result<Reply, String> {
        self.writer.as_ref().map_err(|why| why.clone())?;
        // Wiped when read: a `grant-key` answer holds this member's key.
        let mut line = zeroize::Zeroizing::new(String::new());
        let n = (&mut self.reader)
            .take(MAX_REPLY_LINE as u64)
            .read_line(&mut line)
            .map_err(|e| format!("the launcher did not answer: {e}"))?;
        if n == 0 {
            return Err("the launcher closed its channel".into());
        }
        let Some(text) = line.strip_suffix('\n') else {
            return Err("the launcher's answer is not a line".into());
        };
        Reply::parse(text).ok_or_else(|| "the launcher's answer cannot be read".into())
    }
}

/// The channel the launcher handed over (`MURMUR_FORMATION_AUTHORITY`, or
/// `MURMUR_FORMATION_BUDGET` from a launcher that hands only that): the descriptor must be a
/// socket not claimed by the channel or the lifeline. It is made close-on-exec: nothing the
/// member starts inherits it. `Err` says why it cannot be used; the caller refuses the start.
pub fn take_link(raw: &std::ffi::OsStr, taken: &[Option<RawFd>]) -> Result<UnixStream, String> {
    let fd: RawFd = raw
        .to_str()
        .and_then(|s| s.parse().ok())
        .filter(|fd| *fd > 2)
        .ok_or("it is not a descriptor number above 2")?;
    if taken.contains(&Some(fd)) {
        return Err(format!("descriptor {fd} is the formation channel or lifeline"));
    }
    let st = fstat(fd).map_err(|_| format!("descriptor {fd} is not open"))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
        return Err(format!("descriptor {fd} is not a socket"));
    }
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("descriptor {fd} cannot be made close-on-exec ({e})"))?;
    // SAFETY: `fd` is open (fstat succeeded), is a socket, and is not a standard stream, the
    // channel or the lifeline; nothing else in this process owns it.
    Ok(UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grant::Origin;

    const TSK: &str = "tsk_0199c4e2f1b7712a9d3e4f5061728394";

    /// A launcher's side that answers every `delegate` with a grant of `grant_bytes` bytes, in
    /// order, as the keeper does, blocking when the member does not read. It starts reading only
    /// after `asleep`, as a launcher busy elsewhere would, so the member's lines pile up first.
    fn launcher(grant_bytes: usize, asleep: Duration) -> Authority {
        let (member, launcher) = UnixStream::pair().expect("socket pair");
        std::thread::spawn(move || {
            std::thread::sleep(asleep);
            let mut writer = launcher.try_clone().expect("clone");
            let grant = format!("mgr2.{}.x", "A".repeat(grant_bytes));
            for line in BufReader::new(launcher).lines() {
                let Ok(line) = line else { return };
                let Some(Ask::Delegate(d)) = Ask::parse(&line) else {
                    return;
                };
                let reply = Reply::Delegated {
                    id: d.id,
                    grant: grant.clone(),
                };
                if writer.write_all(reply.line().as_bytes()).is_err() {
                    return;
                }
            }
        });
        Authority::new(member)
    }

    #[test]
    fn answers_nobody_collects_never_fill_the_channel() {
        // Each task of a member with callees asks ahead and, when it makes no call, drops the
        // ask: thousands of answers no one reads must not fill the socket until the member's
        // next ask blocks (and its executor with it) and the link breaks.
        // The launcher first sleeps while the member writes more lines than the socket holds,
        // then answers more than its way back holds: each side must read while it waits to write.
        for asleep in [Duration::ZERO, Duration::from_millis(300)] {
            asks_nobody_collects(launcher(2048, asleep));
        }
    }

    fn asks_nobody_collects(authority: Authority) {
        let root = || Parent::Root(Origin::Operator);
        for i in 0..4000 {
            let ahead = authority
                .delegate_ahead(root(), TSK, "worker")
                .unwrap_or_else(|e| panic!("ask {i}: {e:?}"));
            authority.drop_ahead(ahead);
        }
        let kept = authority.delegate_ahead(root(), TSK, "worker").expect("asked");
        assert!(authority.collect(kept).is_ok(), "an ask sent after them is answered");
        assert!(authority.delegate(root(), TSK, "worker", None, None).is_ok());
        let link = crate::sync::lock(&authority.link);
        assert!(
            link.stash.len() + link.dropped.len() + link.sent.len() <= 2,
            "nothing left behind: {} stashed, {} dropped, {} sent",
            link.stash.len(),
            link.dropped.len(),
            link.sent.len()
        );
    }
}
