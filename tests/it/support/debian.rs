//! What the tests that run Debian programs (the Rust guest toolchain, Chromium) share: deciding
//! where a program runs from, downloading the packages to unpack under `target/`, and running the
//! commands that unpack and check them.
//!
//! A program runs either from the system's own install, when every package named for it is
//! installed (dpkg keeps an installed package's dependencies installed, so that install is
//! whole), or from a self-contained unpacked set: the named packages, every package built from
//! the same source as one of them (a program finds their files beside its own binary, such as
//! Chromium's ICU data in `chromium-common`), and the libraries this machine lacks. Never a mix
//! of the two: an unpacked binary beside the system's copy of its own data files does not start.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

/// Where a Debian program runs from.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Every named package is installed: run the system's program.
    System,
    /// Unpack these packages under `target/` and run the program from there.
    Unpack(Vec<String>),
}

/// What this machine says of a program's packages.
#[derive(Debug, Default)]
pub struct Facts {
    /// The packages dpkg has installed.
    pub installed: BTreeSet<String>,
    /// What `apt-get install --no-install-recommends` would install for the named packages.
    pub missing: Vec<String>,
    /// Each package of the named packages' dependency closure, with its source package.
    pub sources: Vec<(String, String)>,
}

/// Decides where a program made of the `named` packages runs from. `skip` names dependencies
/// the program does not need unpacked (never a named package).
pub fn plan(named: &[&str], facts: &Facts, skip: impl Fn(&str) -> bool) -> Plan {
    if named.iter().all(|n| facts.installed.contains(*n)) {
        return Plan::System;
    }
    let source_of = |package: &str| {
        facts
            .sources
            .iter()
            .find(|(p, _)| p == package)
            .map_or_else(|| package.to_string(), |(_, s)| s.clone())
    };
    let own_sources: BTreeSet<String> = named.iter().map(|n| source_of(n)).collect();
    let mut packages: Vec<String> = named.iter().map(|n| n.to_string()).collect();
    let siblings = facts
        .sources
        .iter()
        .filter(|(_, s)| own_sources.contains(s))
        .map(|(p, _)| p);
    for p in siblings.chain(&facts.missing) {
        if !skip(p) && !packages.contains(p) {
            packages.push(p.clone());
        }
    }
    Plan::Unpack(packages)
}

/// What dpkg and apt say here of `named` and their dependencies.
pub fn facts(named: &[&str]) -> Result<Facts, String> {
    let installed = capture(
        Command::new("dpkg-query").args(["-W", "-f", "${db:Status-Abbrev}\t${Package}\n"]),
        "dpkg-query",
    )?
    .lines()
    .filter_map(|l| l.strip_prefix("ii "))
    .map(|p| p.trim().to_string())
    .collect();
    let sim = capture(
        Command::new("apt-get")
            .args(["install", "-s", "--no-install-recommends", "-q"])
            .args(named),
        &format!("apt-get install -s {}", named.join(" ")),
    )?;
    let missing = sim
        .lines()
        .filter_map(|l| l.strip_prefix("Inst ").and_then(|l| l.split_whitespace().next()))
        .map(str::to_string)
        .collect();
    let closure: Vec<String> = capture(
        Command::new("apt-cache")
            .args([
                "depends",
                "--recurse",
                "--no-recommends",
                "--no-suggests",
                "--no-conflicts",
            ])
            .args(["--no-breaks", "--no-replaces", "--no-enhances"])
            .args(named),
        "apt-cache depends",
    )?
    .lines()
    // Package lines start in the first column; virtual packages are `<name>`.
    .filter(|l| !l.starts_with([' ', '<']) && !l.is_empty())
    .map(|l| l.trim().to_string())
    .collect();
    // Virtual names make apt-cache complain on stderr and exit non-zero; the stanzas it printed
    // are still every real package's.
    let shown = Command::new("apt-cache")
        .args(["show", "--no-all-versions"])
        .args(&closure)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("apt-cache show: {e}"))?;
    Ok(Facts {
        installed,
        missing,
        sources: sources_of(&String::from_utf8_lossy(&shown.stdout)),
    })
}

/// Each stanza's package and source package (its own name when it has no `Source:` field; the
/// field may carry a version in parentheses).
fn sources_of(stanzas: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for stanza in stanzas.split("\n\n") {
        let field = |name: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .map(str::to_string)
        };
        if let Some(package) = field("Package:") {
            let source = field("Source:").unwrap_or_else(|| package.clone());
            out.push((package, source));
        }
    }
    out
}

/// Downloads `packages` into `debs`.
pub fn download(packages: &[String], debs: &Path) -> Result<(), String> {
    let out = Command::new("apt-get")
        .arg("download")
        .args(packages)
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

/// Runs `cmd` in the C locale; its stdout, or why it failed.
fn capture(cmd: &mut Command, what: &str) -> Result<String, String> {
    let out = cmd
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what} cannot be run: {e}"))?;
    if !out.status.success() {
        return Err(format!("{what} failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Chromium's closure as Debian 12 has it, cut to what tells the cases apart.
    fn chromium_facts(installed: &[&str], missing: &[&str]) -> Facts {
        let sources = [
            ("chromium", "chromium"),
            ("chromium-common", "chromium"),
            ("libc6", "glibc"),
            ("libnss3", "nss"),
            ("libatk1.0-0", "at-spi2-core"),
        ];
        Facts {
            installed: installed.iter().map(|p| p.to_string()).collect(),
            missing: missing.iter().map(|p| p.to_string()).collect(),
            sources: sources.iter().map(|(p, s)| (p.to_string(), s.to_string())).collect(),
        }
    }

    fn unpack(packages: &[&str]) -> Plan {
        Plan::Unpack(packages.iter().map(|p| p.to_string()).collect())
    }

    #[test]
    fn a_program_runs_from_the_systems_whole_install_or_from_a_self_contained_unpack() {
        let cases: [(&str, &[&str], &[&str], Plan); 5] = [
            (
                "nothing installed: the program, its own data and every library",
                &[],
                &["chromium", "chromium-common", "libc6", "libnss3", "libatk1.0-0"],
                unpack(&["chromium", "chromium-common", "libc6", "libnss3", "libatk1.0-0"]),
            ),
            (
                "the system's chromium: used as it is, nothing unpacked",
                &["chromium", "chromium-common", "libc6", "libnss3", "libatk1.0-0"],
                &[],
                Plan::System,
            ),
            (
                "only the data package installed (left behind by a removal): still unpacked with the binary",
                &["chromium-common", "libc6", "libnss3", "libatk1.0-0"],
                &["chromium"],
                unpack(&["chromium", "chromium-common"]),
            ),
            (
                "the libraries installed: the program and its data unpacked, the libraries shared",
                &["libc6", "libnss3", "libatk1.0-0"],
                &["chromium", "chromium-common"],
                unpack(&["chromium", "chromium-common"]),
            ),
            (
                "some libraries missing: those unpacked too",
                &["libc6"],
                &["chromium", "chromium-common", "libnss3", "libatk1.0-0"],
                unpack(&["chromium", "chromium-common", "libnss3", "libatk1.0-0"]),
            ),
        ];
        for (what, installed, missing, expected) in cases {
            let facts = chromium_facts(installed, missing);
            assert_eq!(plan(&["chromium"], &facts, |_| false), expected, "{what}");
        }
    }

    #[test]
    fn skipped_dependencies_are_left_out_but_never_a_named_package() {
        let facts = Facts {
            installed: ["rustc-web".to_string()].into(),
            missing: vec!["cargo-web".into(), "llvm-19".into(), "libllvm19".into()],
            sources: vec![
                ("rustc-web".into(), "rustc-web".into()),
                ("cargo-web".into(), "rustc-web".into()),
                ("libstd-rust-web-dev".into(), "rustc-web".into()),
                ("llvm-19".into(), "llvm-toolchain-19".into()),
            ],
        };
        let skip = |p: &str| p.starts_with("llvm-") || p == "rustc-web";
        assert_eq!(
            plan(&["rustc-web", "cargo-web"], &facts, skip),
            unpack(&["rustc-web", "cargo-web", "libstd-rust-web-dev", "libllvm19"]),
            "the installed rustc-web's library package is unpacked beside the unpacked rustc"
        );
    }

    #[test]
    fn source_packages_are_read_from_apt_cache_stanzas() {
        let stanzas = "Package: chromium\nVersion: 148\n\nPackage: chromium-common\nSource: chromium\nVersion: 148\n\nPackage: libstd-rust-web-1.85\nSource: rustc-web (1.85.0+dfsg3-1)\n";
        assert_eq!(
            sources_of(stanzas),
            [
                ("chromium".to_string(), "chromium".to_string()),
                ("chromium-common".to_string(), "chromium".to_string()),
                ("libstd-rust-web-1.85".to_string(), "rustc-web".to_string()),
            ]
        );
    }
}
