//! A door's token verification cache: "verify each distinct token once and remember the result for
//! the door's life", bounded so a flood of forged tokens cannot exhaust memory.
//!
//! Two tiers, both keyed by the SHA-256 of the token (the token itself is never stored):
//! - *lasting*: results kept for the cache's life. Genuine credentials are few (at most one
//!   formation token per edge plus the operator token), so `capacity` bounds this tier comfortably.
//! - *recent*: a FIFO ring of at most `capacity` other results. A flood of distinct forged tokens
//!   costs one verification each and evicts only ring entries, never a lasting one.
//!
//! Which results last: with [`VerifyCache::with_lasting`] the caller says (e.g. "the verdict is a
//! credential"); with [`VerifyCache::new`] a result lasts once its token is presented a second time
//! while still in the ring, since a genuine caller reuses its token (GetTask polls) while forged
//! tokens are usually one-shot. Either way the worst an attacker achieves is a re-verification,
//! never a wrong answer, and memory stays within `2 × capacity` entries.
//!
//! SHA-256 costs well under a microsecond for a token, far below an Ed25519 verification, and its
//! output is a fixed 32-byte key; the map's own hasher is the std randomised SipHash.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

type Key = [u8; 32];

/// Thread-safe: share it between door workers behind an `Arc`.
pub struct VerifyCache<V: Clone> {
    inner: Mutex<Tiers<V>>,
    capacity: usize,
    lasting: Option<fn(&V) -> bool>,
}

struct Tiers<V> {
    lasting: HashMap<Key, V>,
    recent: HashMap<Key, V>,
    order: VecDeque<Key>,
}

impl<V: Clone> std::fmt::Debug for VerifyCache<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (l, r) = self.counts();
        write!(
            f,
            "VerifyCache {{ capacity: {}, lasting: {l}, recent: {r} }}",
            self.capacity
        )
    }
}

impl<V: Clone> VerifyCache<V> {
    /// Each tier holds at most `capacity` results; a result lasts once its token is seen twice.
    pub fn new(capacity: usize) -> Self {
        VerifyCache {
            inner: Mutex::new(Tiers::new()),
            capacity,
            lasting: None,
        }
    }

    /// As `new`, but a result lasts exactly when `lasting(&result)` holds (while there is room).
    pub fn with_lasting(capacity: usize, lasting: fn(&V) -> bool) -> Self {
        VerifyCache {
            inner: Mutex::new(Tiers::new()),
            capacity,
            lasting: Some(lasting),
        }
    }

    /// The remembered result for `token`, or `f()` (run without holding the lock, so concurrent
    /// verifications do not serialise; two first presentations may both run `f`, harmlessly).
    pub fn get_or_insert_with(&self, token: &str, f: impl FnOnce() -> V) -> V {
        let key: Key = Sha256::digest(token.as_bytes()).into();
        if let Some(v) = self.lookup(&key) {
            return v;
        }
        let v = f();
        self.insert(key, v.clone());
        v
    }

    /// (lasting, recent) entry counts.
    pub fn counts(&self) -> (usize, usize) {
        let t = self.lock();
        (t.lasting.len(), t.recent.len())
    }

    pub fn is_empty(&self) -> bool {
        self.counts() == (0, 0)
    }

    fn lookup(&self, key: &Key) -> Option<V> {
        let mut t = self.lock();
        if let Some(v) = t.lasting.get(key) {
            return Some(v.clone());
        }
        let v = t.recent.get(key)?.clone();
        if self.lasting.is_none() && t.lasting.len() < self.capacity {
            t.recent.remove(key);
            t.order.retain(|k| k != key);
            t.lasting.insert(*key, v.clone());
        }
        Some(v)
    }

    fn insert(&self, key: Key, v: V) {
        if self.capacity == 0 {
            return;
        }
        let mut t = self.lock();
        if t.lasting.contains_key(&key) || t.recent.contains_key(&key) {
            return;
        }
        if self.lasting.is_some_and(|p| p(&v)) && t.lasting.len() < self.capacity {
            t.lasting.insert(key, v);
            return;
        }
        while t.recent.len() >= self.capacity {
            let Some(old) = t.order.pop_front() else {
                break;
            };
            t.recent.remove(&old);
        }
        t.recent.insert(key, v);
        t.order.push_back(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tiers<V>> {
        // A panic elsewhere cannot leave the maps inconsistent in a way that matters: every entry
        // is a complete, correct result.
        crate::sync::lock(&self.inner)
    }
}

impl<V> Tiers<V> {
    fn new() -> Self {
        Tiers {
            lasting: HashMap::new(),
            recent: HashMap::new(),
            order: VecDeque::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn counted(cache: &VerifyCache<bool>, token: &str, valid: bool, calls: &Cell<u32>) -> bool {
        cache.get_or_insert_with(token, || {
            calls.set(calls.get() + 1);
            valid
        })
    }

    #[test]
    fn each_token_is_verified_once() {
        let c = VerifyCache::with_lasting(4, |v: &bool| *v);
        let calls = Cell::new(0);
        for _ in 0..5 {
            assert!(counted(&c, "mft1.good", true, &calls));
            assert!(!counted(&c, "mft1.bad", false, &calls));
        }
        assert_eq!(calls.get(), 2);
        assert_eq!(c.counts(), (1, 1));
    }

    #[test]
    fn a_flood_of_forgeries_is_bounded_and_keeps_lasting_results() {
        let c = VerifyCache::with_lasting(8, |v: &bool| *v);
        let calls = Cell::new(0);
        counted(&c, "good", true, &calls);
        for i in 0..10_000 {
            counted(&c, &format!("forged-{i}"), false, &calls);
        }
        assert_eq!(c.counts(), (1, 8));
        let before = calls.get();
        assert!(counted(&c, "good", true, &calls));
        assert_eq!(calls.get(), before, "the genuine token was not re-verified");
        // The newest forgeries are still remembered, the oldest were evicted.
        counted(&c, "forged-9999", false, &calls);
        assert_eq!(calls.get(), before);
        counted(&c, "forged-0", false, &calls);
        assert_eq!(calls.get(), before + 1);
    }

    #[test]
    fn lasting_tier_is_bounded_too() {
        let c = VerifyCache::with_lasting(2, |v: &bool| *v);
        let calls = Cell::new(0);
        for i in 0..10 {
            counted(&c, &format!("good-{i}"), true, &calls);
        }
        assert_eq!(c.counts(), (2, 2));
    }

    #[test]
    fn without_a_predicate_a_reused_token_is_promoted() {
        let c: VerifyCache<bool> = VerifyCache::new(4);
        let calls = Cell::new(0);
        counted(&c, "good", true, &calls);
        counted(&c, "good", true, &calls); // second presentation: promoted
        for i in 0..100 {
            counted(&c, &format!("forged-{i}"), false, &calls);
        }
        assert_eq!(c.counts(), (1, 4));
        let before = calls.get();
        counted(&c, "good", true, &calls);
        assert_eq!(calls.get(), before);
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let c: VerifyCache<bool> = VerifyCache::new(0);
        let calls = Cell::new(0);
        counted(&c, "t", true, &calls);
        counted(&c, "t", true, &calls);
        assert_eq!(calls.get(), 2);
        assert!(c.is_empty());
    }

    #[test]
    fn shared_between_threads() {
        let c = std::sync::Arc::new(VerifyCache::with_lasting(16, |v: &u32| *v > 0));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let c = c.clone();
                std::thread::spawn(move || c.get_or_insert_with(&format!("t{}", i % 2), || 1 + i % 2))
            })
            .collect();
        for h in handles {
            assert!(h.join().unwrap() >= 1);
        }
        assert_eq!(c.counts().0, 2);
    }
}
