//! Virtual peer addresses (docs/reference/capsules.md#what-the-host-grants,
//! docs/reference/capsules.md#calls-by-address): `http://<member>.formation.invalid` stands in for
//! a callee's real door everywhere a member looks (`MURMUR_FORMATION_PEERS`, traces, the text a
//! model sees). Built and read here only, so the executor that announces them, the output that
//! redacts real URLs into them and the wasi:http hook that routes them agree on one spelling.

use crate::names;

/// The reserved domain every virtual peer address is under (`.invalid` never resolves).
pub const DOMAIN: &str = "formation.invalid";

/// The virtual address of `member`: `http://<member>.formation.invalid`.
pub fn url(member: &str) -> String {
    format!("http://{member}.{DOMAIN}")
}

/// The `MURMUR_FORMATION_PEERS` value for `callees`
/// (docs/reference/capsules.md#what-the-host-grants): `<name>=<virtual address>` pairs, single
/// spaces, in the given (roster) order; `None` when there are none, as the variable is never set
/// empty.
pub fn peers_env<S: AsRef<str>>(callees: &[S]) -> Option<String> {
    (!callees.is_empty()).then(|| {
        callees
            .iter()
            .map(|c| format!("{}={}", c.as_ref(), url(c.as_ref())))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The member a request target names, when it is a virtual peer address that may be routed:
/// scheme `http` (already lowercased by the caller's URL reading, or compared here without case),
/// authority exactly `<member>.formation.invalid` — lowercase, no port, no userinfo — and the
/// member a valid member name.
pub fn member<'a>(scheme: &str, authority: &'a str) -> Option<&'a str> {
    if !scheme.eq_ignore_ascii_case("http") {
        return None;
    }
    let name = authority.strip_suffix(DOMAIN)?.strip_suffix('.')?;
    names::is_member(name).then_some(name)
}

/// The member an absolute URL such as `http://coder.formation.invalid/a?b` names, by [`member`]
/// over its scheme and authority.
pub fn member_of_url(url: &str) -> Option<&str> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    member(scheme, &rest[..end])
}

/// Whether `host` is `formation.invalid` or under it, ASCII case-insensitively: a request to such
/// a host is never sent as written, whether or not it names a member.
pub fn is_formation_host(host: &str) -> bool {
    let h = host.to_ascii_lowercase();
    h == DOMAIN || h.strip_suffix(DOMAIN).is_some_and(|rest| rest.ends_with('.'))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Member names at the edges of `^[a-z][a-z0-9-]{0,31}$`.
    const MEMBERS: &[&str] = &[
        "a",
        "x",
        "coder",
        "code-reviewer",
        "a1",
        "a-",
        "a--b",
        "z9-9z",
        "abcdefghijklmnopqrstuvwxyz012345",
    ];

    #[test]
    fn every_member_round_trips() {
        for m in MEMBERS {
            assert!(names::is_member(m), "{m}");
            let u = url(m);
            assert!(u.ends_with(".formation.invalid"), "{u}");
            assert_eq!(member_of_url(&u), Some(*m), "{u}");
            assert_eq!(member_of_url(&format!("{u}/rpc?x=1")), Some(*m), "{u}");
            assert!(is_formation_host(&u["http://".len()..]), "{u}");
        }
    }

    #[test]
    fn foreign_and_malformed_addresses_are_refused() {
        let table: &[(&str, Option<&str>)] = &[
            ("http://coder.formation.invalid/", Some("coder")),
            ("HTTP://coder.formation.invalid", Some("coder")),
            ("https://coder.formation.invalid/", None),
            ("http://coder.formation.invalid:80/", None),
            ("http://u@coder.formation.invalid/", None),
            ("http://Coder.formation.invalid/", None),
            ("http://coder.FORMATION.INVALID/", None),
            ("http://a.b.formation.invalid/", None),
            ("http://1a.formation.invalid/", None),
            ("http://.formation.invalid/", None),
            ("http://formation.invalid/", None),
            ("http://coderformation.invalid/", None),
            ("http://coder.formation.invalid.example.com/", None),
            ("http://coder.formation.invalid./", None),
            ("http://localhost:4242/", None),
            ("http://example.com/coder.formation.invalid", None),
            ("coder.formation.invalid", None),
        ];
        for (u, want) in table {
            assert_eq!(member_of_url(u), *want, "{u}");
        }
        let hosts: &[(&str, bool)] = &[
            ("formation.invalid", true),
            ("FORMATION.invalid", true),
            ("coder.formation.invalid", true),
            ("a.b.formation.invalid", true),
            ("coderformation.invalid", false),
            ("formation.invalid.example.com", false),
            ("invalid", false),
            ("localhost", false),
        ];
        for (h, want) in hosts {
            assert_eq!(is_formation_host(h), *want, "{h}");
        }
    }

    #[test]
    fn peers_env_is_pairs_in_order() {
        assert_eq!(peers_env::<&str>(&[]), None);
        assert_eq!(
            peers_env(&["coder", "tester"]).as_deref(),
            Some("coder=http://coder.formation.invalid tester=http://tester.formation.invalid")
        );
    }

    proptest! {
        /// Every name the member grammar accepts round-trips; every other label is refused.
        #[test]
        fn any_member_name_round_trips(name in "[a-z][a-z0-9-]{0,31}") {
            prop_assert!(names::is_member(&name));
            let u = url(&name);
            prop_assert_eq!(member_of_url(&u), Some(name.as_str()));
        }

        #[test]
        fn only_member_names_are_read(label in "[A-Za-z0-9._@:-]{0,40}") {
            let got = member("http", &format!("{label}.formation.invalid")).is_some();
            prop_assert_eq!(got, names::is_member(&label));
        }
    }
}
