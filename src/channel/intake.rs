//! Member intake of the formation channel (docs/reference/formation.md#member-intake): the
//! inherited descriptor named by `MURMUR_FORMATION_CHANNEL`, its first line before the session is
//! staged, then a background reader for address lines until EOF.
//!
//! Tokens read here stay in memory: no error text, log line or `Debug` output quotes one.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::sys::stat::{SFlag, fstat};

use super::line::{AddressLine, FirstLine, MAX_LINE, parse_address_line};
use crate::diag::{self, Diagnostic};

/// What the background reader reports after the first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelEvent {
    /// A readable address line (names are not filtered: the router ignores non-callees).
    Addresses(AddressLine),
    /// A line that could not be read, and why; log it with [`unreadable_notice`] and go on.
    Unreadable(String),
    /// EOF (or a read error): the address book is closed. Always the last event.
    Closed,
}

/// The log text for an unreadable address line (docs/reference/formation.md#the-formation-channel),
/// to print behind `[capsule-runtime] `.
pub fn unreadable_notice(why: &str) -> String {
    format!("the formation channel sent an address line that could not be read ({why}); it was ignored")
}

/// E-RUN-046 with the docs/reference/formation.md#member-intake text around `reason`.
pub fn refusal(reason: &str) -> Diagnostic {
    Diagnostic::new(
        diag::E_RUN_046,
        format!("MURMUR_FORMATION_CHANNEL does not carry this member's formation credentials: {reason}, so the launch is refused"),
    )
    .with_hint("MURMUR_FORMATION_CHANNEL is set by `mur run --roster`; unset it to run a capsule on its own")
}

/// The channel after its first line: the descriptor and any bytes read past that line.
pub struct Intake {
    fd: OwnedFd,
    pending: Vec<u8>,
}

impl std::fmt::Debug for Intake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Intake {{ fd: {}, pending: {} bytes }}",
            self.fd.as_raw_fd(),
            self.pending.len()
        )
    }
}

/// Reads the first line from the inherited fd, refusing with E-RUN-046 per
/// docs/reference/formation.md#member-intake (not digits, fd ≤ 2, not open, not a FIFO/regular
/// file, no line within `wait` (10 s in production), bad line, a token not issued to this member,
/// another formation). Sets close-on-exec at once.
///
/// `env_formation` is `MURMUR_FORMATION_ID` as already checked by the caller (E-RUN-044). Call this
/// early in start-up: the descriptor is taken over (closed on drop) once it proved to be a pipe or
/// file, so it must be the inherited channel and nothing this process opened itself.
pub fn read_first_line(
    env_channel: &str,
    env_formation: Option<&str>,
    wait: Duration,
) -> Result<(FirstLine, Intake), Diagnostic> {
    let formation = match env_formation.map(str::trim) {
        Some(f) if !f.is_empty() => f,
        _ => return Err(refusal("it is set, but MURMUR_FORMATION_ID is not")),
    };
    let fd = open_channel(env_channel).map_err(|r| refusal(&r))?;
    let n = fd.as_raw_fd();
    let mut intake = Intake {
        fd,
        pending: Vec::new(),
    };
    let line = intake.first_line(wait).map_err(|r| refusal(&r))?;
    let line = String::from_utf8(line).map_err(|_| refusal("its first line is not UTF-8"))?;
    let first = FirstLine::parse(&line).map_err(|r| refusal(&r))?;
    first.check_tokens().map_err(|r| refusal(&r))?;
    if first.formation_id != formation {
        return Err(refusal(
            "its first line names another formation than MURMUR_FORMATION_ID",
        ));
    }
    tracing::debug!(fd = n, member = %first.member, calls = first.calls.len(), "formation channel: first line read");
    Ok((first, intake))
}

/// Validates the descriptor named by the variable, sets close-on-exec and takes it over.
fn open_channel(value: &str) -> Result<OwnedFd, String> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        let shown: String = value.chars().take(20).collect();
        return Err(format!("descriptor '{shown}' is not a number"));
    }
    let fd: RawFd = value.parse().map_err(|_| format!("descriptor {value} is not open"))?;
    if fd <= 2 {
        return Err(format!("descriptor {fd} is a standard stream, not a formation channel"));
    }
    match fcntl(fd, FcntlArg::F_GETFD) {
        Ok(_) => {}
        Err(Errno::EBADF) => return Err(format!("descriptor {fd} is not open")),
        Err(e) => return Err(format!("descriptor {fd} cannot be inspected ({e})")),
    }
    let st = fstat(fd).map_err(|e| format!("descriptor {fd} cannot be inspected ({e})"))?;
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    if kind != SFlag::S_IFIFO && kind != SFlag::S_IFREG {
        return Err(format!("descriptor {fd} is not a pipe or a file"));
    }
    // Before anything else can spawn: no child of this member may inherit its credentials.
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))
        .map_err(|e| format!("descriptor {fd} cannot be set close-on-exec ({e})"))?;
    // SAFETY: `fd` is open (checked above) and is the channel the launcher handed this process for
    // this purpose alone; from here on nothing else in the process uses or closes it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Intake {
    /// The first line's bytes (without `\n`/`\r`), leaving later bytes in `pending`.
    /// Non-blocking reads with short sleeps keep the wait bounded without a poll dependency.
    fn first_line(&mut self, wait: Duration) -> Result<Vec<u8>, String> {
        let fd = self.fd.as_raw_fd();
        set_nonblocking(fd, true).map_err(|e| format!("descriptor {fd} cannot be read ({e})"))?;
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if let Some(line) = take_line(&mut self.pending) {
                return Ok(line);
            }
            if self.pending.len() > MAX_LINE + 1 {
                return Err("its first line is longer than 1 MiB".into());
            }
            match nix::unistd::read(fd, &mut chunk) {
                Ok(0) if self.pending.is_empty() => {
                    return Err("the channel closed before a first line arrived".into());
                }
                // A last line without its `\n` is still the line.
                Ok(0) => return Ok(strip_cr(std::mem::take(&mut self.pending))),
                Ok(k) => self.pending.extend_from_slice(&chunk[..k]),
                Err(Errno::EINTR) => {}
                Err(Errno::EAGAIN) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return Err(format!("no first line arrived within {}", show_wait(wait)));
                    }
                    std::thread::sleep(pause.min(deadline - now));
                    pause = (pause * 2).min(Duration::from_millis(25));
                }
                Err(e) => return Err(format!("descriptor {fd} cannot be read ({e})")),
            }
        }
    }

    /// Starts a thread that reads later lines until EOF and reports each as a [`ChannelEvent`],
    /// ending with `Closed`. The thread blocks on the pipe (it is not an async worker).
    pub fn spawn_reader(
        self,
        mut on_event: impl FnMut(ChannelEvent) + Send + 'static,
    ) -> std::io::Result<JoinHandle<()>> {
        set_nonblocking(self.fd.as_raw_fd(), false).map_err(std::io::Error::from)?;
        let Intake { fd, pending } = self;
        std::thread::Builder::new()
            .name("formation-channel".into())
            .spawn(move || {
                read_lines(File::from(fd), pending, &mut on_event);
                on_event(ChannelEvent::Closed);
            })
    }
}

fn read_lines(mut file: File, mut pending: Vec<u8>, on_event: &mut impl FnMut(ChannelEvent)) {
    let mut chunk = vec![0u8; 64 * 1024];
    // True while discarding the rest of an over-long line.
    let mut skipping = false;
    loop {
        while let Some(line) = take_line(&mut pending) {
            if skipping {
                skipping = false;
            } else {
                on_event(address_event(line));
            }
        }
        if pending.len() > MAX_LINE + 1 {
            if !skipping {
                on_event(ChannelEvent::Unreadable("the line is longer than 1 MiB".into()));
            }
            skipping = true;
            pending.clear();
        }
        match file.read(&mut chunk) {
            Ok(0) => {
                if !pending.is_empty() && !skipping {
                    on_event(address_event(strip_cr(pending)));
                }
                return;
            }
            Ok(k) => pending.extend_from_slice(&chunk[..k]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                on_event(ChannelEvent::Unreadable(format!("the channel could not be read: {e}")));
                return;
            }
        }
    }
}

fn address_event(line: Vec<u8>) -> ChannelEvent {
    match String::from_utf8(line) {
        Ok(s) => match parse_address_line(&s) {
            Ok(a) => ChannelEvent::Addresses(a),
            Err(why) => ChannelEvent::Unreadable(why),
        },
        Err(_) => ChannelEvent::Unreadable("the line is not UTF-8".into()),
    }
}

/// Removes and returns the first complete line of `buf`, without `\n` and a trailing `\r`.
fn take_line(buf: &mut Vec<u8>) -> Option<Vec<u8>> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let mut line: Vec<u8> = buf.drain(..=nl).collect();
    line.pop();
    Some(strip_cr(line))
}

fn strip_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

fn set_nonblocking(fd: RawFd, on: bool) -> nix::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags - OFlag::O_NONBLOCK
    };
    fcntl(fd, FcntlArg::F_SETFL(flags)).map(|_| ())
}

/// `10s` for whole seconds (production), `50ms` otherwise (tests).
fn show_wait(wait: Duration) -> String {
    if wait.subsec_nanos() == 0 {
        format!("{}s", wait.as_secs())
    } else {
        format!("{}ms", wait.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::line::Address;
    use crate::channel::line::{Call, address_line};
    use crate::token::SigningKey;
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    use std::sync::mpsc;

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
    const SHORT: Duration = Duration::from_millis(50);

    fn first_line(key: &SigningKey, member: &str, formation: &str) -> FirstLine {
        FirstLine {
            formation_id: formation.into(),
            member: member.into(),
            launcher: None,
            entry: false,
            verify_key: key.verify_key().to_b64(),
            calls: vec![Call {
                name: "coder".into(),
                token: crate::secret::Secret::new(key.mint(formation, member, "coder")),
            }],
        }
    }

    /// A pipe holding `text`; returns the read end's number (ownership passes to the callee) and
    /// the write end. Close-on-exec, so a child spawned by a concurrent test cannot hold the write
    /// end open and turn an expected EOF into a timeout.
    fn pipe_with(text: &str) -> (String, File) {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let mut w = File::from(w);
        w.write_all(text.as_bytes()).unwrap();
        (r.into_raw_fd().to_string(), w)
    }

    fn reason(d: &Diagnostic) -> String {
        assert_eq!(d.code, diag::E_RUN_046);
        let m = &d.message;
        let head = "MURMUR_FORMATION_CHANNEL does not carry this member's formation credentials: ";
        assert!(m.starts_with(head) && m.ends_with(", so the launch is refused"), "{m}");
        m[head.len()..m.len() - ", so the launch is refused".len()].to_string()
    }

    #[test]
    fn good_first_line_then_address_lines_and_eof() {
        let key = SigningKey::generate().unwrap();
        let fl = first_line(&key, "planner", FRM);
        let addrs = vec![Address {
            name: "coder".into(),
            url: "http://localhost:4000".into(),
            door: None,
            card_key: None,
        }];
        // The entry's channel holds both lines before it starts: the second must not be lost.
        let (fd, mut w) = pipe_with(&(fl.to_line() + &address_line(&addrs)));
        // As the launcher hands it over: inheritable, so that intake must set close-on-exec.
        let raw: RawFd = fd.parse().unwrap();
        fcntl(raw, FcntlArg::F_SETFD(FdFlag::empty())).unwrap();
        let (got, intake) = read_first_line(&fd, Some(FRM), SHORT).unwrap();
        assert_eq!(got, fl);
        let flags = FdFlag::from_bits_truncate(fcntl(raw, FcntlArg::F_GETFD).unwrap());
        assert!(flags.contains(FdFlag::FD_CLOEXEC));
        let (tx, rx) = mpsc::channel();
        let h = intake.spawn_reader(move |e| tx.send(e).unwrap()).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            ChannelEvent::Addresses(AddressLine {
                addresses: addrs,
                withdrawn: vec![]
            })
        );
        w.write_all(b"garbage\r\n{\"addresses\":[]}\n").unwrap();
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            ChannelEvent::Unreadable(_)
        ));
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            ChannelEvent::Addresses(AddressLine::default())
        );
        drop(w);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), ChannelEvent::Closed);
        h.join().unwrap();
    }

    #[test]
    fn first_line_from_a_regular_file() {
        let key = SigningKey::generate().unwrap();
        let fl = first_line(&key, "planner", FRM);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(fl.to_line().as_bytes()).unwrap();
        use std::io::Seek;
        f.rewind().unwrap();
        let fd = f.into_raw_fd().to_string();
        let (got, intake) = read_first_line(&fd, Some(FRM), SHORT).unwrap();
        assert_eq!(got, fl);
        let (tx, rx) = mpsc::channel();
        intake
            .spawn_reader(move |e| tx.send(e).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), vec![ChannelEvent::Closed]);
    }

    #[test]
    fn descriptor_refusals() {
        let table: &[(&str, &str)] = &[
            ("", "descriptor '' is not a number"),
            ("x3", "descriptor 'x3' is not a number"),
            ("-4", "descriptor '-4' is not a number"),
            (" 4", "descriptor ' 4' is not a number"),
            ("1", "descriptor 1 is a standard stream, not a formation channel"),
            ("0", "descriptor 0 is a standard stream, not a formation channel"),
            ("999999", "descriptor 999999 is not open"),
            ("99999999999", "descriptor 99999999999 is not open"),
        ];
        for (v, want) in table {
            let d = read_first_line(v, Some(FRM), SHORT).unwrap_err();
            assert_eq!(reason(&d), *want, "{v:?}");
        }
        let d = read_first_line("5", None, SHORT).unwrap_err();
        assert_eq!(reason(&d), "it is set, but MURMUR_FORMATION_ID is not");
        let d = read_first_line("5", Some("  "), SHORT).unwrap_err();
        assert_eq!(reason(&d), "it is set, but MURMUR_FORMATION_ID is not");
        // A socket is neither a pipe nor a file; refused before it is taken over.
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let n = a.as_raw_fd();
        let d = read_first_line(&n.to_string(), Some(FRM), SHORT).unwrap_err();
        assert_eq!(reason(&d), format!("descriptor {n} is not a pipe or a file"));
    }

    #[test]
    fn no_line_within_the_wait() {
        let (fd, _w) = pipe_with("{\"formation_id\":");
        let start = Instant::now();
        let d = read_first_line(&fd, Some(FRM), SHORT).unwrap_err();
        assert_eq!(reason(&d), "no first line arrived within 50ms");
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(show_wait(Duration::from_secs(10)), "10s");
    }

    #[test]
    fn closed_before_a_line() {
        let (fd, w) = pipe_with("");
        drop(w);
        let d = read_first_line(&fd, Some(FRM), SHORT).unwrap_err();
        assert_eq!(reason(&d), "the channel closed before a first line arrived");
    }

    #[test]
    fn bad_lines_tokens_and_formations_are_refused() {
        let key = SigningKey::generate().unwrap();
        let other_frm = "frm_0199c4e2f1b7712a9d3e4f5061728395";
        let mut stolen = first_line(&key, "planner", FRM);
        stolen.member = "reviewer".into(); // a token minted for planner, presented as reviewer's
        let cases: Vec<(String, String)> = vec![
            ("not json\n".into(), "its first line is not JSON (expected ident at line 1 column 2)".into()),
            ("\u{0}\n".into(), "its first line is not JSON (expected value at line 1 column 1)".into()),
            (
                stolen.to_line(),
                "its first line's calls[0].token was not issued to this member for that callee under the line's own key".into(),
            ),
            (
                first_line(&key, "planner", other_frm).to_line(),
                "its first line names another formation than MURMUR_FORMATION_ID".into(),
            ),
        ];
        for (text, want) in cases {
            let (fd, _w) = pipe_with(&text);
            let d = read_first_line(&fd, Some(FRM), SHORT).unwrap_err();
            assert_eq!(reason(&d), want);
            assert!(!d.message.contains("mft1"));
        }
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        File::from(w).write_all(b"\xff\xfe\n").unwrap();
        let d = read_first_line(&r.into_raw_fd().to_string(), Some(FRM), SHORT).unwrap_err();
        assert_eq!(reason(&d), "its first line is not UTF-8");
    }

    #[test]
    fn over_long_address_line_is_reported_once_and_skipped() {
        let mut events = Vec::new();
        let mut long = vec![b'x'; MAX_LINE + 10];
        long.extend_from_slice(b"\n{\"addresses\":[]}\n");
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let writer = std::thread::spawn(move || File::from(w).write_all(&long).unwrap());
        read_lines(File::from(r), Vec::new(), &mut |e| events.push(e));
        writer.join().unwrap();
        assert_eq!(
            events,
            vec![
                ChannelEvent::Unreadable("the line is longer than 1 MiB".into()),
                ChannelEvent::Addresses(AddressLine::default())
            ]
        );
    }
}
