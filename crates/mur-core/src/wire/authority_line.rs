//! The authority channel's lines [ours] (docs/reference/formation.md#the-authority-channel): the
//! budget channel's six line kinds (`wire::budget_line`, byte for byte), the delegation's two and
//! the grant key's, on the same socket, in lockstep.
//!
//! ```text
//! member → launcher   delegate <id> <parent> <task> <callee> <deadline ms|-> <budget|->
//!                     reserve <id> <tokens> <grant>
//!                     grant-key <id>
//! launcher → member   delegated <id> <grant>        undelegated <id> <why>
//!                     grant-key <id> <B64 of the member's 32-byte grant key>
//! ```
//!
//! `parent` is the grant the calling task runs under (`grt_…`), or `root-<origin>` for a task that
//! came with none; `reserve` with a fourth field is a model turn's reservation under the grant
//! its task runs under (answered as a budget `reserve` is); `why` is one word (`grant::Refusal::word`). A `delegate` line is at most
//! [`MAX_ASK_LINE`] bytes, a `delegated` one at most [`MAX_REPLY_LINE`].

use super::budget_line;
use crate::grant::{MAX_GRANT_BYTES, Origin, Refusal};
use crate::ids::{self, IdKind};
use crate::token::GrantKey;

/// The longest line a member sends, newline included.
pub const MAX_ASK_LINE: usize = 256;

/// The longest line the launcher sends, newline included: a `delegated` line with its grant.
pub const MAX_REPLY_LINE: usize = MAX_GRANT_BYTES + 64;

/// The grant a delegation narrows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parent {
    /// A grant the launcher made, by id.
    Grant(String),
    /// A root for a task that came with no grant, started by `origin`.
    Root(Origin),
}

/// A member's request for its call's grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegate {
    pub id: u64,
    pub parent: Parent,
    pub task: String,
    pub callee: String,
    pub deadline_ms: Option<u64>,
    pub budget: Option<u64>,
}

/// What a member says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ask {
    Budget(budget_line::Ask),
    Delegate(Delegate),
    /// A reservation counted against the grant `grant` and every grant above it.
    ReserveUnder {
        id: u64,
        tokens: u64,
        grant: String,
    },
    /// The asking member's own grant key, which its door opens its callers' grants with.
    GrantKey {
        id: u64,
    },
}

/// What the launcher answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Budget(budget_line::Reply),
    Delegated {
        id: u64,
        grant: String,
    },
    Undelegated {
        id: u64,
        why: Refusal,
    },
    /// The asking member's grant key (a secret: its line is written and read, never shown).
    GrantKey {
        id: u64,
        key: GrantKey,
    },
}

fn optional(n: Option<u64>) -> String {
    n.map_or_else(|| "-".to_string(), |n| n.to_string())
}

fn read_optional(s: &str) -> Option<Option<u64>> {
    if s == "-" {
        return Some(None);
    }
    unsigned(s).map(Some)
}

/// Decimal digits only: no sign, no spaces, at most 20 digits.
fn unsigned(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl Ask {
    pub fn line(&self) -> String {
        match self {
            Ask::Budget(b) => b.line(),
            Ask::ReserveUnder { id, tokens, grant } => format!("reserve {id} {tokens} {grant}\n"),
            Ask::GrantKey { id } => format!("grant-key {id}\n"),
            Ask::Delegate(d) => {
                let parent = match &d.parent {
                    Parent::Grant(id) => id.clone(),
                    Parent::Root(origin) => format!("root-{}", origin.as_string()),
                };
                format!(
                    "delegate {} {parent} {} {} {} {}\n",
                    d.id,
                    d.task,
                    d.callee,
                    optional(d.deadline_ms),
                    optional(d.budget)
                )
            }
        }
    }

    /// Reads one line (its newline removed).
    pub fn parse(line: &str) -> Option<Ask> {
        if line.len() >= MAX_ASK_LINE {
            return None;
        }
        if let Some(id) = line.strip_prefix("grant-key ") {
            return Some(Ask::GrantKey { id: unsigned(id)? });
        }
        if let Some(rest) = line.strip_prefix("reserve ")
            && let [id, tokens, grant] = rest.split(' ').collect::<Vec<_>>().as_slice()
        {
            if !ids::is(IdKind::Grant, grant) {
                return None;
            }
            return Some(Ask::ReserveUnder {
                id: unsigned(id)?,
                tokens: unsigned(tokens)?,
                grant: grant.to_string(),
            });
        }
        let Some(rest) = line.strip_prefix("delegate ") else {
            return budget_line::Ask::parse(line).map(Ask::Budget);
        };
        if line.len() >= MAX_ASK_LINE {
            return None;
        }
        let f: Vec<&str> = rest.split(' ').collect();
        let [id, parent, task, callee, deadline, budget] = f.as_slice() else {
            return None;
        };
        let parent = match parent.strip_prefix("root-") {
            Some(origin) => Parent::Root(Origin::parse(origin)?),
            None if ids::is(IdKind::Grant, parent) => Parent::Grant(parent.to_string()),
            None => return None,
        };
        if !ids::is(IdKind::Task, task) || !crate::names::is_member(callee) {
            return None;
        }
        Some(Ask::Delegate(Delegate {
            id: unsigned(id)?,
            parent,
            task: task.to_string(),
            callee: callee.to_string(),
            deadline_ms: read_optional(deadline)?,
            budget: read_optional(budget)?,
        }))
    }
}

impl Reply {
    pub fn line(&self) -> String {
        match self {
            Reply::Budget(b) => b.line(),
            Reply::Delegated { id, grant } => format!("delegated {id} {grant}\n"),
            Reply::Undelegated { id, why } => format!("undelegated {id} {}\n", why.word()),
            Reply::GrantKey { id, key } => format!("grant-key {id} {}\n", key.to_wire().reveal()),
        }
    }

    /// Reads one line (its newline removed).
    pub fn parse(line: &str) -> Option<Reply> {
        if let Some(rest) = line.strip_prefix("delegated ") {
            let (id, grant) = rest.split_once(' ')?;
            let ok = line.len() < MAX_REPLY_LINE
                && grant.starts_with("mgr2.")
                && grant.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !ok {
                return None;
            }
            return Some(Reply::Delegated {
                id: unsigned(id)?,
                grant: grant.to_string(),
            });
        }
        if let Some(rest) = line.strip_prefix("grant-key ") {
            let (id, key) = rest.split_once(' ')?;
            return Some(Reply::GrantKey {
                id: unsigned(id)?,
                key: GrantKey::from_wire(key)?,
            });
        }
        if let Some(rest) = line.strip_prefix("undelegated ") {
            let (id, why) = rest.split_once(' ')?;
            return Some(Reply::Undelegated {
                id: unsigned(id)?,
                why: Refusal::from_word(why)?,
            });
        }
        budget_line::Reply::parse(line).map(Reply::Budget)
    }

    /// The request this answers.
    pub fn id(&self) -> u64 {
        match self {
            Reply::Budget(b) => b.id(),
            Reply::Delegated { id, .. } | Reply::Undelegated { id, .. } | Reply::GrantKey { id, .. } => *id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TSK: &str = "tsk_0199c4e2f1b7712a9d3e4f5061728394";
    const GRT: &str = "grt_0199c4e2f1b7712a9d3e4f5061728394";

    #[test]
    fn lines_round_trip_and_budget_lines_are_unchanged() {
        let asks = [
            Ask::Budget(budget_line::Ask::Reserve { id: 1, tokens: 1064 }),
            Ask::Delegate(Delegate {
                id: 7,
                parent: Parent::Grant(GRT.into()),
                task: TSK.into(),
                callee: "worker".into(),
                deadline_ms: Some(1_764_000_000_000),
                budget: None,
            }),
            Ask::ReserveUnder {
                id: 3,
                tokens: u64::MAX,
                grant: GRT.into(),
            },
            Ask::GrantKey { id: 9 },
            Ask::Delegate(Delegate {
                id: u64::MAX,
                parent: Parent::Root(Origin::Client("c".repeat(crate::grant::MAX_CREDENTIAL))),
                task: TSK.into(),
                callee: "m".repeat(32),
                deadline_ms: Some(u64::MAX),
                budget: Some(u64::MAX),
            }),
        ];
        for ask in asks {
            let line = ask.line();
            assert!(line.len() <= MAX_ASK_LINE, "{line}");
            assert_eq!(Ask::parse(line.trim_end_matches('\n')), Some(ask));
        }
        assert_eq!(
            Ask::Budget(budget_line::Ask::Settle { id: 3, used: 9 }).line(),
            "settle 3 9\n"
        );
        let grant = format!("mgr2.{}.{}", "A".repeat(3000), "B".repeat(43));
        for reply in [
            Reply::Budget(budget_line::Reply::Refused { id: 2, left: -300 }),
            Reply::Delegated { id: 4, grant },
            Reply::Undelegated {
                id: 5,
                why: Refusal::NotTheHolder,
            },
            Reply::GrantKey {
                id: 6,
                key: GrantKey::generate().expect("drawn"),
            },
        ] {
            let line = reply.line();
            assert!(line.len() <= MAX_REPLY_LINE);
            assert_eq!(Reply::parse(line.trim_end_matches('\n')), Some(reply));
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for line in [
            "delegate",
            &format!("delegate 1 {GRT} {TSK} worker - "),
            &format!("delegate 1 {GRT} {TSK} worker -"),
            &format!("delegate 1 mcl_0199c4e2f1b7712a9d3e4f5061728394 {TSK} worker - -"),
            &format!("delegate 1 root-everyone {TSK} worker - -"),
            &format!("delegate 1 {GRT} tsk_x worker - -"),
            &format!("delegate 1 {GRT} {TSK} Worker - -"),
            &format!("delegate 1 {GRT} {TSK} worker -1 -"),
            &format!("delegate 1 {GRT} {TSK} worker - - -"),
            "reserve 1 2 tsk_0199c4e2f1b7712a9d3e4f5061728394",
            &format!("reserve 1 -2 {GRT}"),
            &format!("reserve 1 2 {GRT} x"),
            "grant-key",
            "grant-key x",
            "grant-key 1 2",
        ] {
            assert_eq!(Ask::parse(line), None, "{line:?}");
        }
        for line in [
            "delegated 1",
            "delegated 1 mft1.a.b",
            "delegated 1 mgr2.a b.c",
            "delegated 1 mgr1.AAAA.BBBB",
            "grant-key 1",
            "grant-key 1 AAAA",
            "grant-key x AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            &format!("delegated 1 mgr2.{}", "A".repeat(MAX_REPLY_LINE)),
            "undelegated 1 because",
            "undelegated x expired",
        ] {
            assert_eq!(Reply::parse(line), None, "{line:?}");
        }
    }
}
