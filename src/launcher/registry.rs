//! A process-wide, lock-free registry of the members this launcher started.
//!
//! If the launcher panics, its actors may never run their stop path; a panic hook then SIGKILLs
//! every registered member (a peer's whole process group, the entry by pid) so nothing the
//! formation started outlives it. Lifelines would end them anyway; this just does not wait.

use std::sync::Once;
use std::sync::atomic::{AtomicI32, Ordering};

const SLOTS: usize = 4096;

/// Positive: a peer's process group id. Negative: the entry member's pid. Zero: free.
static MEMBERS: [AtomicI32; SLOTS] = [const { AtomicI32::new(0) }; SLOTS];

/// Records a started peer (its process group) or the entry (its pid).
pub fn register(pid: u32, own_group: bool) {
    let Ok(pid) = i32::try_from(pid) else { return };
    let value = if own_group { pid } else { -pid };
    for slot in &MEMBERS {
        if slot
            .compare_exchange(0, value, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
    }
}

/// Forgets a member once it has been reaped.
pub fn unregister(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else { return };
    for slot in &MEMBERS {
        let _ = slot.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Acquire);
        let _ = slot.compare_exchange(-pid, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// SIGKILLs every registered member.
pub fn kill_all() {
    use nix::sys::signal::{Signal, kill, killpg};
    use nix::unistd::Pid;
    for slot in &MEMBERS {
        match slot.swap(0, Ordering::AcqRel) {
            0 => {}
            g if g > 0 => {
                let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
            }
            p => {
                let _ = kill(Pid::from_raw(-p), Signal::SIGKILL);
            }
        }
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
