//! Locks that never panic. A poisoned mutex only means another thread panicked while holding it;
//! every structure mur guards stays consistent between statements (each update is one assignment
//! or one collection call), so the data is still the best there is and serving it beats failing a
//! door or a launcher over it.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking the data over from a thread that panicked while holding it.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_yields_its_data() {
        let m = std::sync::Arc::new(Mutex::new(7));
        let held = m.clone();
        let _ = std::thread::spawn(move || {
            let _guard = held.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 7);
    }
}
