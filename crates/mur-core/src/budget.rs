//! Token budgets (docs/reference/formation.md#budgets): a formation's total
//! (`mur run --roster --max-tokens N`, kept by the launcher) and a session's own
//! (`inference.max_session_tokens`, kept by the member).
//!
//! Both are the same [`Ledger`]: before a provider request its runtime reserves the most the
//! request can cost ([`reservation`]); after the reply it settles with the provider's reported
//! usage, which returns the rest. A reservation is granted only while what is spent, what is held
//! and what is asked stay within the limit, so a budget is overrun only by what a turn costs
//! beyond its reservation (an input estimate that was too low, or a provider reporting more than
//! the reservation): that is charged anyway, the budget may go below zero once, and from then on
//! nothing more is granted.

use std::collections::BTreeMap;

/// The largest budget accepted, in tokens: far beyond any real spend, small enough that every sum
/// here stays exact in an `i64`.
pub const MAX_BUDGET_TOKENS: u64 = 1_000_000_000_000;

/// The input estimate: one token per this many bytes of the request body. Tokenizers average
/// about four bytes of English per token; three leaves room for code, JSON and the request's own
/// syntax (which the body holds and the provider does not count).
pub const BODY_BYTES_PER_TOKEN: u64 = 3;

/// The input estimate is bounded from above by this (no model reads more tokens in one request):
/// a body of hundreds of megabytes never asks for more than any budget could grant.
pub const MAX_INPUT_ESTIMATE: u64 = 2_000_000;

/// What a reservation asks for: the request's input estimate (its body's bytes over
/// [`BODY_BYTES_PER_TOKEN`], at most [`MAX_INPUT_ESTIMATE`]) plus the most the reply may add
/// (`inference.max_tokens`).
pub fn reservation(body_bytes: usize, max_tokens: u32) -> u64 {
    let bytes = u64::try_from(body_bytes).unwrap_or(u64::MAX);
    bytes.div_ceil(BODY_BYTES_PER_TOKEN).min(MAX_INPUT_ESTIMATE) + u64::from(max_tokens)
}

/// What settling a turn charges: the provider's reported input plus output, or, when it reported
/// neither, the whole reservation (the cost is unknown, so the most it could have been).
pub fn charge(reserved: u64, input: Option<u64>, output: Option<u64>) -> u64 {
    match (input, output) {
        (None, None) => reserved,
        (i, o) => i.unwrap_or(0).saturating_add(o.unwrap_or(0)).min(MAX_BUDGET_TOKENS),
    }
}

/// A budget as written on the command line (`--max-tokens`): a whole number from 1 to
/// [`MAX_BUDGET_TOKENS`]. `Err` says what is wrong, quoting the value.
pub fn parse_limit(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let why = if t.starts_with('-') && t[1..].bytes().all(|b| b.is_ascii_digit()) && t.len() > 1 {
            "is negative"
        } else {
            "is not a whole number"
        };
        return Err(format!(
            "'{}' {why}: a budget is a number of tokens from 1 to {MAX_BUDGET_TOKENS}",
            crate::diag::shown(text)
        ));
    }
    match digits.parse::<u64>() {
        Ok(0) => Err(format!(
            "'{}' is zero: a budget of no tokens would refuse every model turn; write `unlimited` for no budget",
            crate::diag::shown(text)
        )),
        Ok(n) if n <= MAX_BUDGET_TOKENS => Ok(n),
        _ => Err(format!(
            "'{}' is too large: the most is {MAX_BUDGET_TOKENS} tokens",
            crate::diag::shown(text)
        )),
    }
}

/// One holder of reservations: a member of the formation (the launcher's ledger) or the session
/// itself (a member's own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Account {
    /// Tokens charged by settled turns.
    pub spent: u64,
    /// Tokens reserved and not settled yet.
    pub held: u64,
    /// Turns settled.
    pub turns: u64,
}

/// How a reservation went. `left` is the budget after it: the limit less what is spent and held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Granted { left: i64 },
    Refused { left: i64 },
}

/// A request the ledger cannot take: the protocol was not followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerError {
    /// A reservation under an id the holder already holds one under.
    DuplicateHold,
    /// A settlement of an id the holder holds nothing under.
    UnknownHold,
    /// An account outside the ledger.
    UnknownAccount,
}

/// A budget and who holds what of it.
#[derive(Debug, Clone)]
pub struct Ledger {
    limit: u64,
    spent: u64,
    held: u64,
    holds: BTreeMap<(usize, u64), u64>,
    accounts: Vec<Account>,
    /// A settlement took the spend to the limit or past it: nothing is granted from then on.
    spent_out: bool,
}

impl Ledger {
    /// A budget of `limit` tokens shared by `accounts` holders.
    pub fn new(limit: u64, accounts: usize) -> Ledger {
        Ledger {
            limit: limit.min(MAX_BUDGET_TOKENS),
            spent: 0,
            held: 0,
            holds: BTreeMap::new(),
            accounts: vec![Account::default(); accounts],
            spent_out: false,
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Tokens charged so far, by every holder.
    pub fn spent(&self) -> u64 {
        self.spent
    }

    /// Tokens reserved and not settled.
    pub fn held(&self) -> u64 {
        self.held
    }

    /// The limit less what is spent and held: below zero once a turn cost more than it reserved.
    pub fn left(&self) -> i64 {
        self.limit as i64 - self.spent as i64 - self.held as i64
    }

    /// Whether nothing more will be granted.
    pub fn spent_out(&self) -> bool {
        self.spent_out
    }

    pub fn account(&self, holder: usize) -> Option<Account> {
        self.accounts.get(holder).copied()
    }

    /// Reserves `tokens` for `holder` under its `id`: granted only while spent + held + `tokens`
    /// stays within the limit and no settlement has spent the budget out.
    pub fn reserve(&mut self, holder: usize, id: u64, tokens: u64) -> Result<Grant, LedgerError> {
        if holder >= self.accounts.len() {
            return Err(LedgerError::UnknownAccount);
        }
        if self.holds.contains_key(&(holder, id)) {
            return Err(LedgerError::DuplicateHold);
        }
        let tokens = tokens.min(MAX_BUDGET_TOKENS);
        let fits = self.spent + self.held + tokens <= self.limit;
        if self.spent_out || !fits {
            return Ok(Grant::Refused { left: self.left() });
        }
        self.holds.insert((holder, id), tokens);
        self.held += tokens;
        self.accounts[holder].held += tokens;
        Ok(Grant::Granted { left: self.left() })
    }

    /// Settles `holder`'s reservation `id` with what the turn cost: the hold is returned and
    /// `used` charged, also when it exceeds the hold. Returns what is left.
    pub fn settle(&mut self, holder: usize, id: u64, used: u64) -> Result<i64, LedgerError> {
        let held = self.holds.remove(&(holder, id)).ok_or(LedgerError::UnknownHold)?;
        let used = used.min(MAX_BUDGET_TOKENS);
        let account = &mut self.accounts[holder];
        account.held -= held;
        account.spent += used;
        account.turns += 1;
        self.held -= held;
        self.spent = (self.spent + used).min(2 * MAX_BUDGET_TOKENS);
        if self.spent >= self.limit {
            self.spent_out = true;
        }
        Ok(self.left())
    }

    /// Returns `holder`'s reservation `id` uncharged: its request was never sent. No turn is
    /// counted. Returns what is left.
    pub fn give_back(&mut self, holder: usize, id: u64) -> Result<i64, LedgerError> {
        let held = self.holds.remove(&(holder, id)).ok_or(LedgerError::UnknownHold)?;
        self.accounts[holder].held -= held;
        self.held -= held;
        Ok(self.left())
    }

    /// Returns every reservation `holder` still holds (it ended, or its channel broke): nothing is
    /// charged for them. Returns how many tokens were released.
    pub fn release(&mut self, holder: usize) -> u64 {
        let ids: Vec<(usize, u64)> = self
            .holds
            .range((holder, 0)..=(holder, u64::MAX))
            .map(|(k, _)| *k)
            .collect();
        let mut released = 0;
        for key in ids {
            if let Some(n) = self.holds.remove(&key) {
                released += n;
            }
        }
        if let Some(a) = self.accounts.get_mut(holder) {
            a.held -= released;
        }
        self.held -= released;
        released
    }
}

/// The token budgets of grants (docs/reference/formation.md#grants): each grant's cap and what
/// its subtree spent and holds. A reservation under a grant is made only while it fits every
/// capped grant above it, and is counted against each of them; so no subtree spends more than its
/// grant (within one turn's overrun, as the formation's budget).
#[derive(Debug, Default)]
pub struct GrantTree {
    nodes: std::collections::HashMap<String, GrantNode>,
}

#[derive(Debug, Clone)]
struct GrantNode {
    parent: Option<String>,
    cap: Option<u64>,
    spent: u64,
    held: u64,
}

impl GrantTree {
    /// A grant under `parent` (which may be unknown: a root the tree does not keep), capped at
    /// `cap` tokens when it has a budget.
    pub fn add(&mut self, id: &str, parent: Option<&str>, cap: Option<u64>) {
        self.nodes.insert(
            id.to_string(),
            GrantNode {
                parent: parent.map(str::to_string),
                cap,
                spent: 0,
                held: 0,
            },
        );
    }

    /// Forgets a grant (its subtree's counts stay with the grants above it).
    pub fn forget(&mut self, id: &str) {
        self.nodes.remove(id);
    }

    /// `id` and the grants above it that the tree knows, nearest first; bounded by the chain's
    /// length, so a loop of ids cannot hang it.
    fn ancestry(&self, id: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut at = Some(id.to_string());
        while let Some(id) = at {
            let Some(node) = self.nodes.get(&id) else { break };
            if out.len() > crate::grant::MAX_HOPS + 1 {
                break;
            }
            at = node.parent.clone();
            out.push(id);
        }
        out
    }

    /// What the tightest capped grant from `id` up has left; `None` when none is capped.
    pub fn left(&self, id: &str) -> Option<u64> {
        self.ancestry(id)
            .iter()
            .filter_map(|a| {
                let n = self.nodes.get(a)?;
                n.cap.map(|cap| cap.saturating_sub(n.spent.saturating_add(n.held)))
            })
            .min()
    }

    /// Holds `tokens` under `id` and every grant above it, when they fit every cap; else what is
    /// left of the tightest.
    pub fn reserve(&mut self, id: &str, tokens: u64) -> Result<(), u64> {
        if let Some(left) = self.left(id)
            && tokens > left
        {
            return Err(left);
        }
        for a in self.ancestry(id) {
            if let Some(n) = self.nodes.get_mut(&a) {
                n.held = n.held.saturating_add(tokens);
            }
        }
        Ok(())
    }

    /// Ends a hold of `held` tokens under `id`: charged `used` (`None`: returned uncharged).
    pub fn end(&mut self, id: &str, held: u64, used: Option<u64>) {
        for a in self.ancestry(id) {
            if let Some(n) = self.nodes.get_mut(&a) {
                n.held = n.held.saturating_sub(held);
                n.spent = n.spent.saturating_add(used.unwrap_or(0));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subtree_never_spends_more_than_its_grant() {
        let mut t = GrantTree::default();
        t.add("a", Some("root"), Some(1000));
        t.add("b", Some("a"), Some(800));
        t.add("c", Some("b"), Some(800));
        t.add("d", Some("a"), Some(500));
        assert_eq!(t.left("c"), Some(800));
        assert_eq!(t.reserve("c", 600), Ok(()));
        assert_eq!(t.left("d"), Some(400), "a's remainder bounds its other child");
        assert_eq!(t.reserve("d", 401), Err(400));
        t.end("c", 600, Some(700));
        assert_eq!(
            (t.left("a"), t.left("b"), t.left("c")),
            (Some(300), Some(100), Some(100))
        );
        assert_eq!(t.reserve("c", 101), Err(100), "spend counts against every grant above");
        assert_eq!(t.reserve("d", 300), Ok(()));
        t.end("d", 300, None);
        assert_eq!(t.left("d"), Some(300), "a returned hold is uncharged");
        assert_eq!(t.left("unknown"), None);
        assert_eq!(
            t.reserve("unknown", u64::MAX),
            Ok(()),
            "a grant the tree does not keep has no cap"
        );
    }

    #[test]
    fn limits_are_whole_positive_numbers_within_the_bound() {
        let table: &[(&str, Result<u64, &str>)] = &[
            ("1", Ok(1)),
            ("4000", Ok(4000)),
            (" 25 ", Ok(25)),
            ("+7", Ok(7)),
            ("1000000000000", Ok(MAX_BUDGET_TOKENS)),
            ("0", Err("is zero")),
            ("-5", Err("is negative")),
            ("1000000000001", Err("is too large")),
            ("99999999999999999999999", Err("is too large")),
            ("1e6", Err("is not a whole number")),
            ("ten", Err("is not a whole number")),
            ("", Err("is not a whole number")),
            ("-", Err("is not a whole number")),
            ("1.5", Err("is not a whole number")),
        ];
        for (text, want) in table {
            match (parse_limit(text), want) {
                (Ok(n), Ok(w)) => assert_eq!(n, *w, "{text:?}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{text:?}: {e}"),
                (got, want) => panic!("{text:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn a_reservation_is_the_bounded_input_estimate_plus_max_tokens() {
        for (bytes, max_tokens, want) in [
            (0, 100, 100),
            (1, 100, 101),
            (3, 100, 101),
            (4, 100, 102),
            (3000, 64, 1064),
            (usize::MAX, 10, MAX_INPUT_ESTIMATE + 10),
        ] {
            assert_eq!(reservation(bytes, max_tokens), want, "{bytes} {max_tokens}");
        }
    }

    #[test]
    fn a_turn_is_charged_what_the_provider_reported_or_else_its_reservation() {
        for (reserved, input, output, want) in [
            (500, Some(100), Some(20), 120),
            (500, Some(100), None, 100),
            (500, None, Some(7), 7),
            (500, None, None, 500),
            (500, Some(900), Some(900), 1800),
            (5, Some(u64::MAX), Some(1), MAX_BUDGET_TOKENS),
        ] {
            assert_eq!(charge(reserved, input, output), want);
        }
    }

    #[test]
    fn reservations_fit_within_the_limit_and_settle_to_what_was_used() {
        let mut l = Ledger::new(1000, 2);
        assert_eq!(l.reserve(0, 1, 600), Ok(Grant::Granted { left: 400 }));
        assert_eq!(l.reserve(1, 1, 500), Ok(Grant::Refused { left: 400 }));
        assert_eq!(l.reserve(1, 1, 400), Ok(Grant::Granted { left: 0 }));
        assert_eq!(l.reserve(0, 1, 1), Err(LedgerError::DuplicateHold));
        assert_eq!(l.settle(0, 1, 150), Ok(450));
        assert_eq!(l.settle(0, 1, 150), Err(LedgerError::UnknownHold));
        assert_eq!(
            l.account(0),
            Some(Account {
                spent: 150,
                held: 0,
                turns: 1
            })
        );
        assert_eq!(
            l.account(1),
            Some(Account {
                spent: 0,
                held: 400,
                turns: 0
            })
        );
        assert_eq!((l.spent(), l.held(), l.left()), (150, 400, 450));
        assert_eq!(l.reserve(2, 1, 1), Err(LedgerError::UnknownAccount));
    }

    #[test]
    fn a_turn_that_costs_more_than_it_held_is_charged_and_spends_the_budget_out() {
        let mut l = Ledger::new(1000, 1);
        assert_eq!(l.reserve(0, 1, 100), Ok(Grant::Granted { left: 900 }));
        assert_eq!(l.settle(0, 1, 1300), Ok(-300));
        assert!(l.spent_out());
        assert_eq!(l.reserve(0, 2, 1), Ok(Grant::Refused { left: -300 }));
        // Exactly at the limit is spent out too: nothing is left to grant.
        let mut l = Ledger::new(1000, 1);
        l.reserve(0, 1, 1000).unwrap();
        assert_eq!(l.settle(0, 1, 1000), Ok(0));
        assert_eq!(l.reserve(0, 2, 0), Ok(Grant::Refused { left: 0 }));
    }

    #[test]
    fn a_hold_given_back_is_returned_once_uncharged_and_counts_no_turn() {
        let mut l = Ledger::new(1000, 2);
        l.reserve(0, 1, 300).unwrap();
        l.reserve(1, 1, 200).unwrap();
        assert_eq!(l.give_back(0, 1), Ok(800));
        assert_eq!(l.give_back(0, 1), Err(LedgerError::UnknownHold), "only once");
        assert_eq!(l.settle(0, 1, 10), Err(LedgerError::UnknownHold), "nor settled after");
        assert_eq!(l.account(0), Some(Account::default()));
        assert_eq!((l.spent(), l.held(), l.left()), (0, 200, 800));
        assert_eq!(l.give_back(1, 2), Err(LedgerError::UnknownHold), "another id");
    }

    #[test]
    fn a_holder_that_ends_releases_its_holds_and_only_its_own() {
        let mut l = Ledger::new(1000, 3);
        l.reserve(0, 1, 100).unwrap();
        l.reserve(1, 1, 200).unwrap();
        l.reserve(1, 2, 300).unwrap();
        l.reserve(2, 9, 50).unwrap();
        assert_eq!(l.release(1), 500);
        assert_eq!(l.release(1), 0);
        assert_eq!(
            l.account(1),
            Some(Account {
                spent: 0,
                held: 0,
                turns: 0
            })
        );
        assert_eq!((l.held(), l.left()), (150, 850));
        assert_eq!(l.settle(1, 2, 10), Err(LedgerError::UnknownHold));
        assert_eq!(l.settle(2, 9, 50), Ok(850));
    }
}
