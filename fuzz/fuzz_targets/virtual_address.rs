//! Fuzzes the address grammar behind virtual peer addresses and `capabilities.network.allow`
//! (runtime.md §12.2–§12.4): `split_url` (how a component's request target is read) and
//! `AllowRule` / `AllowList` (how allow rules are read and matched).
//!
//! `capsule::allow` is pure (std only) but sits behind the `runtime` feature with wasmtime, so the
//! file is included by path. `OutgoingTarget::from_url` (the `http::Uri` reading in
//! `capsule/http.rs`) is bound to wasmtime-wasi-http types and is not fuzzed here.
//!
//! Input: text; its first line is tried as a rule, the rest as a URL. Properties: no panic; a
//! rule that parses displays as a rule that parses to the same rule; a URL that splits is allowed
//! by a bare rule naming its host (a bare host matches every scheme and port, case-insensitively).

#![no_main]

#[allow(dead_code)]
#[path = "../../src/capsule/allow.rs"]
mod allow;

use allow::{AllowList, AllowRule, split_url};
use libfuzzer_sys::fuzz_target;

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
