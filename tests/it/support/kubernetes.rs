//! The official Kubernetes schemas, held against every object a test renders with `mur deploy`.
//!
//! No API server can be had on these machines, so the check is `kubernetes-validate --strict`
//! (PyPI, provisioned under `target/` like the other Python packages): the object must match the
//! published OpenAPI schema of its kind, and strict mode refuses any field the schema does not
//! name. It runs for the oldest and the newest Kubernetes release docs/kubernetes.md claims
//! (`mur::deploy::KUBERNETES_OLDEST`, `KUBERNETES_NEWEST`). Schemas do not cover admission
//! (defaulting, immutable fields, owner uids): the deploy tests check those themselves.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use super::pins::KUBERNETES_VALIDATE;
use super::python::python_with;

/// The versions every rendered object is validated for: the oldest and the newest release
/// docs/kubernetes.md claims.
pub fn versions() -> [String; 2] {
    let page = super::repo_root().join("docs/kubernetes.md");
    let text = std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    let claim = text.split_once("Supported clusters: Kubernetes ").and_then(|(_, r)| {
        let (oldest, r) = r.split_once(" to ")?;
        let newest: String = r.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
        Some([oldest.to_string(), newest.trim_end_matches('.').to_string()])
    });
    let versions = claim.expect("docs/kubernetes.md says \"Supported clusters: Kubernetes A to B.\"");
    for v in &versions {
        let parts: Vec<&str> = v.split('.').collect();
        assert!(
            parts.len() == 2 && parts.iter().all(|p| p.parse::<u32>().is_ok()),
            "docs/kubernetes.md claims version '{v}', not MAJOR.MINOR"
        );
    }
    versions
}

/// Why `stream` (one or more `---` YAML documents) is not accepted by the strict schemas of
/// `version`, or `Ok` with the number of objects checked.
pub fn check(stream: &str, version: &str) -> Result<usize, String> {
    let py = python_with(KUBERNETES_VALIDATE, "kubernetes_validate");
    let mut child = Command::new(&py)
        .args(["-m", "kubernetes_validate", "--strict", "--no-warn", "-k"])
        .arg(format!("{version}.0"))
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("kubernetes-validate cannot start: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin
        .write_all(stream.as_bytes())
        .map_err(|e| format!("kubernetes-validate's stdin: {e}"))?;
    drop(stdin);
    let out = child
        .wait_with_output()
        .map_err(|e| format!("kubernetes-validate: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // One line per object: "INFO - <file> passed for resource <kind>/<name>" when it matches.
    let passed = text.lines().filter(|l| l.contains(" passed for resource ")).count();
    if !out.status.success() || text.lines().any(|l| l.starts_with("ERROR")) {
        return Err(format!("Kubernetes {version}, strict:\n{text}"));
    }
    Ok(passed)
}

/// Asserts that every object of `stream` passes the strict schemas of every supported version,
/// and that each was checked (an empty answer would pass nothing).
pub fn assert_valid(stream: &str) {
    let documents = stream.split("---\n").filter(|d| !d.trim().is_empty()).count();
    assert!(documents > 0, "no object to validate");
    let versions = versions();
    // Both releases at once: each check is a process of its own.
    let results: Vec<(String, Result<usize, String>)> = std::thread::scope(|scope| {
        let running: Vec<_> = versions
            .iter()
            .map(|v| scope.spawn(move || (v.clone(), check(stream, v))))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().expect("a schema check panicked"))
            .collect()
    });
    for (v, result) in results {
        match result {
            Ok(n) => assert_eq!(n, documents, "Kubernetes {v}: not every object was checked"),
            Err(e) => panic!("a rendered object is not one the API server would accept:\n{e}"),
        }
    }
}

/// [`assert_valid`] for each YAML file of a directory `mur deploy -o DIR` wrote.
#[allow(dead_code)]
pub fn assert_valid_dir(dir: &Path) {
    let mut stream = String::new();
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .expect("read the output directory")
        .map(|e| e.expect("entry").path())
        .collect();
    names.sort();
    for p in names {
        stream.push_str("---\n");
        stream.push_str(&std::fs::read_to_string(&p).expect("read a written object"));
    }
    assert_valid(&stream);
}
