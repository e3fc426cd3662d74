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

/// `bin` run from `cwd` in the private HOME `home`, with only `PATH` and `TMPDIR` of this
/// environment: no formation's variables and no developer's `RUST_LOG` reach it.
pub fn mur_in(bin: &std::path::Path, home: &std::path::Path, cwd: &std::path::Path) -> std::process::Command {
    let mut c = std::process::Command::new(bin);
    c.current_dir(cwd).env_clear();
    for var in ["PATH", "TMPDIR"] {
        if let Some(v) = std::env::var_os(var) {
            c.env(var, v);
        }
    }
    c.env("HOME", home);
    c
}

/// `mur build` of the capsule sources `src`, then `mur install -g` of the archive it built; the
/// failing step's stderr otherwise.
pub fn build_and_install(
    bin: &std::path::Path,
    home: &std::path::Path,
    root: &std::path::Path,
    src: &std::path::Path,
) -> Result<(), String> {
    let out = mur_in(bin, home, root)
        .arg("build")
        .arg(src)
        .output()
        .map_err(|e| format!("mur build: {e}"))?;
    if !out.status.success() {
        return Err(format!("mur build: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let built = String::from_utf8_lossy(&out.stdout).to_string();
    let zip = built.trim().rsplit(": ").next().unwrap_or_default();
    if zip.is_empty() {
        return Err(format!("mur build named no archive: {built}"));
    }
    let out = mur_in(bin, home, root)
        .args(["install", "-g", zip])
        .output()
        .map_err(|e| format!("mur install: {e}"))?;
    if !out.status.success() {
        return Err(format!("mur install: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

/// A capsule `name` made of a test component: `<root>/src/<name>/` holding `wat` (a path in the
/// repository) as `capsule.wat` and `manifest` as `murmur.yaml`, built and installed.
pub fn install_wat(
    bin: &std::path::Path,
    home: &std::path::Path,
    root: &std::path::Path,
    (name, wat, manifest): (&str, &str, &str),
) -> Result<(), String> {
    let src = root.join("src").join(name);
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::create_dir_all(&src)
        .and_then(|()| std::fs::copy(repo.join(wat), src.join("capsule.wat")).map(drop))
        .and_then(|()| std::fs::write(src.join("murmur.yaml"), manifest))
        .map_err(|e| format!("{name}'s sources: {e}"))?;
    build_and_install(bin, home, root, &src)
}

/// Member `member`'s running record under HOME `home`.
pub fn running_record(home: &std::path::Path, member: &str) -> Option<serde_json::Value> {
    std::fs::read_dir(home.join(".murmur/running"))
        .ok()?
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .find(|r| r["formation_member"] == member)
}

/// Member `member`'s door: its address and operator token, from its running record.
pub fn member_door(home: &std::path::Path, member: &str) -> Option<(String, String)> {
    let r = running_record(home, member)?;
    Some((r["url"].as_str()?.to_string(), r["door_token"].as_str()?.to_string()))
}

/// Ends a launcher the bench started: SIGTERM (the formation winds down as an operator's stop
/// would), then reaps it.
pub fn stop_launcher(child: &mut std::process::Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
    }
    let _ = child.wait();
}
