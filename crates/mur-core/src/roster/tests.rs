//! Table-driven tests of check 1 (every docs/reference/roster.md#admission-in-order text), checks
//! 2–8, edges and W-ROS-001.

use std::collections::HashMap;
use std::path::PathBuf;

use super::admit::{Bound, PinView, admit_with};
use super::*;
use crate::diag::{self, Code, Diagnostic};
use crate::manifest::Acceptance;

const FIELDS_HINT: &str = "correct the key named above in roster.yaml — docs/reference/roster.md#keys lists every key, its type and whether it is required (`mur explain E-ROS-001`)";

const VALID: &str = "\
roster_version: 1
members:
  - name: planner
    capsule: local/planner
    version: 0.3.0
    entry: true
  - name: coder
    capsule: local/coder
    version: 1.2.0
  - name: reviewer
    capsule: local/reviewer
    version: 0.9.0
reachability:
  - from: planner
    to: [coder, reviewer]
  - from: reviewer
    to: [coder]
";

fn parse_str(s: &str) -> Result<Roster, Diagnostic> {
    parse(s.as_bytes())
}

fn refusal(s: &str) -> Diagnostic {
    match parse_str(s) {
        Ok(r) => panic!("expected a refusal for {s:?}, got {r:?}"),
        Err(d) => d,
    }
}

/// A roster of members `a`, `b`, `c` (`a` the entry) with the given reachability block.
fn abc(reach: &str) -> String {
    format!(
        "roster_version: 1\nmembers:\n  - {{name: a, capsule: local/a, version: '1', entry: true}}\n  - {{name: b, capsule: local/b, version: '1'}}\n  - {{name: c, capsule: local/c, version: '1'}}\n{reach}"
    )
}

const M0: &str = "roster_version: 1\nmembers:\n  - ";

#[test]
fn the_page_example_parses() {
    let r = parse_str(VALID).unwrap();
    assert_eq!(r.members.len(), 3);
    assert_eq!(r.members[0].name, "planner");
    assert_eq!(r.members[0].capsule.to_string(), "local/planner");
    assert_eq!(r.members[0].version, "0.3.0");
    assert!(r.members[0].entry);
    assert!(!r.members[1].entry);
    assert_eq!(
        r.reachability,
        Reachability::Rules(vec![
            Rule {
                from: "planner".into(),
                to: vec!["coder".into(), "reviewer".into()]
            },
            Rule {
                from: "reviewer".into(),
                to: vec!["coder".into()]
            },
        ])
    );
    check_structure(&r).unwrap();
}

#[test]
fn fields_rules_that_parse() {
    // (roster text, check on the parse result)
    type Check = fn(&Roster) -> bool;
    let table: &[(String, Check)] = &[
        // An unquoted number reads as its text; a boolean too.
        (
            format!("{M0}{{name: a, capsule: local/a, version: 1.10, entry: true}}\n"),
            |r| r.members[0].version == "1.10",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: 2, entry: true}}\n"),
            |r| r.members[0].version == "2",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: true, entry: true}}\n"),
            |r| r.members[0].version == "true",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1.0', entry: true}}\n"),
            |r| r.members[0].version == "1.0",
        ),
        // `key:` with no value is absent: entry defaults to false, reachability to none.
        (
            format!("{M0}name: a\n    capsule: local/a\n    version: '1'\n    entry:\nreachability:\n"),
            |r| !r.members[0].entry && r.reachability == Reachability::None,
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1', entry: ~}}\n"),
            |r| !r.members[0].entry,
        ),
        (abc("reachability: all\n"), |r| r.reachability == Reachability::All),
        (abc("reachability: []\n"), |r| {
            r.reachability == Reachability::Rules(vec![])
        }),
        (abc(""), |r| r.reachability == Reachability::None),
        // Duplicates inside one `to` are kept by the parser.
        (abc("reachability: [{from: a, to: [b, b, c]}]\n"), |r| {
            match &r.reachability {
                Reachability::Rules(rules) => rules[0].to == ["b", "b", "c"],
                _ => false,
            }
        }),
        // Two members may run the same capsule; a 32-character name is valid.
        (
            format!(
                "{M0}{{name: a, capsule: local/x, version: '1', entry: true}}\n  - {{name: {}, capsule: local/x, version: '1'}}\n",
                "b".repeat(32)
            ),
            |r| r.members[1].capsule == r.members[0].capsule,
        ),
        // `roster_version: 1` in another integer spelling is still the integer 1.
        (
            "roster_version: 0x1\nmembers:\n  - {name: a, capsule: local/a, version: '1', entry: true}\n".to_string(),
            |r| r.members.len() == 1,
        ),
    ];
    for (text, check) in table {
        let r = parse_str(text).unwrap_or_else(|d| panic!("{text:?}: {d}"));
        assert!(check(&r), "{text:?} parsed as {r:?}");
    }
}

#[test]
fn every_parser_message() {
    let long = "x".repeat(100);
    let table: Vec<(String, &str)> = vec![
        // YAML syntax
        (
            "roster_version: 1\nmembers: [\n".into(),
            "roster.yaml: YAML syntax error at line 3, column 1: ",
        ),
        (
            "a: 1\na: 2\n".into(),
            "roster.yaml: YAML syntax error at line 2, column 1: duplicate key `a` in one mapping",
        ),
        // top-level shape
        (
            "- 1\n".into(),
            "roster.yaml: must be a mapping with `roster_version` and `members`, found a list",
        ),
        (
            "hello\n".into(),
            "roster.yaml: must be a mapping with `roster_version` and `members`, found a string",
        ),
        (
            "".into(),
            "roster.yaml: must be a mapping with `roster_version` and `members`, found nothing",
        ),
        // top-level unknown keys: the alphabetically first, before roster_version is looked at
        (
            "zeta: 1\nalpha: 2\nroster_version: 9\n".into(),
            "roster.yaml: alpha: unknown key; the top level accepts only `members`, `reachability`, `roster_version`",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1', entry: true}}\nextra:\n"),
            "roster.yaml: extra: unknown key; the top level accepts only `members`, `reachability`, `roster_version`",
        ),
        // roster_version
        ("members: []\n".into(), "roster.yaml: roster_version: is required"),
        (
            "roster_version:\nmembers: []\n".into(),
            "roster.yaml: roster_version: is required",
        ),
        (
            "roster_version: '1'\n".into(),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; found a string",
        ),
        (
            "roster_version: 1.0\n".into(),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; found a number",
        ),
        (
            "roster_version: 2\n".into(),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; found an integer",
        ),
        (
            "roster_version: true\n".into(),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; found a boolean",
        ),
        (
            "roster_version: [1]\n".into(),
            "roster.yaml: roster_version: must be 1, the only roster format this build reads; found a list",
        ),
        // members
        ("roster_version: 1\n".into(), "roster.yaml: members: is required"),
        (
            "roster_version: 1\nmembers:\n".into(),
            "roster.yaml: members: is required",
        ),
        (
            "roster_version: 1\nmembers: []\n".into(),
            "roster.yaml: members: must list at least one member",
        ),
        (
            "roster_version: 1\nmembers: {a: 1}\n".into(),
            "roster.yaml: members: must be a list of members, found a mapping",
        ),
        (
            "roster_version: 1\nmembers: planner\n".into(),
            "roster.yaml: members: must be a list of members, found a string",
        ),
        (
            format!("{M0}planner\n"),
            "roster.yaml: members[0]: must be a mapping with `name`, `capsule` and `version`, found a string",
        ),
        // member unknown keys: labelled when the name is valid, alphabetically first
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1', role: x, kind: y}}\n"),
            "roster.yaml: members[0].kind (member 'a'): unknown key; `members[0]` accepts only `capsule`, `entry`, `name`, `version`",
        ),
        (
            format!("{M0}{{name: A, role: x}}\n"),
            "roster.yaml: members[0].role: unknown key; `members[0]` accepts only `capsule`, `entry`, `name`, `version`",
        ),
        // An unknown key is refused even with no value.
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1', role: }}\n"),
            "roster.yaml: members[0].role (member 'a'): unknown key; `members[0]` accepts only `capsule`, `entry`, `name`, `version`",
        ),
        // name
        (
            format!("{M0}{{capsule: local/a, version: '1'}}\n"),
            "roster.yaml: members[0].name: is required",
        ),
        (
            format!("{M0}{{name: , capsule: local/a}}\n"),
            "roster.yaml: members[0].name: is required",
        ),
        (
            format!("{M0}{{name: Planner}}\n"),
            "roster.yaml: members[0].name: 'Planner' must start with a lowercase letter; a member name matches ^[a-z][a-z0-9-]{0,31}$",
        ),
        (
            format!("{M0}{{name: a_b}}\n"),
            "roster.yaml: members[0].name: 'a_b' may hold only lowercase letters, digits and '-'; a member name matches ^[a-z][a-z0-9-]{0,31}$",
        ),
        (
            format!("{M0}{{name: {}}}\n", "a".repeat(33)),
            "roster.yaml: members[0].name: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa' is longer than 32 characters; a member name matches ^[a-z][a-z0-9-]{0,31}$",
        ),
        (
            format!("{M0}{{name: ''}}\n"),
            "roster.yaml: members[0].name: '' is empty; a member name matches ^[a-z][a-z0-9-]{0,31}$",
        ),
        (
            format!("{M0}{{name: 7}}\n"),
            "roster.yaml: members[0].name: must be a member name, found an integer",
        ),
        (
            format!("{M0}{{name: true}}\n"),
            "roster.yaml: members[0].name: must be a member name, found a boolean",
        ),
        // capsule
        (
            format!("{M0}{{name: a, version: '1'}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): is required",
        ),
        (
            format!("{M0}{{name: a, capsule: a/b/c}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): 'a/b/c' is not a full artifact name: expected exactly one '/', between the scope and the name",
        ),
        (
            format!("{M0}{{name: a, capsule: Local/a}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): 'Local/a' is not a full artifact name: the scope may hold only lowercase letters, digits and '-'",
        ),
        (
            format!("{M0}{{name: a, capsule: local/-a}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): 'local/-a' is not a full artifact name: the name must not start or end with '-'",
        ),
        (
            format!("{M0}{{name: a, capsule: local/{long}x}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): 'local/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…' is not a full artifact name: the name is longer than 100 characters",
        ),
        (
            format!("{M0}{{name: a, capsule: 'Crew Lead'}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): 'Crew Lead' is not a full artifact name: expected exactly one '/', between the scope and the name",
        ),
        (
            format!("{M0}{{name: a, capsule: 12}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): must be a full artifact name, found an integer",
        ),
        (
            format!("{M0}{{name: a, capsule: [x]}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): must be a full artifact name, found a list",
        ),
        // version
        (
            format!("{M0}{{name: a, capsule: local/a}}\n"),
            "roster.yaml: members[0].version (member 'a'): is required",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: }}\n"),
            "roster.yaml: members[0].version (member 'a'): is required",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: ''}}\n"),
            "roster.yaml: members[0].version (member 'a'): must not be blank; a member pins an exact version",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: '   '}}\n"),
            "roster.yaml: members[0].version (member 'a'): must not be blank; a member pins an exact version",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: latest}}\n"),
            "roster.yaml: members[0].version (member 'a'): 'latest' is a reserved alias, not an exact version; pin the version the member runs",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: Stable}}\n"),
            "roster.yaml: members[0].version (member 'a'): 'Stable' is a reserved alias, not an exact version; pin the version the member runs",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: \"EDGE\"}}\n"),
            "roster.yaml: members[0].version (member 'a'): 'EDGE' is a reserved alias, not an exact version; pin the version the member runs",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: [1]}}\n"),
            "roster.yaml: members[0].version (member 'a'): must be a version string, found a list",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: {{v: 1}}}}\n"),
            "roster.yaml: members[0].version (member 'a'): must be a version string, found a mapping",
        ),
        // entry
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1', entry: yes}}\n"),
            "roster.yaml: members[0].entry (member 'a'): must be true or false, found a string",
        ),
        (
            format!("{M0}{{name: a, capsule: local/a, version: '1', entry: 1}}\n"),
            "roster.yaml: members[0].entry (member 'a'): must be true or false, found an integer",
        ),
        // reachability
        (
            abc("reachability: everyone\n"),
            "roster.yaml: reachability: 'everyone' is not a reachability; write `all` or a list of rules",
        ),
        (
            abc("reachability: All\n"),
            "roster.yaml: reachability: 'All' is not a reachability; write `all` or a list of rules",
        ),
        (
            abc("reachability: 3\n"),
            "roster.yaml: reachability: must be `all` or a list of rules, found an integer",
        ),
        (
            abc("reachability: true\n"),
            "roster.yaml: reachability: must be `all` or a list of rules, found a boolean",
        ),
        (
            abc("reachability: {from: a}\n"),
            "roster.yaml: reachability: must be `all` or a list of rules, found a mapping",
        ),
        (
            abc("reachability: [a]\n"),
            "roster.yaml: reachability[0]: must be a rule with `from` and `to`, found a string",
        ),
        (
            abc("reachability: [{from: a, to: [b], via: c, also: d}]\n"),
            "roster.yaml: reachability[0].also: unknown key; `reachability[0]` accepts only `from`, `to`",
        ),
        (
            abc("reachability: [{to: [b]}]\n"),
            "roster.yaml: reachability[0].from: is required",
        ),
        (
            abc("reachability: [{from: 5, to: [b]}]\n"),
            "roster.yaml: reachability[0].from: must be a member name, found an integer",
        ),
        (
            abc("reachability: [{from: a}]\n"),
            "roster.yaml: reachability[0].to: is required",
        ),
        (
            abc("reachability: [{from: a, to: }]\n"),
            "roster.yaml: reachability[0].to: is required",
        ),
        (
            abc("reachability: [{from: a, to: []}]\n"),
            "roster.yaml: reachability[0].to: must list at least one member",
        ),
        (
            abc("reachability: [{from: a, to: b}]\n"),
            "roster.yaml: reachability[0].to: must be a list of member names, found a string",
        ),
        (
            abc("reachability: [{from: a, to: [b, 1]}]\n"),
            "roster.yaml: reachability[0].to[1]: must be a member name, found an integer",
        ),
        (
            abc("reachability: [{from: a, to: [b, [c]]}]\n"),
            "roster.yaml: reachability[0].to[1]: must be a member name, found a list",
        ),
        (
            abc("reachability: [{from: a, to: [b]}, {from: b, to: [c, b]}]\n"),
            "roster.yaml: reachability[1].to[1]: lists 'b', the rule's own `from`; a member never calls itself",
        ),
        // Self-call is a parser fault (E-ROS-001), even for a from that is not a member.
        (
            abc("reachability: [{from: zz, to: [zz]}]\n"),
            "roster.yaml: reachability[0].to[0]: lists 'zz', the rule's own `from`; a member never calls itself",
        ),
    ];
    for (text, want) in &table {
        let d = refusal(text);
        assert_eq!(d.code, diag::E_ROS_001, "{text:?}");
        if want.ends_with(": ") {
            assert!(
                d.message.starts_with(want),
                "{text:?}:\n got  {}\n want {want}…",
                d.message
            );
        } else {
            assert_eq!(d.message, *want, "{text:?}");
        }
        assert_eq!(d.hint(), Some(FIELDS_HINT), "{text:?}");
    }
}

#[test]
fn bare_capsule_names_get_their_own_hint() {
    let table = [
        (
            "crew-lead",
            "name it with its scope: 'murmur/crew-lead' for a Murmur default artifact, '<owner>/crew-lead' for one published from github.com/<owner>, or 'local/crew-lead' for one installed from a .mur.zip file",
        ),
        (
            "murmur-coder",
            "name it with its scope: 'murmur/coder' for a Murmur default artifact, '<owner>/murmur-coder' for one published from github.com/<owner>, or 'local/murmur-coder' for one installed from a .mur.zip file",
        ),
    ];
    for (bare, hint) in table {
        let d = refusal(&format!(
            "{M0}{{name: lead, capsule: {bare}, version: '1', entry: true}}\n"
        ));
        assert_eq!(d.code, diag::E_ROS_001);
        assert_eq!(
            d.message,
            format!(
                "roster.yaml: members[0].capsule (member 'lead'): '{bare}' is not a full artifact name: an artifact is named <scope>/<name>"
            )
        );
        assert_eq!(d.hint(), Some(hint));
    }
}

#[test]
fn first_fault_wins_in_the_stated_order() {
    let table: Vec<(String, &str)> = vec![
        // unknown top-level key before a bad roster_version
        ("roster_version: 2\nfoo: 1\n".into(), "roster.yaml: foo: unknown key"),
        // roster_version before members
        (
            "roster_version: 2\nmembers: 1\n".into(),
            "roster.yaml: roster_version: ",
        ),
        // members before reachability
        (
            "roster_version: 1\nmembers: []\nreachability: 5\n".into(),
            "roster.yaml: members: must list",
        ),
        // member 0 before member 1
        (
            format!("{M0}{{name: a, version: latest}}\n  - {{name: B}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): is required",
        ),
        // within a member: unknown keys, name, capsule, version, entry
        (
            format!("{M0}{{name: A, capsule: x, version: latest, entry: 3, zz: 1}}\n"),
            "roster.yaml: members[0].zz: unknown key",
        ),
        (
            format!("{M0}{{name: A, capsule: x, version: latest, entry: 3}}\n"),
            "roster.yaml: members[0].name: 'A'",
        ),
        (
            format!("{M0}{{name: a, capsule: x, version: latest, entry: 3}}\n"),
            "roster.yaml: members[0].capsule (member 'a'): 'x'",
        ),
        (
            format!("{M0}{{name: a, capsule: l/x, version: latest, entry: 3}}\n"),
            "roster.yaml: members[0].version (member 'a'): 'latest'",
        ),
        (
            format!("{M0}{{name: a, capsule: l/x, version: '1', entry: 3}}\n"),
            "roster.yaml: members[0].entry (member 'a'):",
        ),
        // every member before reachability
        (
            format!("{M0}{{name: a, capsule: l/x, version: '1', entry: 3}}\nreachability: 5\n"),
            "roster.yaml: members[0].entry",
        ),
        // within a rule: shape, unknown keys, from, to, self-call; rules in order
        (
            abc("reachability: [{from: a, to: [a]}, 7]\n"),
            "roster.yaml: reachability[0].to[0]: lists 'a'",
        ),
        (
            abc("reachability: [{from: 1, to: [a], x: 1}]\n"),
            "roster.yaml: reachability[0].x: unknown key",
        ),
        (
            abc("reachability: [{from: 1, to: 2}]\n"),
            "roster.yaml: reachability[0].from: ",
        ),
        (
            abc("reachability: [{from: a, to: [a, 2]}]\n"),
            "roster.yaml: reachability[0].to[1]: must be a member name",
        ),
    ];
    for (text, want) in &table {
        let d = refusal(text);
        assert_eq!(d.code, diag::E_ROS_001, "{text:?}");
        assert!(
            d.message.starts_with(want),
            "{text:?}:\n got  {}\n want {want}…",
            d.message
        );
    }
}

#[test]
fn hostile_input_is_e_ros_001_not_a_panic() {
    let deep = format!(
        "roster_version: 1\nmembers: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 0..9 {
        let prev = if i == 0 { "a".to_string() } else { format!("l{}", i - 1) };
        bomb.push_str(&format!(
            "l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
        ));
    }
    let huge = vec![b'#'; MAX_BYTES + 1];
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            deep.into_bytes(),
            "roster.yaml: YAML syntax error at line 2, column ",
        ),
        (bomb.into_bytes(), "roster.yaml: YAML syntax error at line "),
        (
            huge,
            "roster.yaml: YAML syntax error at line 1, column 1: the file is larger than 1048576 bytes",
        ),
        (
            b"roster_version: 1\nmembers:\n  - name: \xff\xfe\n".to_vec(),
            "roster.yaml: YAML syntax error at line 3, column 11: the file is not UTF-8 text",
        ),
        (
            b"\x00\x01\x02".to_vec(),
            "roster.yaml: YAML syntax error at line 1, column 1: the file holds the control character U+0000, which YAML does not allow",
        ),
        (
            // The YAML parser stops at a NUL: without the check the rest would be ignored.
            b"roster_version: 1\nmembers:\n  - {name: a, capsule: local/a, version: '1', entry: true}\n\x00reachability: 5\n".to_vec(),
            "roster.yaml: YAML syntax error at line 4, column 1: the file holds the control character U+0000, which YAML does not allow",
        ),
        (
            "roster_version: 1\nmembers: [\u{1b}[31m]\n".as_bytes().to_vec(),
            "roster.yaml: YAML syntax error at line 2, column 11: the file holds the control character U+001B, which YAML does not allow",
        ),
        (
            b"---\na: 1\n---\nb: 2\n".to_vec(),
            "roster.yaml: YAML syntax error at line 3, column 1: a file holds one YAML document",
        ),
        (
            b"roster_version: 1\nmembers: *nope\n".to_vec(),
            "roster.yaml: YAML syntax error at line 2, column ",
        ),
        (
            b"{[a]: 1}".to_vec(),
            "roster.yaml: YAML syntax error at line 1, column ",
        ),
    ];
    for (bytes, want) in cases {
        let started = std::time::Instant::now();
        let d = parse(&bytes).expect_err("hostile input must be refused");
        assert_eq!(d.code, diag::E_ROS_001);
        assert!(d.message.starts_with(want), "got {}\nwant {want}", d.message);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{want}: took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn control_characters_in_values_are_escaped() {
    let d = refusal(&format!("{M0}{{name: \"a\\nb\\u001b[31m\"}}\n"));
    assert_eq!(
        d.message,
        "roster.yaml: members[0].name: 'a\\nb\\u{1b}[31m' may hold only lowercase letters, digits and '-'; a member name matches ^[a-z][a-z0-9-]{0,31}$"
    );
}

#[test]
fn read_refuses_what_is_not_a_readable_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    std::fs::write(p("roster.yaml"), VALID).unwrap();
    assert_eq!(read(&p("roster.yaml")).unwrap().members.len(), 3);

    let absent = p("absent/roster.yaml");
    let d = read(&absent).unwrap_err();
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            diag::E_ROS_001,
            format!("roster.yaml not found at {}", absent.display()).as_str()
        )
    );
    // Not the "correct the key" hint: there is no file to correct.
    assert_eq!(
        d.hint(),
        Some(
            "run the command in the directory that holds roster.yaml, give its path (`--roster PATH`), or scaffold a formation with `mur new --roster NAME`"
        )
    );

    std::fs::create_dir(p("dir")).unwrap();
    let d = read(&p("dir")).unwrap_err();
    assert_eq!(
        d.message,
        format!(
            "failed to read roster.yaml at {}: it is a directory",
            p("dir").display()
        )
    );

    std::os::unix::fs::symlink(p("gone"), p("dangling")).unwrap();
    let d = read(&p("dangling")).unwrap_err();
    assert_eq!(
        d.message,
        format!(
            "failed to read roster.yaml at {}: it is a symbolic link to {}, which does not exist",
            p("dangling").display(),
            p("gone").display()
        )
    );

    // A FIFO would block a plain read forever.
    nix::unistd::mkfifo(&p("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let d = read(&p("fifo")).unwrap_err();
    assert_eq!(
        d.message,
        format!(
            "failed to read roster.yaml at {}: it is not a regular file",
            p("fifo").display()
        )
    );

    std::fs::write(p("huge"), vec![b'#'; MAX_BYTES + 1]).unwrap();
    let d = read(&p("huge")).unwrap_err();
    assert_eq!(
        d.message,
        format!(
            "failed to read roster.yaml at {}: the file is larger than 1048576 bytes",
            p("huge").display()
        )
    );

    // A symlink to a good file reads through.
    std::os::unix::fs::symlink(p("roster.yaml"), p("link")).unwrap();
    assert!(read(&p("link")).is_ok());

    // Unreadable: only meaningful when not running as root.
    if !nix::unistd::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(p("locked"), VALID).unwrap();
        std::fs::set_permissions(p("locked"), std::fs::Permissions::from_mode(0o000)).unwrap();
        let d = read(&p("locked")).unwrap_err();
        assert!(
            d.message
                .starts_with(&format!("failed to read roster.yaml at {}: ", p("locked").display())),
            "{}",
            d.message
        );
    }
}

// ---- checks 2–5 ----

fn structure_refusal(text: &str) -> Diagnostic {
    let r = parse_str(text).unwrap_or_else(|d| panic!("{text:?} should parse: {d}"));
    check_structure(&r).expect_err("expected a structural refusal")
}

fn members(list: &[(&str, bool)], reach: &str) -> String {
    let mut s = String::from("roster_version: 1\nmembers:\n");
    for (n, e) in list {
        s.push_str(&format!(
            "  - {{name: {n}, capsule: local/{n}, version: '1', entry: {e}}}\n"
        ));
    }
    s + reach
}

#[test]
fn every_structural_check_message() {
    let e008 = "roster.yaml: the reachability rule from 'b' lists the entry member 'a' in `to`, but the entry member is never called by a peer: it takes the formation's tasks from the launch or from a client at its door";
    let table: Vec<(String, Code, &str)> = vec![
        (
            members(&[("a", true), ("b", false), ("a", false), ("b", false)], ""),
            diag::E_ROS_003,
            "roster.yaml: member name 'a' is declared more than once",
        ),
        (
            members(
                &[("a", true), ("b", false), ("c", false), ("b", false), ("a", false)],
                "",
            ),
            diag::E_ROS_003,
            "roster.yaml: member name 'b' is declared more than once",
        ),
        (
            members(&[("a", false), ("b", false)], ""),
            diag::E_ROS_002,
            "roster.yaml: no member is marked `entry: true`; a roster designates exactly one entry member",
        ),
        (
            members(&[("a", true), ("b", false), ("c", true)], ""),
            diag::E_ROS_002,
            "roster.yaml: members 'a', 'c' are each marked `entry: true`; a roster designates exactly one entry member",
        ),
        (
            members(&[("a", true), ("b", true), ("c", true)], ""),
            diag::E_ROS_002,
            "roster.yaml: members 'a', 'b', 'c' are each marked `entry: true`; a roster designates exactly one entry member",
        ),
        (
            abc("reachability: [{from: a, to: [b]}, {from: x, to: [y]}]\n"),
            diag::E_ROS_004,
            "roster.yaml: the reachability rule from 'x' names 'x', which is not a member of this roster",
        ),
        (
            abc("reachability: [{from: a, to: [b, q, r]}]\n"),
            diag::E_ROS_004,
            "roster.yaml: the reachability rule from 'a' names 'q', which is not a member of this roster",
        ),
        (
            abc("reachability: [{from: b, to: [c]}, {from: b, to: [a]}, {from: c, to: [a]}]\n"),
            diag::E_ROS_008,
            e008,
        ),
    ];
    for (text, code, want) in &table {
        let d = structure_refusal(text);
        assert_eq!((d.code, d.message.as_str()), (*code, *want), "{text:?}");
        assert!(d.hint().is_some(), "{text:?}: every check has a hint");
    }
    let d = structure_refusal(&abc("reachability: [{from: b, to: [a]}]\n"));
    assert_eq!(
        d.hint(),
        Some("to have 'a' hand work to 'b', write `- from: a` with `to: [b]` instead")
    );
}

#[test]
fn structural_checks_run_in_order() {
    // 003 before 002, 002 before 004, 004 before 008.
    let table: Vec<(String, Code)> = vec![
        (
            members(&[("a", false), ("a", false)], "reachability: [{from: a, to: [zz]}]\n"),
            diag::E_ROS_003,
        ),
        (
            members(&[("a", true), ("b", true)], "reachability: [{from: b, to: [a, zz]}]\n"),
            diag::E_ROS_002,
        ),
        (
            members(
                &[("a", true), ("b", false)],
                "reachability: [{from: b, to: [a]}, {from: b, to: [zz]}]\n",
            ),
            diag::E_ROS_004,
        ),
        (
            members(&[("a", true), ("b", false)], "reachability: [{from: b, to: [a]}]\n"),
            diag::E_ROS_008,
        ),
    ];
    for (text, code) in &table {
        assert_eq!(structure_refusal(text).code, *code, "{text:?}");
    }
    // Checks 1–5 refuse with no store at all: the resolver is never asked.
    for (text, code) in &table {
        let r = parse_str(text).unwrap();
        let d = admit_with(&r, &mut |_, _| panic!("checks 1–5 read no store"), &|_| None, &|_| {
            Vec::new()
        })
        .unwrap_err();
        assert_eq!(d.code, *code);
    }
}

#[test]
fn check_structure_passes_all_and_empty_reachability() {
    for reach in ["", "reachability: all\n", "reachability: []\n", "reachability:\n"] {
        check_structure(&parse_str(&abc(reach)).unwrap()).unwrap();
    }
}

// ---- checks 6–8, with an in-memory store ----

struct Fake {
    /// (capsule, version) → (sha256, manifest text)
    store: HashMap<(String, String), (String, String)>,
    pins: HashMap<String, (String, Option<String>, bool)>,
}

fn sha(c: char) -> String {
    c.to_string().repeat(64)
}

/// A manifest declaring the given consent, authentication and lifecycle.
fn manifest(name: &str, accept: bool, auth: bool, lifecycle: &str) -> String {
    let mut s = format!("name: {name}\nversion: '1'\n");
    if accept {
        s.push_str("exports: {peer_tasks: {accept: true}}\n");
    }
    if auth {
        s.push_str("network: {authentication: {scheme: bearer}}\n");
    }
    if !lifecycle.is_empty() {
        s.push_str(&format!("lifecycle: {lifecycle}\n"));
    }
    s
}

impl Fake {
    fn new() -> Fake {
        Fake {
            store: HashMap::new(),
            pins: HashMap::new(),
        }
    }

    fn with(mut self, name: &str, accept: bool, auth: bool, lifecycle: &str) -> Fake {
        self.store.insert(
            (format!("local/{name}"), "1".into()),
            (sha('a'), manifest(name, accept, auth, lifecycle)),
        );
        self
    }

    fn raw(mut self, name: &str, manifest: &str) -> Fake {
        self.store
            .insert((format!("local/{name}"), "1".into()), (sha('a'), manifest.into()));
        self
    }

    fn pin(mut self, full: &str, version: &str, sha: Option<String>, platforms_only: bool) -> Fake {
        self.pins.insert(full.into(), (version.into(), sha, platforms_only));
        self
    }

    fn admit(&self, text: &str) -> Result<Admitted, Diagnostic> {
        let r = parse_str(text).unwrap_or_else(|d| panic!("{text:?} should parse: {d}"));
        admit_with(
            &r,
            &mut |name, version| {
                let key = (name.to_string(), version.to_string());
                match self.store.get(&key) {
                    Some((sha, m)) => Ok(Bound {
                        zip_path: PathBuf::from(format!("/store/{name}/{version}.mur.zip")),
                        sha256: sha.clone(),
                        manifest: m.clone().into_bytes(),
                    }),
                    None => Err("not installed in the project or global store".into()),
                }
            },
            &|full| {
                self.pins.get(full).map(|(v, s, p)| PinView {
                    version: v.clone(),
                    sha256: s.clone(),
                    platforms_only: *p,
                })
            },
            &|_| Vec::new(),
        )
    }
}

#[test]
fn every_store_check_message() {
    let e007_hint = "build the capsule's sources and install the archive — `mur build DIR && mur install -g DIR/b-1.mur.zip` (or `mur install` inside the project) — or change the member's version in roster.yaml to one `mur list` shows";
    let rules = abc("reachability: [{from: a, to: [b]}]\n");
    let none = abc("");
    let table: Vec<(Fake, &str, Code, &str, Option<&str>)> = vec![
        (
            Fake::new().with("a", true, true, ""),
            &none,
            diag::E_ROS_007,
            "roster.yaml: member 'b' (local/b@1) cannot be admitted: not installed in the project or global store",
            Some(e007_hint),
        ),
        (
            Fake::new()
                .with("a", true, true, "")
                .raw("b", "name: b\nversion: [1]\n")
                .with("c", true, true, ""),
            &none,
            diag::E_ROS_007,
            "roster.yaml: member 'b' (local/b@1) cannot be admitted: its packed murmur.yaml does not parse: murmur.yaml: version: must be a version string, found a list",
            Some(e007_hint),
        ),
        (
            Fake::new()
                .with("a", true, true, "")
                .with("b", true, true, "")
                .with("c", true, true, "")
                .pin("local/b", "2", None, false),
            &none,
            diag::E_REG_005,
            "roster.yaml: member 'b': murmur.lock conflict for 'local/b': pinned local/b@2, but local/b@1 was resolved",
            Some("pin the locked version (2) in roster.yaml, or drop the stale entry for 'local/b' from murmur.lock"),
        ),
        (
            Fake::new()
                .with("a", true, true, "")
                .with("b", true, true, "")
                .with("c", true, true, "")
                .pin("local/b", "1", Some(sha('b')), false),
            &none,
            diag::E_REG_005,
            "roster.yaml: member 'b': murmur.lock conflict for 'local/b': 'local/b' is pinned at sha256 bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb, but aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa was resolved",
            None,
        ),
        (
            Fake::new()
                .with("a", true, true, "")
                .with("b", true, true, "")
                .with("c", true, true, "")
                .pin("local/b", "1", None, true),
            &none,
            diag::E_REG_005,
            "roster.yaml: member 'b': murmur.lock conflict for 'local/b': 'local/b' is pinned only per platform (sha256.platforms without any), which this runtime cannot compare",
            None,
        ),
        (
            Fake::new()
                .with("a", false, true, "")
                .with("b", false, true, "")
                .with("c", false, true, ""),
            &rules,
            diag::E_ROS_005,
            "roster.yaml: member 'b' is listed in a reachability rule's `to`, but its manifest does not declare `exports.peer_tasks.accept: true`",
            Some(
                "declare `exports.peer_tasks.accept: true` in the murmur.yaml of local/b, then rebuild and reinstall it; or remove 'b' from every rule's `to`",
            ),
        ),
        (
            // c is on no edge and still needs authentication.
            Fake::new()
                .with("a", false, true, "")
                .with("b", true, true, "")
                .with("c", false, false, ""),
            &rules,
            diag::E_ROS_006,
            "roster.yaml: member 'c' declares no `network.authentication`, and this roster declares peer traffic, so every member's door must require authentication",
            Some(
                "declare `network.authentication: {scheme: bearer}` in the murmur.yaml of local/c, then rebuild and reinstall it; a capsule that authenticates cannot also declare capabilities.spawn.allow (E-MAN-003)",
            ),
        ),
    ];
    for (fake, text, code, want, hint) in table {
        let d = fake.admit(text).expect_err(want);
        assert_eq!((d.code, d.message.as_str()), (code, want));
        if let Some(h) = hint {
            assert_eq!(d.hint(), Some(h));
        }
        assert!(d.hint().is_some(), "{want}");
    }
}

#[test]
fn store_checks_run_in_order() {
    let rules = abc("reachability: [{from: a, to: [b]}]\n");
    // Check 6 takes member a through E-ROS-007 and E-REG-005 before member b.
    let f = Fake::new().with("a", true, true, "").pin("local/a", "9", None, false);
    assert_eq!(f.admit(&rules).unwrap_err().code, diag::E_REG_005);
    // E-ROS-007 of a member precedes its own lock check.
    let f = Fake::new().pin("local/a", "9", None, false);
    assert_eq!(f.admit(&rules).unwrap_err().code, diag::E_ROS_007);
    // Check 6 before 7, 7 before 8.
    let f = Fake::new().with("a", false, false, "").with("b", false, false, "");
    assert_eq!(f.admit(&rules).unwrap_err().code, diag::E_ROS_007);
    let f = Fake::new()
        .with("a", false, false, "")
        .with("b", false, false, "")
        .with("c", false, false, "");
    assert_eq!(f.admit(&rules).unwrap_err().code, diag::E_ROS_005);
    // E-ROS-005 names callees in roster order, not rule order.
    let text = abc("reachability: [{from: a, to: [c, b]}]\n");
    let f = Fake::new()
        .with("a", false, true, "")
        .with("b", false, true, "")
        .with("c", false, true, "");
    assert!(
        f.admit(&text)
            .unwrap_err()
            .message
            .starts_with("roster.yaml: member 'b' is listed")
    );
    // E-ROS-006 in roster order.
    let f = Fake::new()
        .with("a", false, false, "")
        .with("b", true, false, "")
        .with("c", true, true, "");
    assert!(
        f.admit(&rules)
            .unwrap_err()
            .message
            .starts_with("roster.yaml: member 'a' declares no")
    );
    // An unsafe version is never looked up.
    let text = format!("{M0}{{name: a, capsule: local/a, version: ../../x, entry: true}}\n");
    let r = parse_str(&text).unwrap();
    let d = admit_with(&r, &mut |_, _| panic!("never looked up"), &|_| None, &|_| Vec::new()).unwrap_err();
    assert_eq!(
        d.message,
        "roster.yaml: member 'a' (local/a@../../x) cannot be admitted: not installed in the project or global store"
    );
}

#[test]
fn admission_without_edges_needs_no_consent_or_authentication() {
    let f = Fake::new()
        .with("a", false, false, "")
        .with("b", false, false, "")
        .with("c", false, false, "");
    for reach in ["", "reachability: []\n", "reachability: all\n"] {
        let a = f.admit(&abc(reach)).unwrap_or_else(|d| panic!("{reach:?}: {d}"));
        assert!(!a.has_edges());
        assert!(a.warnings.is_empty());
    }
    // `all` that pairs only the entry with one consenting member still has no edge... unless
    // the entry consents too.
    let f = Fake::new()
        .with("a", false, false, "")
        .with("b", true, false, "")
        .with("c", false, false, "");
    assert!(!f.admit(&abc("reachability: all\n")).unwrap().has_edges());
}

#[test]
fn admitted_roster_binds_each_member() {
    let f = Fake::new()
        .with("a", false, true, "")
        .with("b", true, true, "")
        .with("c", true, true, "")
        .pin("local/b", "1", Some(sha('A')), false);
    let a = f
        .admit(&abc("reachability: [{from: a, to: [c, b, c]}, {from: b, to: [c]}]\n"))
        .unwrap();
    assert_eq!(a.entry(), 0);
    assert_eq!(a.edges, vec![(0, 1), (0, 2), (1, 2)]);
    assert_eq!(a.callees(0), vec![1, 2]);
    assert_eq!(a.callers(2), vec![0, 1]);
    assert_eq!(a.callers(0), Vec::<usize>::new());
    let b = &a.members[1];
    assert_eq!(
        (
            b.name.as_str(),
            b.capsule.to_string().as_str(),
            b.version.as_str(),
            b.entry
        ),
        ("b", "local/b", "1", false)
    );
    assert_eq!(b.sha256, sha('a'));
    assert_eq!(b.zip_path, PathBuf::from("/store/local/b/1.mur.zip"));
    assert!(b.manifest.peer_tasks_accept);
    assert!(a.members[0].entry);
    // c has two callers and holds one task: W-ROS-001.
    assert_eq!(a.warnings.len(), 1);
    assert_eq!(a.warnings[0].code, diag::W_ROS_001);
    assert_eq!(
        a.warnings[0].render(""),
        "warning[W-ROS-001]: roster.yaml lets 2 member(s) call 'c' (a, b), but it holds 1 task at once — lifecycle.task_acceptance: single — so a call that finds it full is offered again until its deadline; lifecycle.task_acceptance: queue with lifecycle.queue_depth: 1 would hold them all (`mur explain W-ROS-001`)"
    );
}

// ---- edges ----

#[test]
fn edges_for_every_reachability() {
    let decls = |n: usize| -> Vec<MemberDecl> {
        (0..n)
            .map(|i| MemberDecl {
                name: ["a", "b", "c", "d"][i].into(),
                capsule: crate::names::ArtifactName::local("x"),
                version: "1".into(),
                entry: i == 0,
            })
            .collect()
    };
    let rules = |rs: &[(&str, &[&str])]| {
        Reachability::Rules(
            rs.iter()
                .map(|(f, t)| Rule {
                    from: f.to_string(),
                    to: t.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
        )
    };
    type Case = (Reachability, usize, Vec<bool>, usize, Vec<(usize, usize)>);
    let table: Vec<Case> = vec![
        (Reachability::None, 3, vec![true; 3], 0, vec![]),
        (Reachability::Rules(vec![]), 3, vec![true; 3], 0, vec![]),
        // all: consenting pairs, never into the entry; the entry calls when it consents.
        (
            Reachability::All,
            3,
            vec![true; 3],
            0,
            vec![(0, 1), (0, 2), (1, 2), (2, 1)],
        ),
        (Reachability::All, 3, vec![false, true, true], 0, vec![(1, 2), (2, 1)]),
        (Reachability::All, 3, vec![true, true, false], 0, vec![(0, 1)]),
        (
            Reachability::All,
            4,
            vec![true, true, true, true],
            2,
            vec![(0, 1), (0, 3), (1, 0), (1, 3), (2, 0), (2, 1), (2, 3), (3, 0), (3, 1)],
        ),
        (Reachability::All, 1, vec![true], 0, vec![]),
        (Reachability::All, 2, vec![true, false], 0, vec![]),
        // rules: union, duplicates merged, sorted by from then to.
        (
            rules(&[("c", &["b"]), ("a", &["c", "b", "c"]), ("a", &["b"])]),
            3,
            vec![false; 3],
            0,
            vec![(0, 1), (0, 2), (2, 1)],
        ),
        (rules(&[("b", &["d", "c"])]), 4, vec![false; 4], 0, vec![(1, 2), (1, 3)]),
    ];
    for (reach, n, accepts, entry, want) in table {
        assert_eq!(
            edges::build(&reach, &decls(n), &accepts, entry),
            want,
            "{reach:?} {accepts:?}"
        );
    }
}

// ---- W-ROS-001 ----

#[test]
fn busy_callee_warning_texts() {
    let url = "(`mur explain W-ROS-001`)";
    type Case = (Acceptance, u32, &'static [&'static str], Option<(String, &'static str)>);
    let table: Vec<Case> = vec![
        (
            Acceptance::Queue,
            1,
            &["planner", "reviewer", "tester"],
            Some((
                format!(
                    "roster.yaml lets 3 member(s) call 'coder' (planner, reviewer, tester), but it holds 2 tasks at once — one running and lifecycle.queue_depth: 1 waiting — so a call that finds it full is offered again until its deadline; lifecycle.queue_depth: 2 would hold them all {url}"
                ),
                "coder (local/coder@1.2.0): set lifecycle.queue_depth: 2 in its murmur.yaml so all 3 members that may call it are held at once, or narrow its callers in roster.yaml (warning[W-ROS-001])",
            )),
        ),
        (Acceptance::Queue, 1, &["planner", "reviewer"], None),
        (
            Acceptance::Single,
            1,
            &["planner", "reviewer"],
            Some((
                format!(
                    "roster.yaml lets 2 member(s) call 'coder' (planner, reviewer), but it holds 1 task at once — lifecycle.task_acceptance: single — so a call that finds it full is offered again until its deadline; lifecycle.task_acceptance: queue with lifecycle.queue_depth: 1 would hold them all {url}"
                ),
                "coder (local/coder@1.2.0): set lifecycle.task_acceptance: queue and lifecycle.queue_depth: 1 in its murmur.yaml so all 2 members that may call it are held at once, or narrow its callers in roster.yaml (warning[W-ROS-001])",
            )),
        ),
        (Acceptance::Single, 1, &["planner"], None),
        (
            Acceptance::None,
            1,
            &["planner"],
            Some((
                format!(
                    "roster.yaml lets 1 member(s) call 'coder' (planner), but it holds no task — lifecycle.task_acceptance: none — so no call is ever taken; lifecycle.task_acceptance: queue with lifecycle.queue_depth: 1 would hold them all {url}"
                ),
                "coder (local/coder@1.2.0): set lifecycle.task_acceptance: queue and lifecycle.queue_depth: 1 in its murmur.yaml so the 1 member that may call it is held at once, or narrow its callers in roster.yaml (warning[W-ROS-001])",
            )),
        ),
        (Acceptance::None, 1, &[], None),
    ];
    for (acc, q, callers, want) in table {
        let got = warn::check(
            "coder",
            "local/coder@1.2.0",
            acc,
            q,
            callers.iter().map(|s| s.to_string()).collect(),
        );
        match (got, want) {
            (None, None) => {}
            (Some(o), Some((msg, fix))) => {
                assert_eq!(o.message(), msg);
                assert_eq!(o.diagnostic().render(""), format!("warning[W-ROS-001]: {msg}"));
                assert_eq!(o.fix(), fix);
            }
            (got, want) => panic!("{acc:?} {callers:?}: got {got:?}, want {want:?}"),
        }
    }
}

#[test]
fn busy_callee_warning_reads_each_lifecycle() {
    let f = Fake::new()
        .with("a", true, true, "")
        .with("b", true, true, "{task_acceptance: queue, queue_depth: 1}")
        .with("c", true, true, "{task_acceptance: none}");
    // all: a→b, a→c, b→c, c→b. b holds 2 (queue 1) with callers a, c: fine. c holds 0: warned.
    let a = f.admit(&abc("reachability: all\n")).unwrap();
    let msgs: Vec<&str> = a.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(msgs.len(), 1, "{msgs:?}");
    assert!(
        msgs[0].starts_with("roster.yaml lets 2 member(s) call 'c' (a, b), but it holds no task"),
        "{}",
        msgs[0]
    );
    assert_eq!(
        overflows(&a)[0].fix(),
        "c (local/c@1): set lifecycle.task_acceptance: queue and lifecycle.queue_depth: 1 in its murmur.yaml so all 2 members that may call it are held at once, or narrow its callers in roster.yaml (warning[W-ROS-001])"
    );
}

// ---- property tests ----

mod props {
    use proptest::prelude::*;

    use super::super::{check_structure, parse};
    use crate::diag;

    /// One line-level edit of a valid roster.
    #[derive(Debug, Clone)]
    enum Edit {
        Drop(usize),
        Duplicate(usize),
        Swap(usize, usize),
        Scalar(usize, String),
        Key(usize, String),
        Truncate(usize),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        let scalar = prop_oneof![
            Just("".to_string()),
            Just("~".to_string()),
            Just("all".to_string()),
            Just("latest".to_string()),
            Just("1.10".to_string()),
            Just("true".to_string()),
            Just("[a, b]".to_string()),
            Just("{x: 1}".to_string()),
            Just("'planner'".to_string()),
            Just("coder".to_string()),
            Just("local/coder".to_string()),
            Just("&a x".to_string()),
            Just("*a".to_string()),
            "[ -~]{0,12}",
        ];
        let key = prop_oneof![
            Just("name".to_string()),
            Just("entry".to_string()),
            Just("from".to_string()),
            Just("to".to_string()),
            Just("version".to_string()),
            Just("capsule".to_string()),
            Just("members".to_string()),
            Just("reachability".to_string()),
            Just("roster_version".to_string()),
            "[a-z_]{1,8}",
        ];
        prop_oneof![
            (0..32usize).prop_map(Edit::Drop),
            (0..32usize).prop_map(Edit::Duplicate),
            (0..32usize, 0..32usize).prop_map(|(a, b)| Edit::Swap(a, b)),
            (0..32usize, scalar).prop_map(|(i, s)| Edit::Scalar(i, s)),
            (0..32usize, key).prop_map(|(i, k)| Edit::Key(i, k)),
            (0..600usize).prop_map(Edit::Truncate),
        ]
    }

    fn apply(text: &str, edits: &[Edit]) -> String {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        for e in edits {
            let n = lines.len().max(1);
            match e {
                Edit::Drop(i) if !lines.is_empty() => {
                    lines.remove(i % n);
                }
                Edit::Duplicate(i) if !lines.is_empty() => {
                    let l = lines[i % n].clone();
                    lines.insert(i % n, l);
                }
                Edit::Swap(a, b) if !lines.is_empty() => lines.swap(a % n, b % n),
                Edit::Scalar(i, s) if !lines.is_empty() => {
                    let l = &mut lines[i % n];
                    if let Some(pos) = l.find(": ") {
                        l.truncate(pos + 2);
                        l.push_str(s);
                    }
                }
                Edit::Key(i, k) if !lines.is_empty() => {
                    let l = &mut lines[i % n];
                    if let Some(pos) = l.find(':') {
                        let indent = l.len() - l.trim_start_matches([' ', '-']).len();
                        let rest = l[pos..].to_string();
                        *l = format!("{}{k}{rest}", &l[..indent]);
                    }
                }
                Edit::Truncate(at) => {
                    let mut s = lines.join("\n");
                    let mut cut = (*at).min(s.len());
                    while !s.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    s.truncate(cut);
                    lines = s.lines().map(str::to_string).collect();
                }
                _ => {}
            }
        }
        lines.join("\n") + "\n"
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn edited_rosters_parse_or_refuse_with_e_ros_001(edits in proptest::collection::vec(edit(), 1..6)) {
            let text = apply(super::VALID, &edits);
            match parse(text.as_bytes()) {
                Ok(r) => {
                    let first = check_structure(&r);
                    prop_assert_eq!(&first, &check_structure(&r));
                    prop_assert_eq!(&first, &check_structure(&r.clone()));
                    if let Err(d) = first {
                        prop_assert!(
                            [diag::E_ROS_002, diag::E_ROS_003, diag::E_ROS_004, diag::E_ROS_008].contains(&d.code),
                            "{}", d
                        );
                        prop_assert!(d.message.starts_with("roster.yaml: "));
                    }
                }
                Err(d) => {
                    prop_assert_eq!(d.code, diag::E_ROS_001);
                    prop_assert!(d.message.starts_with("roster.yaml"), "{}", d.message);
                    prop_assert_eq!(&Err(d.clone()), &parse(text.as_bytes()).map(|_| ()));
                }
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            if let Err(d) = parse(&bytes) {
                prop_assert_eq!(d.code, diag::E_ROS_001);
            }
        }
    }
}

#[test]
fn members_of_one_capsule_share_one_lookup() {
    let text = "roster_version: 1\nmembers:\n  - {name: a, capsule: local/w, version: '1', entry: true}\n  - {name: b, capsule: local/w, version: '1'}\n  - {name: c, capsule: local/w, version: '1'}\n  - {name: d, capsule: local/w, version: '2'}\nreachability: [{from: a, to: [b, c, d]}]\n";
    let r = parse_str(text).unwrap();
    let mut lookups = Vec::new();
    let admitted = admit_with(
        &r,
        &mut |name, version| {
            lookups.push(format!("{name}@{version}"));
            Ok(Bound {
                zip_path: PathBuf::from("/store/w.mur.zip"),
                sha256: sha('a'),
                manifest: manifest("w", true, true, "").into_bytes(),
            })
        },
        &|_| None,
        &|_| Vec::new(),
    );
    assert!(admitted.is_ok(), "{:?}", admitted.err());
    assert_eq!(lookups, ["local/w@1", "local/w@2"]);
}

#[test]
fn callees_and_callers_of_each_member_are_those_of_asking_member_by_member() {
    // Edge lists in and out of order, with a repeat and an edge naming a member past the end.
    let table: Vec<(usize, Vec<(usize, usize)>)> = vec![
        (0, vec![]),
        (3, vec![]),
        (3, vec![(0, 1), (0, 2), (1, 2)]),
        (3, vec![(1, 2), (0, 2), (0, 1), (0, 2)]),
        (4, vec![(3, 0), (2, 0), (1, 0), (0, 3), (0, 9)]),
        (
            5,
            (0..5)
                .flat_map(|f| (0..5).filter(move |t| *t != f).map(move |t| (f, t)))
                .rev()
                .collect(),
        ),
    ];
    for (n, edges) in table {
        let callees = edges::callees_of_each(&edges, n);
        let callers = edges::callers_of_each(&edges, n);
        assert_eq!(callees.len(), n);
        assert_eq!(callers.len(), n);
        for i in 0..n {
            assert_eq!(callees[i], edges::callees(&edges, i), "callees of {i} in {edges:?}");
            assert_eq!(callers[i], edges::callers(&edges, i), "callers of {i} in {edges:?}");
        }
    }
}
