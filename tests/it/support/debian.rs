//! What the tests that unpack Debian packages under `target/` share (the Rust guest toolchain,
//! Chromium): downloading a set of packages with the dependencies this machine lacks, and running
//! the commands that unpack and check them.

use std::path::Path;
use std::process::{Command, Stdio};

/// Downloads `named` (always, even where installed, so the unpacked tree is whole) and those of
/// their dependencies this machine lacks (what `apt-get install` would install without
/// recommendations), except the ones `skip` names, into `debs`.
pub fn download_missing(named: &[&str], skip: impl Fn(&str) -> bool, debs: &Path) -> Result<(), String> {
    let sim = Command::new("apt-get")
        .args(["install", "-s", "--no-install-recommends", "-q"])
        .args(named)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("apt-get cannot be run: {e}"))?;
    if !sim.status.success() {
        return Err(format!(
            "apt-get cannot resolve {}:\n{}",
            named.join(" "),
            String::from_utf8_lossy(&sim.stderr)
        ));
    }
    let mut packages: Vec<String> = named.iter().map(|n| n.to_string()).collect();
    for line in String::from_utf8_lossy(&sim.stdout).lines() {
        if let Some(name) = line.strip_prefix("Inst ").and_then(|l| l.split_whitespace().next())
            && !skip(name)
            && !packages.iter().any(|p| p == name)
        {
            packages.push(name.to_string());
        }
    }
    let out = Command::new("apt-get")
        .arg("download")
        .args(&packages)
        .current_dir(debs)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("apt-get download: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "apt-get download {} failed:\n{}",
            packages.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Runs `cmd`, which must succeed.
pub fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `cmd`, which must succeed; its stdout.
pub fn output(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
