//! The budget channel's lines (docs/reference/formation.md#budgets): a member asks the launcher
//! to reserve tokens before a provider request and settles after it, one line each way, in
//! lockstep.
//!
//! ```text
//! member → launcher   reserve <id> <tokens>      settle <id> <used>      return <id>
//! launcher → member   granted <id> <left>        refused <id> <left>      settled <id> <left>
//! ```
//!
//! `id` is the member's own number for the reservation; `return` gives back a reservation whose
//! request was never sent, uncharged, and is answered `settled`; `left` is the formation's budget
//! after the step (negative once a turn cost more than it reserved). Nothing else is ever said: the
//! channel can neither mint a token nor reach another member. Every line is at most
//! [`MAX_BUDGET_LINE`] bytes; a longer or malformed one ends the channel.

/// The longest line either side sends, newline included.
pub const MAX_BUDGET_LINE: usize = 64;

/// What a member says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    Reserve {
        id: u64,
        tokens: u64,
    },
    Settle {
        id: u64,
        used: u64,
    },
    /// The reservation's request was never sent: it is returned uncharged.
    Return {
        id: u64,
    },
}

/// What the launcher answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Granted { id: u64, left: i64 },
    Refused { id: u64, left: i64 },
    Settled { id: u64, left: i64 },
}

impl Ask {
    pub fn line(&self) -> String {
        match self {
            Ask::Reserve { id, tokens } => format!("reserve {id} {tokens}\n"),
            Ask::Settle { id, used } => format!("settle {id} {used}\n"),
            Ask::Return { id } => format!("return {id}\n"),
        }
    }

    /// Reads one line (its newline removed).
    pub fn parse(line: &str) -> Option<Ask> {
        if let Some(id) = line.strip_prefix("return ") {
            return (line.len() < MAX_BUDGET_LINE).then_some(Ask::Return { id: unsigned(id)? });
        }
        let (word, id, n) = three(line)?;
        let (id, n) = (unsigned(id)?, unsigned(n)?);
        match word {
            "reserve" => Some(Ask::Reserve { id, tokens: n }),
            "settle" => Some(Ask::Settle { id, used: n }),
            _ => None,
        }
    }
}

impl Reply {
    pub fn line(&self) -> String {
        match self {
            Reply::Granted { id, left } => format!("granted {id} {left}\n"),
            Reply::Refused { id, left } => format!("refused {id} {left}\n"),
            Reply::Settled { id, left } => format!("settled {id} {left}\n"),
        }
    }

    /// Reads one line (its newline removed).
    pub fn parse(line: &str) -> Option<Reply> {
        let (word, id, left) = three(line)?;
        let id = unsigned(id)?;
        let left = match left.strip_prefix('-') {
            Some(rest) => -i64::try_from(unsigned(rest)?).ok()?,
            None => i64::try_from(unsigned(left)?).ok()?,
        };
        match word {
            "granted" => Some(Reply::Granted { id, left }),
            "refused" => Some(Reply::Refused { id, left }),
            "settled" => Some(Reply::Settled { id, left }),
            _ => None,
        }
    }

    pub fn id(&self) -> u64 {
        match self {
            Reply::Granted { id, .. } | Reply::Refused { id, .. } | Reply::Settled { id, .. } => *id,
        }
    }
}

fn three(line: &str) -> Option<(&str, &str, &str)> {
    if line.len() >= MAX_BUDGET_LINE {
        return None;
    }
    let mut it = line.split(' ');
    let out = (it.next()?, it.next()?, it.next()?);
    it.next().is_none().then_some(out)
}

/// Decimal digits only: no sign, no spaces, at most 20 digits.
fn unsigned(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        for ask in [
            Ask::Reserve { id: 0, tokens: 1064 },
            Ask::Settle { id: u64::MAX, used: 0 },
            Ask::Return { id: 7 },
            Ask::Return { id: u64::MAX },
        ] {
            let line = ask.line();
            assert!(line.len() <= MAX_BUDGET_LINE, "{line}");
            assert_eq!(Ask::parse(line.trim_end_matches('\n')), Some(ask));
        }
        for reply in [
            Reply::Granted { id: 1, left: 4000 },
            Reply::Refused { id: 2, left: -300 },
            Reply::Settled { id: 3, left: 0 },
            Reply::Settled {
                id: u64::MAX,
                left: i64::MIN + 1,
            },
        ] {
            let line = reply.line();
            assert!(line.len() <= MAX_BUDGET_LINE, "{line}");
            assert_eq!(Reply::parse(line.trim_end_matches('\n')), Some(reply));
        }
    }

    #[test]
    fn anything_else_is_refused() {
        for line in [
            "",
            "reserve",
            "reserve 1",
            "reserve 1 2 3",
            "reserve  1 2",
            "reserve -1 2",
            "reserve 1 -2",
            "reserve +1 2",
            "reserve 1 2 ",
            "reserve 1 0x10",
            "reserve 1 99999999999999999999999",
            "mint 1 2",
            "granted 1 2",
            "RESERVE 1 2",
            "return",
            "return ",
            "return 1 2",
            "return -1",
            "return  1",
            "return 1 ",
            &format!("reserve 1 {}", "1".repeat(70)),
        ] {
            assert_eq!(Ask::parse(line), None, "{line:?}");
        }
        for line in [
            "granted 1",
            "granted 1 --2",
            "granted -1 2",
            "reserve 1 2",
            "granted 1 9223372036854775808",
        ] {
            assert_eq!(Reply::parse(line), None, "{line:?}");
        }
    }
}
