//! The memory budget of one task's store ([`Limiter`]): its linear memories and its tables'
//! elements share one bound, across every instance, and the counts of instances, tables and
//! memories are capped. A refused growth is remembered, so the run's outcome can name the limit.

use wasmtime::ResourceLimiter;

/// Bytes wasmtime spends on one table element (a pointer, per [`ResourceLimiter::table_growing`]).
const TABLE_ELEMENT_BYTES: usize = std::mem::size_of::<usize>();

/// Core instances, tables and memories one store may create. A component needs a handful of
/// each (its modules, the adapter's shims); these bound what the per-object overhead can add.
const MAX_INSTANCES: usize = 100;
const MAX_TABLES: usize = 100;
const MAX_MEMORIES: usize = 100;

/// One budget for a store: its linear memories plus its tables' elements, across every instance.
/// Without tables in it, a component could hold 100 tables of millions of elements outside the
/// memory limit.
pub(super) struct Limiter {
    max_memory: usize,
    /// Linear memory bytes of every memory.
    memory: usize,
    /// Table bytes of every table.
    tables: usize,
    pub(super) refused: bool,
}

impl Limiter {
    pub(super) fn new(max_memory: usize) -> Limiter {
        Limiter {
            max_memory,
            memory: 0,
            tables: 0,
            refused: false,
        }
    }

    /// `total` with one object going from `current` to `desired` bytes, if that fits the budget.
    fn fits(&mut self, total: usize, current: usize, desired: usize, other: usize) -> Option<usize> {
        let next = (total - current.min(total)).saturating_add(desired);
        if next.saturating_add(other) > self.max_memory {
            self.refused = true;
            return None;
        }
        Some(next)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(match self.fits(self.memory, current, desired, self.tables) {
            Some(memory) => {
                self.memory = memory;
                true
            }
            None => false,
        })
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        let (current, desired) = (
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        );
        Ok(match self.fits(self.tables, current, desired, self.memory) {
            Some(tables) => {
                self.tables = tables;
                true
            }
            None => false,
        })
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limiter_counts_every_memory_of_the_store() {
        let mut l = Limiter::new(10);
        assert!(l.memory_growing(0, 6, None).unwrap_or(false));
        assert!(
            !l.memory_growing(0, 6, None).unwrap_or(true),
            "a second memory shares the budget"
        );
        assert!(l.refused);
        assert!(l.memory_growing(6, 10, None).unwrap_or(false));
    }

    /// A table growth from `.0` to `.1` elements, and whether it is allowed.
    type Growth = (usize, usize, bool);

    /// Tables share the memory budget, at a pointer per element.
    #[test]
    fn limiter_counts_table_elements_with_the_memory() {
        let e = TABLE_ELEMENT_BYTES;
        // (memory grown first, table growths (current, desired), which are allowed)
        let table: &[(usize, &[Growth])] = &[
            (0, &[(0, 100, true), (0, 1, false)]),
            (0, &[(0, 40, true), (0, 40, true), (0, 20, true), (0, 1, false)]),
            (50 * e, &[(0, 50, true), (0, 1, false)]),
            (50 * e, &[(0, 51, false), (0, 50, true)]),
            // Growing one table from 40 to 100 elements counts 60 more, not 100.
            (0, &[(0, 40, true), (40, 100, true), (100, 101, false)]),
            // A minimum too large for the host is refused, not wrapped.
            (0, &[(0, usize::MAX, false)]),
        ];
        for (memory, growths) in table {
            let mut l = Limiter::new(100 * e);
            assert!(l.memory_growing(0, *memory, None).unwrap_or(false));
            for (i, (current, desired, ok)) in growths.iter().enumerate() {
                assert_eq!(
                    l.table_growing(*current, *desired, None).unwrap_or(!ok),
                    *ok,
                    "memory {memory}, growth {i}"
                );
            }
            assert!(l.refused);
            // Memory may fill what the tables left, not a byte more.
            let room = 100 * e - l.tables;
            assert!(!l.memory_growing(*memory, room + 1, None).unwrap_or(true));
            assert!(l.memory_growing(*memory, room, None).unwrap_or(false));
        }
    }
}
