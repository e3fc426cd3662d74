//! Fuzzes check 1 (roster parsing) and checks 2–5 on whatever parses.
//!
//! Properties: no panic, no hang, bounded memory; every parse refusal is E-ROS-001 behind the
//! `roster.yaml` prefix; parsing and the structural checks are deterministic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use mur_core::diag;
use mur_core::roster::{check_structure, parse};

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Err(d) => {
            assert_eq!(d.code, diag::E_ROS_001);
            assert!(d.message.starts_with("roster.yaml"), "{}", d.message);
            assert_eq!(parse(data).err(), Some(d));
        }
        Ok(r) => {
            assert!(!r.members.is_empty());
            let first = check_structure(&r);
            if let Err(d) = &first {
                assert!(
                    [diag::E_ROS_002, diag::E_ROS_003, diag::E_ROS_004, diag::E_ROS_008].contains(&d.code),
                    "{d}"
                );
            }
            assert_eq!(check_structure(&r), first);
            assert_eq!(parse(data).ok(), Some(r));
        }
    }
});
