//! Fuzzes the address grammar behind virtual peer addresses and `capabilities.network.allow`
//! (docs/reference/capsules.md#calls-by-address, docs/reference/capsules.md#what-the-host-grants):
//! `split_url` (how a component's request target is read), `AllowRule` / `AllowList` (how allow
//! rules are read and matched) and `virtual_peer` (how `http://<member>.formation.invalid` is
//! read). `OutgoingTarget::from_url` (the `http::Uri` reading in `mur`'s `capsule/http.rs`) is
//! bound to wasmtime-wasi-http types and is not fuzzed here.
//!
//! Input: text; its first line is tried as a rule, the rest as a URL. Properties: no panic; a
//! rule that parses displays as a rule that parses to the same rule; a URL that splits is allowed
//! by a bare rule naming its host (a bare host matches every scheme and port, case-insensitively);
//! a URL read as a virtual peer address names a valid member, whose own address reads back to it,
//! and its host is under `formation.invalid` with no port.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::address::allow::{AllowList, AllowRule, split_url};
use mur_core::address::virtual_peer;
use mur_core::names;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (rule_text, url) = text.split_once('\n').unwrap_or((text, text));

    if let Ok(rule) = AllowRule::parse(rule_text) {
        let shown = rule.to_string();
        assert_eq!(
            AllowRule::parse(&shown).as_ref(),
            Ok(&rule),
            "{rule_text:?} -> {shown:?}"
        );
    }
    let list = AllowList::parse(&[rule_text]);
    assert_eq!(list.rules().len() + list.rejected().len(), 1);
    let _ = list.allows_url(url);

    if let Some(member) = virtual_peer::member_of_url(url) {
        assert!(names::is_member(member), "{url:?}");
        assert_eq!(virtual_peer::member_of_url(&virtual_peer::url(member)), Some(member));
        let split = split_url(url);
        assert!(
            split.is_some_and(|(_, host, port)| port.is_none() && virtual_peer::is_formation_host(host)),
            "{url:?} -> {split:?}"
        );
    }

    if let Some((scheme, host, port)) = split_url(url) {
        let bare = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_ascii_uppercase()
        };
        let rule = AllowRule::parse(&bare);
        assert!(rule.is_ok(), "{url:?}: host {host:?} split but {bare:?} is not a rule");
        if let Ok(rule) = rule {
            assert!(rule.matches(scheme, host, port), "{url:?}");
        }
    }
});
