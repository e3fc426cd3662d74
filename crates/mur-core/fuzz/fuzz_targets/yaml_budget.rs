//! Fuzzes the YAML loader's expansion budget: aliases are charged what they expand to.
//!
//! Input: the first two bytes set small node and byte budgets (so aliases reach them often); the
//! rest is the document. Properties: no panic; a document that loads holds no more values and no
//! more scalar bytes than its budgets allow, whatever its aliases; a document that loads within
//! the small budgets loads the same under the defaults; the defaults' budgets hold too.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::yaml::{Limits, Node, NodeKind, load};

fuzz_target!(|data: &[u8]| {
    let [nodes, bytes, text @ ..] = data else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let small = Limits {
        max_nodes: usize::from(*nodes) + 1,
        max_expanded_bytes: usize::from(*bytes) * 4,
        ..Limits::default()
    };
    let defaults = Limits::default();
    let loaded = load(text, small);
    if let Ok(doc) = &loaded {
        within(doc, small);
        assert_eq!(load(text, defaults).as_ref(), Ok(doc));
    }
    if let Ok(doc) = load(text, defaults) {
        within(&doc, defaults);
    }
});

/// Asserts the built tree's values (keys included) and scalar text bytes are within `limits`.
fn within(doc: &Node, limits: Limits) {
    let (mut nodes, mut bytes) = (0usize, 0usize);
    let mut stack = vec![doc];
    while let Some(n) = stack.pop() {
        nodes += 1;
        match &n.kind {
            NodeKind::Scalar(s) => bytes += s.text.len(),
            NodeKind::Seq(items) => stack.extend(items),
            NodeKind::Map(entries) => {
                for (k, v) in entries {
                    nodes += 1;
                    bytes += k.len();
                    stack.push(v);
                }
            }
        }
        assert!(nodes <= limits.max_nodes, "more than {} values", limits.max_nodes);
        assert!(
            bytes <= limits.max_expanded_bytes,
            "more than {} bytes",
            limits.max_expanded_bytes
        );
    }
}
