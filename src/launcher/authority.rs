//! `TokenAuthority`: the only holder of a formation's signing key and of every member's grant key.
//!
//! It mints the key and one `mft1` token per edge when asked, hands out only the verify key and
//! each caller's own tokens, draws one grant key per member (handed to that member alone, over
//! its authority channel) and seals each grant with its callee's, and zeroizes every key on
//! `DropKey` (sent once every member has been reaped) or when the actor stops, whichever comes
//! first.

use std::collections::HashMap;

use actix::prelude::*;

use crate::token::GrantKey;
use crate::token::formation::{SigningKey, VerifyKey};

/// Mint the formation's key and the tokens of every edge.
pub struct Mint {
    pub formation_id: String,
    /// Member names in roster order.
    pub members: Vec<String>,
    /// `(from, to)` member indices.
    pub edges: Vec<(usize, usize)>,
}

/// What members may be handed: the public half, and per caller its tokens as `(callee, token)`.
pub struct Minted {
    pub verify_key: VerifyKey,
    pub tokens: Vec<Vec<(usize, String)>>,
}

impl Message for Mint {
    type Result = Result<Minted, String>;
}

/// Seal a grant the budget keeper narrowed with its callee's grant key
/// (docs/reference/formation.md#grants): `None` once the keys are gone, for a callee that is no
/// member, or for a grant over its bound.
pub struct SealGrant(pub crate::grant::Grant);

impl Message for SealGrant {
    type Result = Option<String>;
}

impl Handler<SealGrant> for TokenAuthority {
    type Result = Option<String>;

    fn handle(&mut self, msg: SealGrant, _: &mut Context<Self>) -> Self::Result {
        msg.0.seal(self.grant_keys.get(&msg.0.callee)?)
    }
}

/// The grant key of one member, by name, for that member's own authority channel: `None` once
/// the keys are gone or for a name that is no member.
pub struct GrantKeyOf(pub String);

impl Message for GrantKeyOf {
    type Result = Option<GrantKey>;
}

impl Handler<GrantKeyOf> for TokenAuthority {
    type Result = Option<GrantKey>;

    fn handle(&mut self, msg: GrantKeyOf, _: &mut Context<Self>) -> Self::Result {
        self.grant_keys.get(&msg.0).cloned()
    }
}

/// Forget the keys (zeroized by `SigningKey`'s and `GrantKey`'s drops).
pub struct DropKey;

impl Message for DropKey {
    type Result = ();
}

#[derive(Default)]
pub struct TokenAuthority {
    key: Option<SigningKey>,
    /// Each member's, by name: drawn with the signing key, kept until it goes.
    grant_keys: HashMap<String, GrantKey>,
}

impl Actor for TokenAuthority {
    type Context = Context<Self>;
}

impl Handler<Mint> for TokenAuthority {
    type Result = Result<Minted, String>;

    fn handle(&mut self, msg: Mint, _: &mut Context<Self>) -> Self::Result {
        let key = SigningKey::generate().map_err(|e| format!("the signing key could not be drawn from the OS: {e}"))?;
        let signed = mint_all(&key, &msg);
        let mut tokens = vec![Vec::new(); msg.members.len()];
        for (&(from, to), token) in msg.edges.iter().zip(signed) {
            if let Some(token) = token {
                tokens[from].push((to, token));
            }
        }
        let mut grant_keys = HashMap::with_capacity(msg.members.len());
        for member in &msg.members {
            let drawn = GrantKey::generate().map_err(|e| format!("a grant key could not be drawn from the OS: {e}"))?;
            grant_keys.insert(member.clone(), drawn);
        }
        let verify_key = key.verify_key();
        self.key = Some(key);
        self.grant_keys = grant_keys;
        Ok(Minted { verify_key, tokens })
    }
}

/// Edges below which one thread signs them all: a thread costs more than this many signatures.
const PARALLEL_FROM: usize = 256;

/// One token per edge, in edge order (`None` for an edge naming no member). A signature is the
/// whole cost of an edge (one Ed25519 signing, ~16 µs when many share their inversions,
/// `SigningKey::mint_many`), so a large formation (65 280 edges at 256 members with
/// `reachability: all`) signs on every core: scoped threads borrow the key for this call only and
/// end before it returns, so it never leaves the authority.
fn mint_all(key: &SigningKey, msg: &Mint) -> Vec<Option<String>> {
    let sign = |edges: &[(usize, usize)]| -> Vec<Option<String>> {
        let named: Vec<Option<(&str, &str)>> = edges
            .iter()
            .map(|&(from, to)| Some((msg.members.get(from)?.as_str(), msg.members.get(to)?.as_str())))
            .collect();
        let pairs: Vec<(&str, &str)> = named.iter().flatten().copied().collect();
        let mut tokens = key.mint_many(&msg.formation_id, &pairs).into_iter();
        named.iter().map(|edge| edge.and_then(|_| tokens.next())).collect()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || msg.edges.len() < PARALLEL_FROM {
        return sign(&msg.edges);
    }
    let chunk = msg.edges.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let workers: Vec<_> = msg
            .edges
            .chunks(chunk)
            .skip(1)
            .map(|edges| {
                std::thread::Builder::new()
                    .name("mur-mint".into())
                    .spawn_scoped(scope, move || sign(edges))
            })
            .collect();
        // This thread signs the first chunk itself; a worker that could not start leaves its
        // chunk to it too.
        let mut out = sign(&msg.edges[..chunk.min(msg.edges.len())]);
        for (worker, edges) in workers.into_iter().zip(msg.edges.chunks(chunk).skip(1)) {
            match worker.map(|w| w.join()) {
                Ok(Ok(part)) => out.extend(part),
                _ => out.extend(sign(edges)),
            }
        }
        out
    })
}

impl Handler<DropKey> for TokenAuthority {
    type Result = ();

    fn handle(&mut self, _: DropKey, ctx: &mut Context<Self>) {
        self.key = None;
        self.grant_keys.clear();
        ctx.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minting_on_every_core_gives_each_edge_its_own_token_in_order() {
        let key = SigningKey::generate().unwrap();
        let members: Vec<String> = (0..24).map(|i| format!("m{i}")).collect();
        let all: Vec<(usize, usize)> = (0..24)
            .flat_map(|f| (0..24).filter(move |t| *t != f).map(move |t| (f, t)))
            .collect();
        let frm = "frm_0199c4e2f1b7712a9d3e4f5061728394".to_string();
        // Below the threshold (one thread), above it (552 edges, every core), and an edge that
        // names no member, in the middle of a chunk.
        let mut odd = all.clone();
        odd.insert(300, (3, 99));
        for edges in [all[..10].to_vec(), all.clone(), odd] {
            let msg = Mint {
                formation_id: frm.clone(),
                members: members.clone(),
                edges: edges.clone(),
            };
            let got = mint_all(&key, &msg);
            assert_eq!(got.len(), edges.len());
            for (&(f, t), token) in edges.iter().zip(&got) {
                let want = (t < members.len()).then(|| key.mint(&frm, &members[f], &members[t]));
                assert_eq!(token, &want, "edge {f} → {t}");
            }
        }
    }
}
