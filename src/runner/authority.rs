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

    /// One line out; its answer is [`Link::collect`]ed later.
    fn send(&mut self, ask: &Ask) -> Result<u64, String> {
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
            let Some(first) = self.sent.pop_front() else {
                return Err("the launcher was asked nothing under this line".into());
            };
            let reply = match self.read() {
                Ok(reply) => reply,
                Err(why) => {
                    self.writer = Err(why.clone());
                    self.sent.clear();
                    return Err(why);
                }
            };
            if first == seq {
                return Ok(reply);
            }
            if !self.dropped.remove(&first) {
                self.stash.insert(first, reply);
            }
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
