//! Fuzzes the formation channel lines a member reads
//! (docs/reference/formation.md#the-formation-channel).
//!
//! Properties: no panic, bounded memory; a first line that parses writes back (`to_line`) as a
//! line that parses to the same value; token checks never panic; an address line that parses
//! writes back (`withdrawal_line`) as a line that parses to the same addresses and withdrawals.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::wire::channel_line::{FirstLine, parse_address_line, withdrawal_line};

fuzz_target!(|data: &[u8]| {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(first) = FirstLine::parse(line) {
        let again = FirstLine::parse(&first.to_line());
        assert_eq!(again.as_ref(), Ok(&first), "{line:?}");
        let _ = first.check_tokens();
    }
    if let Ok(read) = parse_address_line(line) {
        let gone: Vec<&str> = read.withdrawn.iter().map(String::as_str).collect();
        let again = parse_address_line(&withdrawal_line(&read.addresses, &gone));
        assert_eq!(again.as_ref(), Ok(&read), "{line:?}");
    }
});
