//! What the benches that launch `mur` share: which binary, which processes belong to a
//! formation, and the small statistics they print. Each bench is its own crate and uses a subset.
#![allow(dead_code)]

use std::path::PathBuf;

/// The `mur` under test: `MUR_BENCH_MUR`, else the one this build made.
pub fn mur_binary() -> PathBuf {
    std::env::var_os("MUR_BENCH_MUR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_mur")), PathBuf::from)
}

/// Live (non-zombie) pids whose environment carries `MURMUR_FORMATION_ID=<frm>`.
pub fn formation_pids(frm: &str) -> Vec<u32> {
    let needle = format!("MURMUR_FORMATION_ID={frm}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                && alive(*pid)
        })
        .collect()
}

/// Running (not exited, not a zombie).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| !s[i + 1..].trim_start().starts_with(['Z', 'X'])))
        .unwrap_or(false)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
