//! Streams that resume (docs/a2a.md, "Resuming a stream"): the `Last-Event-ID` a reconnecting
//! client sends, and the bounded log of one task's stream events a door replays from.
//!
//! Every event of a task's stream carries an id: the task's own sequence number, `1`, `2`, …,
//! in the order the events were first sent to anyone (a stream opening with the task as it
//! stands carries the number of the last event that task object covers; `0` before any). A
//! client that reconnects with `Last-Event-ID: N` is owed every event after `N`. Pure: the door
//! holds the log beside the task and renders the events; this decides what a resume gets.

use std::collections::VecDeque;

/// Events a task's log keeps, newest kept first.
pub const LOG_EVENTS: usize = 64;
/// Bytes of rendered events a task's log keeps; an event larger than this is sent, not kept.
pub const LOG_BYTES: usize = 64 * 1024;
/// The longest `Last-Event-ID` read: a `u64` in decimal has at most 20 digits.
pub const MAX_EVENT_ID_BYTES: usize = 20;

/// A `Last-Event-ID` this door did not send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadEventId {
    /// Longer than [`MAX_EVENT_ID_BYTES`].
    TooLong,
    /// Not a decimal sequence number (digits only, no sign, no space).
    NotANumber,
}

impl BadEventId {
    /// What the refusal says of it.
    pub fn why(self) -> &'static str {
        match self {
            BadEventId::TooLong => "must be an event id this door sent: at most 20 digits",
            BadEventId::NotANumber => "must be an event id this door sent: a decimal sequence number",
        }
    }
}

/// Reads a `Last-Event-ID` header value. Empty is no id at all (the event-stream
/// specification's "last event ID" starts empty), so the stream starts afresh.
pub fn parse_last_event_id(value: &[u8]) -> Result<Option<u64>, BadEventId> {
    if value.is_empty() {
        return Ok(None);
    }
    if value.len() > MAX_EVENT_ID_BYTES {
        return Err(BadEventId::TooLong);
    }
    if !value.iter().all(u8::is_ascii_digit) {
        return Err(BadEventId::NotANumber);
    }
    // Digits only, at most 20 of them: the one failure left is a value past u64::MAX.
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Some)
        .ok_or(BadEventId::NotANumber)
}

/// One logged event: its sequence number, its size as charged, and what the door keeps of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logged<T> {
    pub seq: u64,
    pub bytes: usize,
    pub item: T,
}

/// What a stream resumed after event `N` gets.
#[derive(Debug, PartialEq, Eq)]
pub enum Since<'a, T> {
    /// Every event after `N`, in order (none when `N` is the last).
    Events(Vec<&'a Logged<T>>),
    /// Events after `N` were sent but are no longer kept: the task as it stands instead.
    Gap,
    /// `N` is past the last event: no event of this task's stream.
    Ahead,
}

/// A task's stream events, numbered from 1, the newest [`LOG_EVENTS`] within [`LOG_BYTES`] kept.
#[derive(Debug, Clone)]
pub struct EventLog<T> {
    events: VecDeque<Logged<T>>,
    last: u64,
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
}

impl<T> Default for EventLog<T> {
    fn default() -> Self {
        EventLog::new(LOG_EVENTS, LOG_BYTES)
    }
}

impl<T> EventLog<T> {
    pub fn new(max_events: usize, max_bytes: usize) -> EventLog<T> {
        EventLog {
            events: VecDeque::new(),
            last: 0,
            bytes: 0,
            max_events,
            max_bytes,
        }
    }

    /// Logs the next event and returns its sequence number; the oldest are let go past the
    /// bounds (the new one too, when it alone is over the bytes).
    pub fn push(&mut self, item: T, bytes: usize) -> u64 {
        self.last = self.last.saturating_add(1);
        self.events.push_back(Logged {
            seq: self.last,
            bytes,
            item,
        });
        self.bytes = self.bytes.saturating_add(bytes);
        while self.events.len() > self.max_events || self.bytes > self.max_bytes {
            match self.events.pop_front() {
                Some(e) => self.bytes -= e.bytes,
                None => break,
            }
        }
        self.last
    }

    /// The sequence number of the newest event, `0` before any.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Bytes the kept events hold.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// What a stream that saw event `after` is owed.
    pub fn since(&self, after: u64) -> Since<'_, T> {
        if after > self.last {
            return Since::Ahead;
        }
        let first_kept = self.events.front().map_or(self.last.saturating_add(1), |e| e.seq);
        if after.saturating_add(1) < first_kept {
            return Since::Gap;
        }
        Since::Events(self.events.iter().filter(|e| e.seq > after).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Row<'a> = (&'a [u8], Result<Option<u64>, BadEventId>);

    #[test]
    fn last_event_ids() {
        let table: &[Row<'_>] = &[
            (b"", Ok(None)),
            (b"0", Ok(Some(0))),
            (b"17", Ok(Some(17))),
            (b"007", Ok(Some(7))),
            (b"18446744073709551615", Ok(Some(u64::MAX))),
            (b"18446744073709551616", Err(BadEventId::NotANumber)),
            (b"999999999999999999999", Err(BadEventId::TooLong)),
            (b"-1", Err(BadEventId::NotANumber)),
            (b"+1", Err(BadEventId::NotANumber)),
            (b" 1", Err(BadEventId::NotANumber)),
            (b"1.0", Err(BadEventId::NotANumber)),
            (b"tsk_1:3", Err(BadEventId::NotANumber)),
            ("\u{663}".as_bytes(), Err(BadEventId::NotANumber)),
        ];
        for (value, want) in table {
            assert_eq!(
                parse_last_event_id(value),
                *want,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    fn seqs(s: Since<'_, &str>) -> Result<Vec<u64>, &'static str> {
        match s {
            Since::Events(e) => Ok(e.iter().map(|l| l.seq).collect()),
            Since::Gap => Err("gap"),
            Since::Ahead => Err("ahead"),
        }
    }

    #[test]
    fn a_resume_gets_what_it_missed_or_a_gap() {
        let mut log = EventLog::new(3, 100);
        assert_eq!(seqs(log.since(0)), Ok(vec![]), "nothing sent, nothing missed");
        assert_eq!(seqs(log.since(1)), Err("ahead"));
        for (i, item) in ["a", "b", "c", "d"].into_iter().enumerate() {
            assert_eq!(log.push(item, 10), i as u64 + 1);
        }
        // Kept: 2, 3, 4 (the count bound let 1 go).
        let table: &[(u64, Result<Vec<u64>, &str>)] = &[
            (0, Err("gap")),
            (1, Ok(vec![2, 3, 4])),
            (2, Ok(vec![3, 4])),
            (4, Ok(vec![])),
            (5, Err("ahead")),
            (u64::MAX, Err("ahead")),
        ];
        for (after, want) in table {
            assert_eq!(seqs(log.since(*after)), *want, "after {after}");
        }
        assert_eq!(log.bytes(), 30);
        // The bytes bound: a large event lets the older ones go; one over the bound alone is not
        // kept at all, so everything before it is a gap.
        log.push("e", 80);
        assert_eq!(seqs(log.since(1)), Err("gap"));
        assert_eq!(seqs(log.since(2)), Ok(vec![3, 4, 5]));
        log.push("f", 101);
        assert_eq!((log.last(), log.bytes()), (6, 0));
        assert_eq!(seqs(log.since(5)), Err("gap"));
        assert_eq!(seqs(log.since(6)), Ok(vec![]));
    }
}
