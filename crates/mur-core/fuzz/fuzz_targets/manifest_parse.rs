//! Fuzzes the `murmur.yaml` parser (docs/reference/manifest.md#keys).
//!
//! Properties: no panic, no hang, bounded memory; a refusal is E-MAN-001 or E-MAN-003; warnings
//! are only W-SEC-019; parsing is deterministic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::diag;
use mur_core::manifest::parse;

fuzz_target!(|data: &[u8]| {
    let first = parse(data);
    match &first {
        Err(d) => assert!([diag::E_MAN_001, diag::E_MAN_003].contains(&d.code), "{d}"),
        Ok(p) => {
            for w in &p.warnings {
                assert_eq!(w.code, diag::W_SEC_019, "{w}");
            }
        }
    }
    assert_eq!(parse(data), first);
});
