//! `TokenAuthority`: the only holder of a formation's signing key.
//!
//! It mints the key and one `mft1` token per edge when asked, hands out only the verify key and
//! each caller's own tokens, and zeroizes the key on `DropKey` (sent once every member has been
//! reaped) or when the actor stops, whichever comes first.

use actix::prelude::*;

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

/// Forget the key (zeroized by `SigningKey`'s drop).
pub struct DropKey;

impl Message for DropKey {
    type Result = ();
}

#[derive(Default)]
pub struct TokenAuthority {
    key: Option<SigningKey>,
}

impl Actor for TokenAuthority {
    type Context = Context<Self>;
}

impl Handler<Mint> for TokenAuthority {
    type Result = Result<Minted, String>;

    fn handle(&mut self, msg: Mint, _: &mut Context<Self>) -> Self::Result {
        let key = SigningKey::generate().map_err(|e| format!("the signing key could not be drawn from the OS: {e}"))?;
        let mut tokens = vec![Vec::new(); msg.members.len()];
        for &(from, to) in &msg.edges {
            let (Some(f), Some(t)) = (msg.members.get(from), msg.members.get(to)) else {
                continue;
            };
            tokens[from].push((to, key.mint(&msg.formation_id, f, t)));
        }
        let verify_key = key.verify_key();
        self.key = Some(key);
        Ok(Minted { verify_key, tokens })
    }
}

impl Handler<DropKey> for TokenAuthority {
    type Result = ();

    fn handle(&mut self, _: DropKey, ctx: &mut Context<Self>) {
        self.key = None;
        ctx.stop();
    }
}
