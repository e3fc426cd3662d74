//! A process-wide, lock-free registry of the members this launcher started, and the only way the
//! launcher signals one.
//!
//! If the launcher panics, its actors may never run their stop path; a panic hook then SIGKILLs
//! every registered member (a peer's whole process group, the entry by pid) so nothing the
//! formation started outlives it. Lifelines would end them anyway; this just does not wait.
//!
//! A pid (and a process group id) is the launcher's only while its process is unreaped: once
//! reaped, the kernel may hand the number to any new process. So a member is [`forget`]ten after
//! it exited and *before* it is reaped, and every signal goes through [`kill`] or [`kill_all`],
//! which signal only a member still registered. A slot being signalled is marked busy, and
//! [`forget`] waits until the signal is sent: no signal path can act on a stale number.

use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

const SLOTS: usize = 4096;

/// A slot: the pid in the low 32 bits, [`GROUP`] for a peer (signal its process group, whose id
/// is its pid) and [`BUSY`] while a signal is being sent. Zero: free.
static MEMBERS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

const PID: u64 = 0xffff_ffff;
const GROUP: u64 = 1 << 32;
const BUSY: u64 = 1 << 33;

/// A registered member: its slot and pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    slot: usize,
    pid: u32,
}

impl Member {
    pub fn pid(&self) -> u32 {
        self.pid
    }
}

/// Records a started peer (its process group) or the entry (its pid). `None` when every slot is
/// taken or the pid cannot be a process's: the caller must not leave such a process running.
pub fn register(pid: u32, own_group: bool) -> Option<Member> {
    if pid == 0 || i32::try_from(pid).is_err() {
        return None;
    }
    let value = u64::from(pid) | if own_group { GROUP } else { 0 };
    MEMBERS.iter().enumerate().find_map(|(slot, s)| {
        s.compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then_some(Member { slot, pid })
    })
}

/// Forgets a member whose process has exited, before it is reaped. Waits out a signal being sent
/// to it, so once this returns no signal of this registry can reach its pid or group again.
pub fn forget(m: Member) {
    let slot = &MEMBERS[m.slot];
    loop {
        let cur = slot.load(Ordering::Acquire);
        if cur == 0 || cur & PID != u64::from(m.pid) {
            return;
        }
        if cur & BUSY != 0 {
            std::thread::yield_now();
            continue;
        }
        if slot
            .compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::debug!("member {} forgotten before it is reaped", m.pid);
            return;
        }
    }
}

/// Whether `m` is still registered (it has not been forgotten).
pub fn registered(m: Member) -> bool {
    let cur = MEMBERS[m.slot].load(Ordering::Acquire);
    cur != 0 && cur & PID == u64::from(m.pid)
}

/// SIGKILLs a member still registered (a peer's whole process group, the entry by pid). Returns
/// whether a signal was sent; a forgotten member is never signalled.
pub fn kill(m: Member) -> bool {
    let slot = &MEMBERS[m.slot];
    loop {
        let cur = slot.load(Ordering::Acquire);
        if cur == 0 || cur & PID != u64::from(m.pid) {
            return false;
        }
        if cur & BUSY != 0 {
            // Another path is signalling it right now: that one SIGKILL is enough.
            return true;
        }
        if slot
            .compare_exchange(cur, cur | BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            send_kill(cur);
            slot.store(cur, Ordering::Release);
            return true;
        }
    }
}

/// SIGKILLs every registered member and forgets them (the panic hook).
pub fn kill_all() {
    for slot in &MEMBERS {
        let cur = slot.load(Ordering::Acquire);
        if cur == 0 || cur & BUSY != 0 {
            continue;
        }
        if slot
            .compare_exchange(cur, cur | BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            send_kill(cur);
            slot.store(0, Ordering::Release);
        }
    }
}

/// The one place the launcher sends a member a signal.
fn send_kill(value: u64) {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    let Ok(pid) = i32::try_from(value & PID) else { return };
    if value & GROUP != 0 {
        tracing::debug!("SIGKILL to process group {pid}");
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    } else {
        tracing::debug!("SIGKILL to member {pid}");
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// Installs the panic hook once per process (the previous hook still runs first).
pub fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            kill_all();
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Child, Command};
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    /// The registry is process-wide and `kill_all` empties it: these tests take turns.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn sleeper() -> Child {
        Command::new("sleep").arg("30").spawn().expect("spawn sleep")
    }

    /// Whether the child was ended by SIGKILL (reaping it), waiting a little for the signal.
    fn killed(child: &mut Child) -> bool {
        use std::os::unix::process::ExitStatusExt;
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Some(s) = child.try_wait().expect("try_wait") {
                return s.signal() == Some(9);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_forgotten_member_is_never_signalled_again() {
        let _g = crate::sync::lock(&SERIAL);
        // (forget before kill, forget before kill_all): the member must survive both.
        for forget_first in [true, false] {
            let mut child = sleeper();
            let m = register(child.id(), false).expect("a free slot");
            assert!(registered(m));
            forget(m);
            assert!(!registered(m));
            if forget_first {
                assert!(!kill(m), "a forgotten member is not signalled");
            } else {
                kill_all();
            }
            assert!(child.try_wait().expect("try_wait").is_none(), "still running");
            child.kill().expect("kill");
            child.wait().expect("wait");
        }
    }

    #[test]
    fn kill_signals_a_registered_member_and_kill_all_empties_the_registry() {
        let _g = crate::sync::lock(&SERIAL);
        let mut a = sleeper();
        let ma = register(a.id(), false).expect("slot");
        assert!(kill(ma));
        forget(ma);
        assert!(killed(&mut a));

        let mut b = sleeper();
        let mb = register(b.id(), false).expect("slot");
        kill_all();
        assert!(killed(&mut b));
        assert!(!registered(mb), "kill_all forgets what it killed");
        assert!(!kill(mb));
    }

    #[test]
    fn a_slot_freed_and_taken_again_is_not_the_old_member() {
        let _g = crate::sync::lock(&SERIAL);
        // Pids that cannot be a process's are refused, and a stale handle never matches a slot
        // now holding another pid.
        assert_eq!(register(0, true), None);
        assert_eq!(register(u32::MAX, true), None);
        let old = register(4_000_001, true).expect("slot");
        forget(old);
        let new = register(4_000_002, true).expect("slot");
        assert_eq!(new.slot, old.slot, "the freed slot is reused");
        assert!(!registered(old) && registered(new));
        forget(old);
        assert!(registered(new), "forgetting a stale handle frees nothing");
        forget(new);
    }

    #[test]
    fn forget_waits_for_a_signal_in_flight() {
        let _g = crate::sync::lock(&SERIAL);
        let m = register(4_000_003, true).expect("slot");
        let slot = &MEMBERS[m.slot];
        let value = slot.load(Ordering::Acquire);
        // A signal path holds the slot busy; forget must not return until it lets go.
        slot.store(value | BUSY, Ordering::Release);
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let t = std::thread::spawn(move || {
            forget(m);
            d.store(true, Ordering::Release);
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !done.load(Ordering::Acquire),
            "forget returned while a signal was in flight"
        );
        slot.store(value, Ordering::Release);
        t.join().expect("join");
        assert!(done.load(Ordering::Acquire));
        assert!(!registered(m));
    }
}
