//! A bounded YAML loader that keeps what strict parsers need and serde throws away.
//!
//! Roster, manifest and lock parsing need each scalar's source spelling (`1.10` stays `1.10`), its
//! style (a quoted `"1"` is a string) and its line and column for messages. This module turns the
//! event stream of one YAML document into a [`Node`] tree under hard limits on input size, depth,
//! node count and scalar bytes built, so hostile input (alias bombs, deep nesting, huge files) is
//! refused quickly and in bounded memory. An alias copies its anchor's value, so it is charged
//! the nodes and bytes of that whole value, and so is the copy kept for each anchor. Scalars
//! resolve by the YAML 1.2 core schema: `yes`/`no` are strings. It knows nothing of rosters or
//! manifests.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use saphyr_parser::{Event, Parser, ScalarStyle, ScanError};

/// Limits applied while loading; the defaults fit every file the runtime reads.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Source bytes.
    pub max_bytes: usize,
    pub max_depth: usize,
    /// Values built (each mapping key counts as one), aliases and anchor copies included.
    pub max_nodes: usize,
    /// Scalar text bytes built (keys included), aliases and anchor copies included. A 375-byte
    /// compressed file can otherwise alias a 100 KB scalar 30 000 times: 3 GB.
    pub max_expanded_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 1 << 20,
            max_depth: 64,
            max_nodes: 100_000,
            // A few times the largest file, so a document without aliases never reaches it
            // (unescaping grows text by at most half).
            max_expanded_bytes: 4 << 20,
        }
    }
}

/// A loaded YAML node with its position (1-based line and column).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub line: usize,
    pub col: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Scalar(Scalar),
    Seq(Vec<Node>),
    /// Entries in document order; keys are unique (checked on load).
    Map(Vec<(String, Node)>),
}

/// A scalar as written.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    /// The scalar's value as the source spells it (after YAML unescaping of quoted styles).
    pub text: String,
    /// True for a plain (unquoted, non-block) scalar: only those resolve to non-strings.
    pub plain: bool,
    /// An explicit core tag such as `str` for `!!str`, if written.
    pub tag: Option<String>,
}

/// What a scalar means under the YAML 1.2 core schema.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Null,
    Bool(bool),
    Int(i128),
    Float,
    Str,
}

impl Scalar {
    pub fn resolve(&self) -> Resolved {
        match self.tag.as_deref() {
            Some("str") => return Resolved::Str,
            Some("null") => return Resolved::Null,
            Some("bool") | Some("int") | Some("float") | None => {}
            Some(_) => return Resolved::Str,
        }
        if !self.plain {
            return Resolved::Str;
        }
        resolve_plain(&self.text)
    }
}

fn resolve_plain(t: &str) -> Resolved {
    match t {
        "" | "~" | "null" | "Null" | "NULL" => return Resolved::Null,
        "true" | "True" | "TRUE" => return Resolved::Bool(true),
        "false" | "False" | "FALSE" => return Resolved::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" | "-.inf" | "-.Inf" | "-.INF" | ".nan" | ".NaN"
        | ".NAN" => return Resolved::Float,
        _ => {}
    }
    let (sign, digits) = match t.as_bytes().first() {
        Some(b'-') => (-1i128, &t[1..]),
        Some(b'+') => (1, &t[1..]),
        _ => (1, t),
    };
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        // Out-of-range integers are still integers in shape; saturate rather than fail.
        return Resolved::Int(digits.parse::<i128>().map(|v| sign * v).unwrap_or(i128::MAX));
    }
    if let Some(oct) = t.strip_prefix("0o")
        && !oct.is_empty()
        && oct.bytes().all(|b| (b'0'..=b'7').contains(&b))
    {
        return Resolved::Int(i128::from_str_radix(oct, 8).unwrap_or(i128::MAX));
    }
    if let Some(hex) = t.strip_prefix("0x")
        && !hex.is_empty()
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
    {
        return Resolved::Int(i128::from_str_radix(hex, 16).unwrap_or(i128::MAX));
    }
    if is_core_float(digits) {
        return Resolved::Float;
    }
    Resolved::Str
}

/// `[-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?`
fn is_core_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let int_digits = count_digits(&b[i..]);
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(&b[i..]);
        i += frac_digits;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e') | Some(b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'-') | Some(b'+')) {
            i += 1;
        }
        let exp = count_digits(&b[i..]);
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len()
}

fn count_digits(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

impl Node {
    /// The shape word used in messages: `a string`, `an integer`, `a number`, `a boolean`, `a list`,
    /// `a mapping`, or `nothing` for null.
    pub fn shape(&self) -> &'static str {
        match &self.kind {
            NodeKind::Seq(_) => "a list",
            NodeKind::Map(_) => "a mapping",
            NodeKind::Scalar(s) => match s.resolve() {
                Resolved::Null => "nothing",
                Resolved::Bool(_) => "a boolean",
                Resolved::Int(_) => "an integer",
                Resolved::Float => "a number",
                Resolved::Str => "a string",
            },
        }
    }

    /// True for a null scalar (`key:` with no value, `~`, `null`).
    pub fn is_null(&self) -> bool {
        matches!(&self.kind, NodeKind::Scalar(s) if s.resolve() == Resolved::Null)
    }

    pub fn as_scalar(&self) -> Option<&Scalar> {
        match &self.kind {
            NodeKind::Scalar(s) => Some(s),
            _ => None,
        }
    }

    /// The text of a scalar that resolves to a string.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar(s) if s.resolve() == Resolved::Str => Some(&s.text),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match &self.kind {
            NodeKind::Scalar(s) => match s.resolve() {
                Resolved::Bool(b) => Some(b),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn as_int(&self) -> Option<i128> {
        match &self.kind {
            NodeKind::Scalar(s) => match s.resolve() {
                Resolved::Int(i) => Some(i),
                _ => None,
            },
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            NodeKind::Seq(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[(String, Node)]> {
        match &self.kind {
            NodeKind::Map(v) => Some(v),
            _ => None,
        }
    }

    /// The value of `key` in a mapping, treating a null value as absent.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .filter(|v| !v.is_null())
    }
}

/// Why a document could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub line: usize,
    pub col: usize,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}, column {}: {}", self.line, self.col, self.message)
    }
}

impl From<ScanError> for LoadError {
    fn from(e: ScanError) -> Self {
        LoadError {
            line: e.marker().line(),
            col: e.marker().col() + 1,
            message: e.info().to_string(),
        }
    }
}

/// Loads one YAML document. An empty stream loads as a null scalar at line 1, column 1.
pub fn load(text: &str, limits: Limits) -> Result<Node, LoadError> {
    if text.len() > limits.max_bytes {
        return Err(LoadError {
            line: 1,
            col: 1,
            message: format!("the file is larger than {} bytes", limits.max_bytes),
        });
    }
    Loader {
        limits,
        built: Weight::default(),
        anchors: HashMap::new(),
        stack: Vec::new(),
    }
    .run(text)
}

/// Reads at most `limits.max_bytes` of a file and loads it. Errors are rendered by the caller.
pub fn read_capped(path: &Path, max_bytes: usize) -> Result<Vec<u8>, ReadError> {
    let meta = std::fs::metadata(path).map_err(ReadError::Io)?;
    if meta.is_dir() {
        return Err(ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::IsADirectory,
            "is a directory",
        )));
    }
    let file = std::fs::File::open(path).map_err(ReadError::Io)?;
    let mut buf = Vec::new();
    file.take(max_bytes as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(ReadError::Io)?;
    if buf.len() > max_bytes {
        return Err(ReadError::TooLarge(max_bytes));
    }
    Ok(buf)
}

#[derive(Debug)]
pub enum ReadError {
    Io(std::io::Error),
    TooLarge(usize),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::TooLarge(n) => write!(f, "the file is larger than {n} bytes"),
        }
    }
}

/// What a value costs once built: its nodes (keys included) and its scalar text bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Weight {
    nodes: usize,
    bytes: usize,
}

impl Weight {
    fn scalar(text: &str) -> Weight {
        Weight {
            nodes: 1,
            bytes: text.len(),
        }
    }

    fn plus(self, other: Weight) -> Weight {
        Weight {
            nodes: self.nodes.saturating_add(other.nodes),
            bytes: self.bytes.saturating_add(other.bytes),
        }
    }
}

enum Frame {
    Seq {
        items: Vec<Node>,
        /// The collection's own node plus everything emitted into it so far.
        weight: Weight,
        line: usize,
        col: usize,
        anchor: usize,
    },
    Map {
        entries: Vec<(String, Node)>,
        /// The keys of `entries` (and the pending one), so a duplicate is found in O(1).
        keys: HashSet<String>,
        pending_key: Option<(String, usize, usize)>,
        weight: Weight,
        line: usize,
        col: usize,
        anchor: usize,
    },
}

struct Loader {
    limits: Limits,
    /// Everything built so far: the tree, alias copies and anchor copies.
    built: Weight,
    /// Each anchor's value (a copy, charged to `built`) and its weight, so an alias is charged
    /// before it is copied.
    anchors: HashMap<usize, (Node, Weight)>,
    stack: Vec<Frame>,
}

impl Loader {
    fn run(mut self, text: &str) -> Result<Node, LoadError> {
        let mut root: Option<Node> = None;
        let mut documents = 0;
        for item in Parser::new_from_str(text) {
            let (event, span) = item?;
            let line = span.start.line();
            let col = span.start.col() + 1;
            let err = |message: String| LoadError { line, col, message };
            match event {
                Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
                Event::DocumentStart(_) => {
                    documents += 1;
                    if documents > 1 {
                        return Err(err("a file holds one YAML document; found a second one".into()));
                    }
                }
                Event::Alias(id) => {
                    let Some((node, weight)) = self.anchors.get(&id) else {
                        return Err(err("an alias names an anchor that is not defined".into()));
                    };
                    // Charged before the copy is made, so a refused alias allocates nothing.
                    charge(&mut self.built, &self.limits, *weight, line, col)?;
                    let (node, weight) = (node.clone(), *weight);
                    self.emit(node, weight, &mut root, line, col)?;
                }
                Event::Scalar(value, style, anchor, tag) => {
                    let weight = Weight::scalar(&value);
                    self.count(weight, line, col)?;
                    let tag = tag.and_then(|t| {
                        if t.is_yaml_core_schema() {
                            Some(t.suffix.clone())
                        } else {
                            None
                        }
                    });
                    let node = Node {
                        kind: NodeKind::Scalar(Scalar {
                            text: value.into_owned(),
                            plain: style == ScalarStyle::Plain,
                            tag,
                        }),
                        line,
                        col,
                    };
                    self.keep_anchor(anchor, &node, weight, line, col)?;
                    self.emit(node, weight, &mut root, line, col)?;
                }
                Event::SequenceStart(anchor, _) => {
                    self.open(line, col)?;
                    self.stack.push(Frame::Seq {
                        items: Vec::new(),
                        weight: Weight { nodes: 1, bytes: 0 },
                        line,
                        col,
                        anchor,
                    });
                }
                Event::MappingStart(anchor, _) => {
                    self.open(line, col)?;
                    self.stack.push(Frame::Map {
                        entries: Vec::new(),
                        keys: HashSet::new(),
                        pending_key: None,
                        weight: Weight { nodes: 1, bytes: 0 },
                        line,
                        col,
                        anchor,
                    });
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    let (node, weight, anchor) = match self.stack.pop() {
                        Some(Frame::Seq {
                            items,
                            weight,
                            line,
                            col,
                            anchor,
                        }) => (
                            Node {
                                kind: NodeKind::Seq(items),
                                line,
                                col,
                            },
                            weight,
                            anchor,
                        ),
                        Some(Frame::Map {
                            entries,
                            weight,
                            line,
                            col,
                            anchor,
                            ..
                        }) => (
                            Node {
                                kind: NodeKind::Map(entries),
                                line,
                                col,
                            },
                            weight,
                            anchor,
                        ),
                        None => return Err(err("unbalanced collection end".into())),
                    };
                    self.keep_anchor(anchor, &node, weight, line, col)?;
                    self.emit(node, weight, &mut root, line, col)?;
                }
            }
        }
        Ok(root.unwrap_or(Node {
            kind: NodeKind::Scalar(Scalar {
                text: String::new(),
                plain: true,
                tag: None,
            }),
            line: 1,
            col: 1,
        }))
    }

    fn count(&mut self, w: Weight, line: usize, col: usize) -> Result<(), LoadError> {
        charge(&mut self.built, &self.limits, w, line, col)
    }

    /// Keeps a copy of an anchored value for its aliases; the copy is charged like the value.
    fn keep_anchor(
        &mut self,
        anchor: usize,
        node: &Node,
        weight: Weight,
        line: usize,
        col: usize,
    ) -> Result<(), LoadError> {
        if anchor > 0 {
            self.count(weight, line, col)?;
            self.anchors.insert(anchor, (node.clone(), weight));
        }
        Ok(())
    }

    fn open(&mut self, line: usize, col: usize) -> Result<(), LoadError> {
        self.count(Weight { nodes: 1, bytes: 0 }, line, col)?;
        if self.stack.len() >= self.limits.max_depth {
            return Err(LoadError {
                line,
                col,
                message: format!("collections nest deeper than {} levels", self.limits.max_depth),
            });
        }
        Ok(())
    }

    fn emit(
        &mut self,
        node: Node,
        node_weight: Weight,
        root: &mut Option<Node>,
        line: usize,
        col: usize,
    ) -> Result<(), LoadError> {
        match self.stack.last_mut() {
            None => {
                *root = Some(node);
                Ok(())
            }
            Some(Frame::Seq { items, weight, .. }) => {
                *weight = weight.plus(node_weight);
                items.push(node);
                Ok(())
            }
            Some(Frame::Map {
                entries,
                keys,
                pending_key,
                weight,
                ..
            }) => match pending_key.take() {
                None => {
                    let key = match &node.kind {
                        NodeKind::Scalar(s) => s.text.clone(),
                        _ => {
                            return Err(LoadError {
                                line,
                                col,
                                message: "a mapping key must be a plain value, not a list or mapping".into(),
                            });
                        }
                    };
                    if !keys.insert(key.clone()) {
                        return Err(LoadError {
                            line,
                            col,
                            message: format!("duplicate key `{key}` in one mapping"),
                        });
                    }
                    *weight = weight.plus(node_weight);
                    *pending_key = Some((key, line, col));
                    Ok(())
                }
                Some((key, _, _)) => {
                    *weight = weight.plus(node_weight);
                    entries.push((key, node));
                    Ok(())
                }
            },
        }
    }
}

/// Adds `w` to what the document has built; refuses once either budget is passed.
fn charge(built: &mut Weight, limits: &Limits, w: Weight, line: usize, col: usize) -> Result<(), LoadError> {
    *built = built.plus(w);
    let message = if built.nodes > limits.max_nodes {
        format!(
            "the document expands to more than {} values (aliases included)",
            limits.max_nodes
        )
    } else if built.bytes > limits.max_expanded_bytes {
        format!(
            "the document expands to more than {} bytes of text (aliases included)",
            limits.max_expanded_bytes
        )
    } else {
        return Ok(());
    };
    Err(LoadError { line, col, message })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scalar(text: &str) -> Resolved {
        Scalar {
            text: text.into(),
            plain: true,
            tag: None,
        }
        .resolve()
    }

    #[test]
    fn core_schema_resolution() {
        let table: &[(&str, Resolved)] = &[
            ("", Resolved::Null),
            ("~", Resolved::Null),
            ("null", Resolved::Null),
            ("true", Resolved::Bool(true)),
            ("False", Resolved::Bool(false)),
            ("yes", Resolved::Str),
            ("no", Resolved::Str),
            ("1", Resolved::Int(1)),
            ("-7", Resolved::Int(-7)),
            ("0x1f", Resolved::Int(31)),
            ("0o17", Resolved::Int(15)),
            ("1.10", Resolved::Float),
            ("1.0", Resolved::Float),
            (".5", Resolved::Float),
            ("1e3", Resolved::Float),
            (".inf", Resolved::Float),
            ("1.2.0", Resolved::Str),
            ("0.3.0", Resolved::Str),
            ("latest", Resolved::Str),
            ("1e", Resolved::Str),
        ];
        for (t, want) in table {
            assert_eq!(&scalar(t), want, "{t:?}");
        }
        let quoted = Scalar {
            text: "1".into(),
            plain: false,
            tag: None,
        };
        assert_eq!(quoted.resolve(), Resolved::Str);
    }

    #[test]
    fn keeps_spelling_positions_and_null_values() {
        let n = load("a: 1.10\nb:\nc: [x, 'y']\n", Limits::default()).unwrap();
        let a = n.get("a").unwrap();
        assert_eq!(a.as_scalar().unwrap().text, "1.10");
        assert_eq!(a.shape(), "a number");
        assert_eq!((a.line, a.col), (1, 4));
        assert!(n.get("b").is_none(), "a key with no value reads as absent");
        assert_eq!(n.get("c").unwrap().as_seq().unwrap().len(), 2);
    }

    #[test]
    fn hostile_documents_are_refused() {
        let limits = Limits {
            max_bytes: 1 << 20,
            max_depth: 64,
            max_nodes: 10_000,
            max_expanded_bytes: 4 << 20,
        };
        let deep = "[".repeat(100) + &"]".repeat(100);
        assert!(load(&deep, limits).unwrap_err().message.contains("nest deeper"));
        // Far deeper input is stopped by the parser's own recursion guard before we see it.
        let deeper = "[".repeat(100_000);
        assert!(load(&deeper, limits).is_err());
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..8 {
            let prev = if i == 0 { "a".to_string() } else { format!("l{}", i - 1) };
            bomb.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        assert!(
            load(&bomb, limits)
                .unwrap_err()
                .message
                .contains("expands to more than")
        );
        assert!(
            load("a: 1\na: 2\n", limits)
                .unwrap_err()
                .message
                .contains("duplicate key")
        );
        assert!(load("a: [1\n", limits).is_err());
        assert!(
            load("---\na: 1\n---\nb: 2\n", limits)
                .unwrap_err()
                .message
                .contains("second")
        );
        let big = "a".repeat(2 << 20);
        assert!(load(&big, Limits::default()).unwrap_err().message.contains("larger"));
    }

    /// Limits whose expansion budgets are `nodes` and `bytes`.
    fn budget(nodes: usize, bytes: usize) -> Limits {
        Limits {
            max_nodes: nodes,
            max_expanded_bytes: bytes,
            ..Limits::default()
        }
    }

    /// A refusal's message (a part of it), line and column; `None` when the document loads.
    type Refusal = Option<(&'static str, usize, usize)>;

    /// Every alias is charged its whole value, nested or not, and so is each anchor's copy.
    /// Each row: document, node budget, byte budget, `None` when it loads or the refusal's
    /// message and position.
    #[test]
    fn aliases_are_charged_what_they_expand_to() {
        // Map 1 + `a` 1 + `xxxx` 1 (4 bytes) + its anchor copy 1 (4) + `b` 1 + alias 1 (4):
        // 6 nodes, 1 + 4 + 4 + 1 + 4 = 14 bytes.
        let one = "a: &a xxxx\nb: *a\n";
        // `l0` is 2 nodes and 4 bytes; `l1` holds two of them: 5 nodes, 8 bytes; `l2` holds
        // two `l1`: 11 nodes, 16 bytes. Built: map 1, keys 3 (6 bytes), l0 2+2 (8), l1 5+5 (16),
        // l2 11 (16): 29 nodes, 46 bytes.
        let nested = "l0: &l0 [abcd]\nl1: &l1 [*l0, *l0]\nl2: [*l1, *l1]\n";
        // An alias of a collection that itself holds an alias of an alias-holding collection.
        let chain = "a: &a [xy]\nb: &b [*a]\nc: &c [*b]\nd: *c\n";
        let big = format!(
            "a: &a {}\nb: [{}]\n",
            "x".repeat(100_000),
            vec!["*a"; 30_000].join(", ")
        );
        let table: Vec<(&str, usize, usize, Refusal)> = vec![
            (one, 6, 14, None),
            (one, 6, 13, Some(("more than 13 bytes of text", 2, 4))),
            (one, 5, 14, Some(("more than 5 values", 2, 4))),
            (nested, 29, 46, None),
            (nested, 29, 45, Some(("more than 45 bytes of text", 3, 11))),
            (nested, 28, 46, Some(("more than 28 values", 3, 11))),
            // An anchor's copy is charged when the anchored value ends.
            // Map 1, `k` 1 (1), list 2 (1), its copy 2 (1): 6 nodes, 3 bytes.
            ("k: &a [x]\n", 6, 3, None),
            ("k: &a [x]\n", 6, 2, Some(("more than 2 bytes of text", 1, 9))),
            // Map 1, keys 4 (4), a 2+2 (4), b 3+3 (4), c 4+4 (4), d 4 (2): 27 nodes, 18 bytes.
            (chain, 27, 18, None),
            (chain, 26, 18, Some(("more than 26 values", 4, 4))),
            (chain, 27, 17, Some(("more than 17 bytes of text", 4, 4))),
            // The alias bomb of a manifest: the scalar and its anchor copy are 200 KB, so the 40th
            // alias passes 4 MiB.
            (
                &big,
                100_000,
                4 << 20,
                Some(("more than 4194304 bytes of text", 2, 161)),
            ),
            // An alias naming no anchor, and an anchor on an alias, are the parser's refusals.
            ("a: *nope\n", 100, 100, Some(("unknown anchor", 1, 4))),
            (
                "a: &a x\nb: &b *a\n",
                100,
                100,
                Some(("did not find expected key", 2, 7)),
            ),
        ];
        for (doc, nodes, bytes, want) in table {
            let got = load(doc, budget(nodes, bytes));
            let short = &doc[..doc.len().min(60)];
            match want {
                None => assert!(got.is_ok(), "{short:?} at ({nodes}, {bytes}): {got:?}"),
                Some((message, line, col)) => {
                    let e = got.expect_err(short);
                    assert!(e.message.contains(message), "{short:?}: {e}");
                    assert_eq!((e.line, e.col), (line, col), "{short:?}: {e}");
                }
            }
        }
        // What loads is what was charged: the nested document's values all arrive.
        let n = load(nested, budget(29, 46)).unwrap();
        let l2 = n.get("l2").unwrap().as_seq().unwrap();
        assert_eq!(l2.len(), 2);
        assert_eq!(l2[1].as_seq().unwrap()[1].as_seq().unwrap()[0].as_str(), Some("abcd"));
    }

    #[test]
    fn a_duplicate_key_is_found_in_a_large_mapping_at_its_position() {
        let mut doc: String = (0..40_000).map(|i| format!("k{i}: {i}\n")).collect();
        assert!(load(&doc, Limits::default()).is_ok());
        doc.push_str("k17: again\n");
        let e = load(&doc, Limits::default()).unwrap_err();
        assert_eq!(e.message, "duplicate key `k17` in one mapping");
        assert_eq!((e.line, e.col), (40_001, 1));
        let e = load("a:\n  x: 1\n  y: 2\n  x: 3\n", Limits::default()).unwrap_err();
        assert_eq!(
            (e.line, e.col, e.message.as_str()),
            (4, 3, "duplicate key `x` in one mapping")
        );
        // The same key in two mappings is no duplicate.
        assert!(load("a: {x: 1}\nb: {x: 2}\n", Limits::default()).is_ok());
    }
}
