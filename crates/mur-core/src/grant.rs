//! Grants [ours] (docs/reference/formation.md#grants): on whose behalf, until when and with how
//! much a task runs. The launcher makes one for each call a member makes, narrowed from the
//! calling task's own, and seals it with the callee's grant key ([`GrantKey`]), which only the
//! launcher and the callee hold; the callee's door opens it with that key.
//!
//! ```text
//! mgr2.<B64(payload)>.<B64(HMAC-SHA256(callee's grant key, "murmur-grant-v2" 0x1F "mgr2" 0x1F B64(payload)))>
//! payload: {"budget":N|null,"callee":"b","chain":[{"member":"lead","task":"tsk_…"},…],
//!           "deadline_ms":N|null,"formation":"frm_…","id":"grt_…","origin":"operator"}
//! ```
//!
//! The payload is compact JSON with its keys in ascending byte order, sealed over its transmitted
//! B64 under a domain of its own (`murmur-grant-v2`). Everything is bounded: at most [`MAX_HOPS`]
//! hops, each field within its bytes, the whole within [`MAX_GRANT_BYTES`]. A grant is never
//! wider than the one it was narrowed from ([`narrow`]): its deadline and budget are at most the
//! parent's, and its chain is the parent's plus one hop. Its holder could seal a grant for itself
//! and no one else; that widens nothing, since the launcher narrows each next grant from its own
//! record of the parent, never from a grant's bytes.
//!
//! Pure: sealing and opening need only the callee's [`GrantKey`].

use serde::Deserialize;

use crate::ids::{self, IdKind};
use crate::names;
use crate::token::GrantKey;

const TAG: &str = "mgr2";
const DOMAIN: &str = "murmur-grant-v2";

/// The header a call carries its grant in, and the only place a door reads one from.
pub const HEADER: &str = "x-murmur-grant";

/// The longest grant on the wire, in bytes.
pub const MAX_GRANT_BYTES: usize = 4096;

/// The most hops a chain holds: a call from a task 16 hops below its root is refused.
pub const MAX_HOPS: usize = 16;

/// The longest client credential name an origin may carry.
pub const MAX_CREDENTIAL: usize = 64;

/// Who started the formation's work a grant serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The operator, through the operator token (`mur send`, `mur ui`'s clients).
    Operator,
    /// `mur run --task`.
    Task,
    /// A declared client credential, by its name.
    Client(String),
    /// Unverified: a member said the task was its own (its caller sent no grant).
    Member,
}

impl Origin {
    /// Its wire spelling: `operator`, `task`, `client:<name>` or `member`.
    pub fn as_string(&self) -> String {
        match self {
            Origin::Operator => "operator".into(),
            Origin::Task => "task".into(),
            Origin::Client(name) => format!("client:{name}"),
            Origin::Member => "member".into(),
        }
    }

    /// Reads the wire spelling; a client name is 1–64 of `[A-Za-z0-9._-]`.
    pub fn parse(s: &str) -> Option<Origin> {
        match s {
            "operator" => Some(Origin::Operator),
            "task" => Some(Origin::Task),
            "member" => Some(Origin::Member),
            _ => {
                let name = s.strip_prefix("client:")?;
                let ok = !name.is_empty()
                    && name.len() <= MAX_CREDENTIAL
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
                ok.then(|| Origin::Client(name.to_string()))
            }
        }
    }
}

/// One step of a chain: a member and the task it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hop {
    pub member: String,
    pub task: String,
}

impl Hop {
    fn valid(&self) -> bool {
        names::is_member(&self.member) && ids::is(IdKind::Task, &self.task)
    }
}

/// A grant's claims, as the launcher sealed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub formation: String,
    pub id: String,
    /// The member whose task runs under it.
    pub callee: String,
    pub origin: Origin,
    /// From the root's task down to the caller's: empty only for a root.
    pub chain: Vec<Hop>,
    /// Unix ms after which the callee's task ends `canceled`.
    pub deadline_ms: Option<u64>,
    /// Tokens the callee's subtree may spend.
    pub budget: Option<u64>,
}

/// What a member asks for its call (the launcher knows who asks: the member its socket was
/// made for).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The calling member (the socket's).
    pub caller: String,
    /// The calling task.
    pub task: String,
    pub callee: String,
    /// A narrower deadline for this call, if any.
    pub deadline_ms: Option<u64>,
    /// A cap on this call's budget, if any.
    pub budget: Option<u64>,
}

/// Why a grant was not made or not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the grant is malformed, altered or not sealed by this formation's launcher for this member")]
    Invalid,
    #[error("the grant is longer than {MAX_GRANT_BYTES} bytes")]
    Oversize,
    #[error("the grant is another formation's")]
    OtherFormation,
    #[error("the grant is for another member")]
    NotForThisMember,
    #[error("the grant's last hop is not the member whose token made the call")]
    NotTheCaller,
    #[error("the caller does not hold the grant it narrows")]
    NotTheHolder,
    #[error("the chain would be longer than {MAX_HOPS} hops")]
    TooManyHops,
    #[error("the grant's deadline has passed")]
    Expired,
    #[error("the grant's budget is spent")]
    Spent,
    #[error("a member name or task id in the request is malformed")]
    BadRequest,
    #[error("the callee is not one the caller may call")]
    NotACallee,
    #[error("the launcher does not hold the grant the request narrows")]
    UnknownParent,
}

/// Each refusal's word on the authority channel, in one table both directions read.
const WORDS: [(Refusal, &str); 12] = [
    (Refusal::Invalid, "invalid"),
    (Refusal::Oversize, "oversize"),
    (Refusal::OtherFormation, "other-formation"),
    (Refusal::NotForThisMember, "not-for-this-member"),
    (Refusal::NotTheCaller, "not-the-caller"),
    (Refusal::NotTheHolder, "not-the-holder"),
    (Refusal::TooManyHops, "too-many-hops"),
    (Refusal::Expired, "expired"),
    (Refusal::Spent, "spent"),
    (Refusal::BadRequest, "bad-request"),
    (Refusal::NotACallee, "not-a-callee"),
    (Refusal::UnknownParent, "unknown-parent"),
];

impl Refusal {
    pub fn word(self) -> &'static str {
        WORDS.iter().find(|(r, _)| *r == self).map_or("invalid", |(_, w)| w)
    }

    pub fn from_word(word: &str) -> Option<Refusal> {
        WORDS.iter().find(|(_, w)| *w == word).map(|(r, _)| *r)
    }
}

impl Grant {
    /// A root grant: the work `origin` started, at the member `callee` that runs its first task;
    /// its deadline and budget are the formation's.
    pub fn root(
        formation: &str,
        id: String,
        callee: &str,
        origin: Origin,
        deadline_ms: Option<u64>,
        budget: Option<u64>,
    ) -> Grant {
        Grant {
            formation: formation.to_string(),
            id,
            callee: callee.to_string(),
            origin,
            chain: Vec::new(),
            deadline_ms,
            budget,
        }
    }

    /// The member that made the call this grant came with (its chain's last hop), none for a root.
    pub fn caller(&self) -> Option<&Hop> {
        self.chain.last()
    }

    /// Compact JSON, keys in ascending byte order, built by hand so its bytes are pinned (as
    /// the tokens' are): every number is a whole one, written in decimal.
    fn payload(&self) -> Vec<u8> {
        let string = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let number = |n: Option<u64>| n.map_or_else(|| "null".to_string(), |n| n.to_string());
        let chain: Vec<String> = self
            .chain
            .iter()
            .map(|h| format!("{{\"member\":{},\"task\":{}}}", string(&h.member), string(&h.task)))
            .collect();
        format!(
            "{{\"budget\":{},\"callee\":{},\"chain\":[{}],\"deadline_ms\":{},\"formation\":{},\"id\":{},\"origin\":{}}}",
            number(self.budget),
            string(&self.callee),
            chain.join(","),
            number(self.deadline_ms),
            string(&self.formation),
            string(&self.id),
            string(&self.origin.as_string()),
        )
        .into_bytes()
    }

    /// Its wire form, sealed with its callee's grant key; `None` when it would exceed
    /// [`MAX_GRANT_BYTES`] (bounded fields make that impossible for a valid grant).
    pub fn seal(&self, callee_key: &GrantKey) -> Option<String> {
        let wire = callee_key.seal(DOMAIN, TAG, &self.payload());
        (wire.len() <= MAX_GRANT_BYTES).then_some(wire)
    }

    /// Reads a grant's wire form with the grant key of the member it is for: size, MAC, payload
    /// shape and every field's bound.
    pub fn open(my_key: &GrantKey, wire: &str) -> Result<Grant, Refusal> {
        if wire.len() > MAX_GRANT_BYTES {
            return Err(Refusal::Oversize);
        }
        let payload = my_key.open(DOMAIN, TAG, wire).ok_or(Refusal::Invalid)?;
        Grant::from_payload(&payload)
    }

    /// What a grant's wire form says, its MAC not checked: only for a grant its holder
    /// just got from its own launcher over the authority channel (to see whether one it asked
    /// for ahead of a call has expired since), never for one that came from anyone else.
    pub fn read_unchecked(wire: &str) -> Option<Grant> {
        if wire.len() > MAX_GRANT_BYTES {
            return None;
        }
        let payload = crate::token::payload_unchecked(wire, TAG)?;
        Grant::from_payload(&payload).ok()
    }

    /// The grant as a member keeps it with a task in its task store (its payload, unsealed: the
    /// store is the member's own, and the door verified the grant when the task came).
    pub fn kept(&self) -> Vec<u8> {
        self.payload()
    }

    /// A grant read back from [`Grant::kept`], held to the same shape and bounds as one that
    /// came sealed; `None` for anything else.
    pub fn from_kept(bytes: &[u8]) -> Option<Grant> {
        if bytes.len() > MAX_GRANT_BYTES {
            return None;
        }
        Grant::from_payload(bytes).ok()
    }

    fn from_payload(payload: &[u8]) -> Result<Grant, Refusal> {
        // serde would also read a struct from a JSON array; the payload must be an object.
        if payload.first() != Some(&b'{') {
            return Err(Refusal::Invalid);
        }
        let p: Payload = serde_json::from_slice(payload).map_err(|_| Refusal::Invalid)?;
        let grant = Grant {
            origin: Origin::parse(&p.origin).ok_or(Refusal::Invalid)?,
            chain: p
                .chain
                .into_iter()
                .map(|h| Hop {
                    member: h.member,
                    task: h.task,
                })
                .collect(),
            formation: p.formation,
            id: p.id,
            callee: p.callee,
            deadline_ms: p.deadline_ms,
            budget: p.budget,
        };
        let valid = ids::is(IdKind::Formation, &grant.formation)
            && ids::is(IdKind::Grant, &grant.id)
            && names::is_member(&grant.callee)
            && grant.chain.len() <= MAX_HOPS
            && grant.chain.iter().all(Hop::valid);
        valid.then_some(grant).ok_or(Refusal::Invalid)
    }

    /// A door's check (docs/reference/formation.md#grants): genuine, of this formation, for this
    /// member, and made for the member whose edge token carried it (`caller`).
    pub fn verify(my_key: &GrantKey, wire: &str, formation: &str, me: &str, caller: &str) -> Result<Grant, Refusal> {
        let g = Grant::open(my_key, wire)?;
        if g.formation != formation {
            return Err(Refusal::OtherFormation);
        }
        if g.callee != me {
            return Err(Refusal::NotForThisMember);
        }
        if g.caller().map(|h| h.member.as_str()) != Some(caller) {
            return Err(Refusal::NotTheCaller);
        }
        Ok(g)
    }
}

/// Why a task ended at its grant's deadline `deadline_ms` (Unix ms): E-GRT-002 with the
/// deadline's time. A task is ended so at its deadline, and by any cancel that arrives after it
/// (its caller's, cascading from the same deadline), so the deadline is named either way.
pub fn deadline_reason(deadline_ms: u64) -> String {
    let at = i64::try_from(deadline_ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(
            || deadline_ms.to_string(),
            |d| d.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        );
    crate::diag::Diagnostic::new(
        crate::diag::E_GRT_002,
        format!("the task reached its grant's deadline ({at}) and was canceled"),
    )
    .to_string()
}

/// The launcher's narrowing: the grant for `ask`'s call, made from `parent`, the grant the
/// calling task runs under. `parent_left` is what the parent's budget has left now (the keeper's
/// figure; `None` when it keeps none), `now_ms` the time. Never wider: the deadline is the
/// earlier of the parent's and the asked one, the budget the least of the parent's remainder and
/// the asked cap, the origin the parent's, the chain the parent's plus the caller's hop.
pub fn narrow(
    parent: &Grant,
    parent_left: Option<u64>,
    ask: &Request,
    now_ms: u64,
    id: String,
) -> Result<Grant, Refusal> {
    let hop = Hop {
        member: ask.caller.clone(),
        task: ask.task.clone(),
    };
    if !hop.valid() || !names::is_member(&ask.callee) {
        return Err(Refusal::BadRequest);
    }
    if parent.callee != ask.caller {
        return Err(Refusal::NotTheHolder);
    }
    if parent.chain.len() >= MAX_HOPS {
        return Err(Refusal::TooManyHops);
    }
    if parent.deadline_ms.is_some_and(|d| d <= now_ms) {
        return Err(Refusal::Expired);
    }
    let budget = min_some(min_some(parent.budget, parent_left), ask.budget);
    if budget == Some(0) {
        return Err(Refusal::Spent);
    }
    let mut chain = parent.chain.clone();
    chain.push(hop);
    Ok(Grant {
        formation: parent.formation.clone(),
        id,
        callee: ask.callee.clone(),
        origin: parent.origin.clone(),
        chain,
        deadline_ms: min_some(parent.deadline_ms, ask.deadline_ms),
        budget,
    })
}

/// A member's own root for a task a client outside the formation sent with limits
/// (docs/reference/formation.md#limits-across-the-formations-edge): `root`, the formation's root
/// at that member, narrowed to `ask`'s deadline and budget and to what the formation's budget
/// has left (`formation_left`), with no hop. Only the member itself may ask for it.
pub fn own_root(root: Grant, formation_left: Option<u64>, ask: &Request, now_ms: u64) -> Result<Grant, Refusal> {
    let hop = Hop {
        member: ask.caller.clone(),
        task: ask.task.clone(),
    };
    if !hop.valid() {
        return Err(Refusal::BadRequest);
    }
    if ask.callee != ask.caller || root.callee != ask.caller {
        return Err(Refusal::NotTheHolder);
    }
    let deadline_ms = min_some(root.deadline_ms, ask.deadline_ms);
    if deadline_ms.is_some_and(|d| d <= now_ms) {
        return Err(Refusal::Expired);
    }
    let budget = min_some(min_some(root.budget, formation_left), ask.budget);
    if budget == Some(0) {
        return Err(Refusal::Spent);
    }
    Ok(Grant {
        deadline_ms,
        budget,
        ..root
    })
}

/// The lesser of two optional limits, `None` meaning none.
fn min_some(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// Exactly these keys; `deny_unknown_fields` also refuses duplicated ones.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload {
    budget: Option<u64>,
    callee: String,
    chain: Vec<PayloadHop>,
    deadline_ms: Option<u64>,
    formation: String,
    id: String,
    origin: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PayloadHop {
    member: String,
    task: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728394";
    const OTHER_FRM: &str = "frm_0199c4e2f1b7712a9d3e4f5061728395";

    fn task(n: u8) -> String {
        format!("tsk_0199c4e2f1b7712a9d3e4f50617283{n:02x}")
    }

    fn grant_id(n: u8) -> String {
        format!("grt_0199c4e2f1b7712a9d3e4f50617283{n:02x}")
    }

    fn ask(caller: &str, callee: &str, deadline_ms: Option<u64>, budget: Option<u64>) -> Request {
        Request {
            caller: caller.into(),
            task: task(1),
            callee: callee.into(),
            deadline_ms,
            budget,
        }
    }

    fn root(deadline_ms: Option<u64>, budget: Option<u64>) -> Grant {
        Grant::root(FRM, grant_id(0), "lead", Origin::Operator, deadline_ms, budget)
    }

    #[test]
    fn narrowing_never_widens() {
        // (parent deadline, parent budget, parent left, asked deadline, asked budget) → (deadline, budget)
        type Row = (
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
        );
        let table: &[Row] = &[
            (None, None, None, None, None, None, None),
            (Some(5000), None, None, None, None, Some(5000), None),
            (Some(5000), None, None, Some(9000), None, Some(5000), None),
            (Some(5000), None, None, Some(3000), None, Some(3000), None),
            (None, None, None, Some(3000), None, Some(3000), None),
            (None, Some(100), None, None, None, None, Some(100)),
            (None, Some(100), Some(40), None, None, None, Some(40)),
            (None, Some(100), Some(40), None, Some(500), None, Some(40)),
            (None, Some(100), Some(40), None, Some(10), None, Some(10)),
            (None, None, Some(70), None, None, None, Some(70)),
            (None, None, None, None, Some(10), None, Some(10)),
        ];
        for (i, &(pd, pb, left, ad, ab, want_d, want_b)) in table.iter().enumerate() {
            let g = narrow(&root(pd, pb), left, &ask("lead", "a", ad, ab), 1000, grant_id(1)).unwrap();
            assert_eq!((g.deadline_ms, g.budget), (want_d, want_b), "row {i}");
            assert_eq!(g.origin, Origin::Operator, "row {i}");
            assert_eq!(g.callee, "a");
            assert_eq!(
                g.chain,
                vec![Hop {
                    member: "lead".into(),
                    task: task(1)
                }]
            );
        }
    }

    #[test]
    fn a_clients_limits_only_narrow_a_members_own_root() {
        // (formation deadline, formation left, asked deadline, asked budget) → (deadline, budget) or refusal
        type Row = (
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Option<u64>,
            Result<(Option<u64>, Option<u64>), Refusal>,
        );
        let table: &[Row] = &[
            (None, None, None, None, Ok((None, None))),
            (None, None, Some(5000), Some(30), Ok((Some(5000), Some(30)))),
            (Some(4000), None, Some(5000), None, Ok((Some(4000), None))),
            (Some(6000), None, Some(5000), None, Ok((Some(5000), None))),
            (None, Some(20), None, Some(30), Ok((None, Some(20)))),
            (None, Some(40), None, Some(30), Ok((None, Some(30)))),
            (None, Some(40), None, None, Ok((None, Some(40)))),
            (None, None, Some(1000), None, Err(Refusal::Expired)),
            (Some(900), None, Some(5000), None, Err(Refusal::Expired)),
            (None, Some(0), None, Some(30), Err(Refusal::Spent)),
        ];
        for (i, &(fd, left, ad, ab, want)) in table.iter().enumerate() {
            let got = own_root(root(fd, None), left, &ask("lead", "lead", ad, ab), 1000).map(|g| {
                assert!(g.chain.is_empty(), "row {i}: a root has no hop");
                assert_eq!((g.callee.as_str(), &g.origin), ("lead", &Origin::Operator), "row {i}");
                (g.deadline_ms, g.budget)
            });
            assert_eq!(got, want, "row {i}");
        }
        // Only for the member itself, and a well-formed task.
        assert_eq!(
            own_root(root(None, None), None, &ask("lead", "a", None, Some(5)), 1000),
            Err(Refusal::NotTheHolder)
        );
        let mut bad = ask("lead", "lead", None, Some(5));
        bad.task = "tsk_nope".into();
        assert_eq!(own_root(root(None, None), None, &bad, 1000), Err(Refusal::BadRequest));
    }

    #[test]
    fn a_chain_grows_by_one_hop_and_keeps_its_origin() {
        let a = narrow(
            &root(Some(9000), Some(50)),
            None,
            &ask("lead", "a", None, None),
            1000,
            grant_id(1),
        )
        .unwrap();
        let mut b_ask = ask("a", "b", Some(20_000), Some(80));
        b_ask.task = task(2);
        let b = narrow(&a, Some(30), &b_ask, 2000, grant_id(2)).unwrap();
        assert_eq!(
            b.chain
                .iter()
                .map(|h| (h.member.as_str(), h.task.clone()))
                .collect::<Vec<_>>(),
            vec![("lead", task(1)), ("a", task(2))]
        );
        assert_eq!(
            (b.deadline_ms, b.budget, b.origin),
            (Some(9000), Some(30), Origin::Operator)
        );
    }

    #[test]
    fn narrowing_is_refused_when_it_cannot_be_honest() {
        let mut deep = root(None, None);
        deep.chain = (0..MAX_HOPS as u8)
            .map(|i| Hop {
                member: "x".into(),
                task: task(i),
            })
            .collect();
        deep.callee = "lead".into();
        let mut bad_task = ask("lead", "a", None, None);
        bad_task.task = "tsk_nope".into();
        let table: &[(&str, Grant, Option<u64>, Request, Refusal)] = &[
            (
                "another member's grant",
                root(None, None),
                None,
                ask("a", "b", None, None),
                Refusal::NotTheHolder,
            ),
            (
                "deadline passed",
                root(Some(1000), None),
                None,
                ask("lead", "a", None, None),
                Refusal::Expired,
            ),
            (
                "budget spent",
                root(None, Some(10)),
                Some(0),
                ask("lead", "a", None, None),
                Refusal::Spent,
            ),
            (
                "a zero cap",
                root(None, None),
                None,
                ask("lead", "a", None, Some(0)),
                Refusal::Spent,
            ),
            (
                "too many hops",
                deep,
                None,
                ask("lead", "a", None, None),
                Refusal::TooManyHops,
            ),
            (
                "a malformed task id",
                root(None, None),
                None,
                bad_task,
                Refusal::BadRequest,
            ),
            (
                "a malformed callee",
                root(None, None),
                None,
                ask("lead", "A B", None, None),
                Refusal::BadRequest,
            ),
        ];
        for (what, parent, left, request, want) in table {
            assert_eq!(narrow(parent, *left, request, 1000, grant_id(1)), Err(*want), "{what}");
        }
    }

    #[test]
    fn the_wire_form_round_trips_and_refuses_anything_altered() {
        let key = GrantKey::generate().unwrap();
        let vk = key.clone();
        let g = narrow(
            &root(Some(9000), Some(50)),
            None,
            &ask("lead", "a", None, None),
            1000,
            grant_id(1),
        )
        .unwrap();
        let wire = g.seal(&key).unwrap();
        assert!(wire.starts_with("mgr2."), "{wire}");
        assert_eq!(Grant::verify(&vk, &wire, FRM, "a", "lead"), Ok(g.clone()));
        let (_, payload, sig) = {
            let mut p = wire.split('.');
            (p.next().unwrap(), p.next().unwrap(), p.next().unwrap())
        };
        let other_key = GrantKey::generate().unwrap();
        let mut forged = g.clone();
        forged.deadline_ms = Some(99_999);
        let widened_payload = crate::token::b64(&forged.payload());
        let mut flipped = wire.clone().into_bytes();
        let at = flipped.len() - 10;
        flipped[at] = if flipped[at] == b'A' { b'B' } else { b'A' };
        let table: Vec<(&str, String, Refusal)> = vec![
            ("another member's key", g.seal(&other_key).unwrap(), Refusal::Invalid),
            (
                "a widened payload under the old MAC",
                format!("mgr2.{widened_payload}.{sig}"),
                Refusal::Invalid,
            ),
            (
                "a flipped MAC byte",
                String::from_utf8(flipped).unwrap(),
                Refusal::Invalid,
            ),
            ("a token's tag", format!("mft1.{payload}.{sig}"), Refusal::Invalid),
            ("the old tag", format!("mgr1.{payload}.{sig}"), Refusal::Invalid),
            ("no MAC", format!("mgr2.{payload}"), Refusal::Invalid),
            ("empty", String::new(), Refusal::Invalid),
            (
                "oversize",
                format!("mgr2.{}.{sig}", "A".repeat(MAX_GRANT_BYTES)),
                Refusal::Oversize,
            ),
        ];
        for (what, wire, want) in table {
            assert_eq!(Grant::verify(&vk, &wire, FRM, "a", "lead"), Err(want), "{what}");
        }
        // Genuine, but not for this door or not from this caller.
        assert_eq!(
            Grant::verify(&vk, &wire, OTHER_FRM, "a", "lead"),
            Err(Refusal::OtherFormation)
        );
        assert_eq!(
            Grant::verify(&vk, &wire, FRM, "b", "lead"),
            Err(Refusal::NotForThisMember)
        );
        assert_eq!(Grant::verify(&vk, &wire, FRM, "a", "b"), Err(Refusal::NotTheCaller));
        // A root has no caller: no door accepts it as a call's.
        let r = root(None, None);
        assert_eq!(
            Grant::verify(&vk, &r.seal(&key).unwrap(), FRM, "lead", "lead"),
            Err(Refusal::NotTheCaller)
        );
    }

    #[test]
    fn a_sealed_payload_outside_the_bounds_is_refused() {
        // The launcher never seals these; a grant that holds one is refused even when genuine.
        let key = GrantKey::generate().unwrap();
        let vk = key.clone();
        let mut too_long = narrow(&root(None, None), None, &ask("lead", "a", None, None), 0, grant_id(1)).unwrap();
        too_long.chain = (0..=MAX_HOPS as u8)
            .map(|i| Hop {
                member: "lead".into(),
                task: task(i),
            })
            .collect();
        let mut bad_origin = too_long.clone();
        bad_origin.chain.truncate(1);
        bad_origin.origin = Origin::Client("x y".into());
        let mut bad_id = bad_origin.clone();
        bad_id.origin = Origin::Task;
        bad_id.id = "mcl_0199c4e2f1b7712a9d3e4f5061728394".into();
        for (what, g) in [
            ("17 hops", too_long),
            ("a bad origin", bad_origin),
            ("a bad id", bad_id),
        ] {
            let wire = g.seal(&key).unwrap();
            assert_eq!(Grant::open(&vk, &wire), Err(Refusal::Invalid), "{what}");
        }
        let extra_key = key.seal(DOMAIN, TAG, br#"{"budget":null,"callee":"a","chain":[],"deadline_ms":null,"formation":"frm_0199c4e2f1b7712a9d3e4f5061728394","id":"grt_0199c4e2f1b7712a9d3e4f5061728394","origin":"task","wider":1}"#);
        assert_eq!(Grant::open(&vk, &extra_key), Err(Refusal::Invalid), "an unknown key");
    }

    #[test]
    fn the_widest_valid_grant_fits_the_bound() {
        let key = GrantKey::generate().unwrap();
        let long = "m".repeat(32);
        let g = Grant {
            formation: FRM.into(),
            id: grant_id(9),
            callee: long.clone(),
            origin: Origin::Client("c".repeat(MAX_CREDENTIAL)),
            chain: (0..MAX_HOPS as u8)
                .map(|i| Hop {
                    member: long.clone(),
                    task: task(i),
                })
                .collect(),
            deadline_ms: Some(u64::MAX),
            budget: Some(u64::MAX),
        };
        let wire = g.seal(&key).expect("fits");
        assert!(wire.len() <= MAX_GRANT_BYTES, "{}", wire.len());
        assert_eq!(Grant::open(&key, &wire), Ok(g));
    }

    #[test]
    fn a_kept_grant_reads_back_as_it_was_and_nothing_else_does() {
        let parent = root(Some(9_000), Some(500));
        let g = narrow(
            &parent,
            Some(400),
            &ask("lead", "worker", Some(8_000), Some(300)),
            1_000,
            grant_id(2),
        )
        .expect("narrows");
        assert_eq!(Grant::from_kept(&g.kept()), Some(g.clone()));
        for bad in [&b""[..], b"[]", b"{}", b"not json", &vec![b' '; MAX_GRANT_BYTES + 1]] {
            assert_eq!(Grant::from_kept(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        let other = String::from_utf8(g.kept()).expect("utf-8").replace(FRM, "frm_nope");
        assert_eq!(Grant::from_kept(other.as_bytes()), None);
    }

    #[test]
    fn origins_read_what_they_write() {
        for o in [
            Origin::Operator,
            Origin::Task,
            Origin::Member,
            Origin::Client("ci.bot-1".into()),
        ] {
            assert_eq!(Origin::parse(&o.as_string()), Some(o));
        }
        for s in [
            "",
            "client:",
            "client:a b",
            "Operator",
            &format!("client:{}", "c".repeat(65)),
        ] {
            assert_eq!(Origin::parse(s), None, "{s:?}");
        }
    }

    #[test]
    fn a_deadline_reason_names_its_code_and_time() {
        for (deadline_ms, time) in [
            (0, "(1970-01-01T00:00:00Z)"),
            (1_796_587_854_208, "(2026-12-06T20:10:54Z)"),
            // Past what a date holds: the number itself, never a panic.
            (u64::MAX, "(18446744073709551615)"),
        ] {
            let reason = deadline_reason(deadline_ms);
            assert!(reason.contains("E-GRT-002"), "{reason}");
            assert!(reason.contains(time), "{deadline_ms}: {reason}");
        }
    }
}
