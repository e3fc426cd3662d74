//! `roster.yaml`: parsing (check 1, E-ROS-001), admission (checks 2–8), edges and W-ROS-001.
//!
//! Pure: no actix, HTTP or processes, and admission writes nothing. `mur run --roster`, `mur
//! doctor` and `mur deploy` admit through [`front`], which reads the project's lock and then
//! calls [`read`] and [`admit`] with its stores. The texts are the [compatible] ones of
//! docs/reference/roster.md#admission-in-order.

mod admit;
pub mod edges;
pub mod front;
mod parse;
pub mod warn;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use admit::{admit, check_structure, overflows};
pub use parse::{MAX_BYTES, parse, read};

use crate::names::ArtifactName;

/// A parsed roster: shape-checked (check 1) but not yet admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roster {
    pub members: Vec<MemberDecl>,
    pub reachability: Reachability,
}

/// One `members[]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDecl {
    /// A valid member name (`^[a-z][a-z0-9-]{0,31}$`).
    pub name: String,
    pub capsule: ArtifactName,
    /// The exact version as written (`1.10` stays `1.10`); never blank or an alias.
    pub version: String,
    pub entry: bool,
}

/// `reachability` as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reachability {
    /// Absent (or written with no value): no member may call another.
    None,
    /// `all`: every consenting pair, never into the entry member.
    All,
    /// A list of rules; `[]` is an empty list and, like `None`, yields no edge.
    Rules(Vec<Rule>),
}

/// One rule: `from` may call each member in `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub from: String,
    /// As written: never empty and never `from`, but may repeat a name (merged into one edge).
    pub to: Vec<String>,
}

/// An admitted roster: every member bound to the bytes admission found.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// In roster order; exactly one has `entry`.
    pub members: Vec<AdmittedMember>,
    /// `(from, to)` roster indices, deduplicated, sorted by `from` then `to`
    /// (docs/reference/roster.md#edges).
    pub edges: Vec<(usize, usize)>,
    /// W-ROS-001 warnings, in roster order; the roster is admitted regardless.
    pub warnings: Vec<crate::diag::Diagnostic>,
    pub reachability: Reachability,
}

#[derive(Debug, Clone)]
pub struct AdmittedMember {
    pub name: String,
    pub capsule: ArtifactName,
    pub version: String,
    pub entry: bool,
    /// The sha256 of the artifact admission bound the member to (lowercase hex).
    pub sha256: String,
    pub zip_path: PathBuf,
    pub manifest: crate::manifest::Manifest,
}

impl Admitted {
    /// The entry member's index.
    pub fn entry(&self) -> usize {
        // Admission guarantees exactly one entry; 0 keeps this total for hand-built values.
        self.members.iter().position(|m| m.entry).unwrap_or(0)
    }

    /// The members `i` may call, in roster order.
    pub fn callees(&self, i: usize) -> Vec<usize> {
        edges::callees(&self.edges, i)
    }

    /// The members that may call `i`, in roster order.
    pub fn callers(&self, i: usize) -> Vec<usize> {
        edges::callers(&self.edges, i)
    }

    pub fn has_edges(&self) -> bool {
        !self.edges.is_empty()
    }
}
