//! `mur build`, `mur install`, `mur list` with the real binary in a private HOME.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::support::{Sandbox, stderr, stdout};

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

const CODER: &str = "name: coder\nversion: 1.10\ncomponent: capsule.wat\nexports: {peer_tasks: {accept: true}}\n";
const WAT: &str = "(component)\n";

/// Writes a capsule source directory `rel` with `manifest` and, optionally, `capsule.wat`.
fn source(sb: &Sandbox, rel: &str, manifest: &str, wat: Option<&str>) -> std::path::PathBuf {
    sb.write(&format!("{rel}/murmur.yaml"), manifest);
    if let Some(w) = wat {
        sb.write(&format!("{rel}/capsule.wat"), w);
    }
    sb.dir.path().join(rel)
}

fn ok(o: &std::process::Output) {
    assert!(
        o.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        stdout(o),
        stderr(o)
    );
}

fn refused(o: &std::process::Output, code: &str) -> String {
    assert_eq!(o.status.code(), Some(1), "stdout: {}\nstderr: {}", stdout(o), stderr(o));
    let err = stderr(o);
    assert!(err.starts_with(&format!("error[{code}]: ")), "{err}");
    err
}

fn zip_entries(path: &Path) -> Vec<(String, Vec<u8>)> {
    let bytes = std::fs::read(path).unwrap();
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut f = zip.by_index(i).unwrap();
            let mut data = Vec::new();
            std::io::Read::read_to_end(&mut f, &mut data).unwrap();
            (f.name().to_string(), data)
        })
        .collect()
}

#[test]
fn build_install_list_round_trip() {
    let sb = Sandbox::new();
    let src = source(&sb, "src/coder", CODER, Some(WAT));
    let zip = src.join("coder-1.10.mur.zip");

    let o = sb.run(sb.dir.path(), &["build", "src/coder"]);
    ok(&o);
    assert_eq!(stdout(&o), "Built coder@1.10: src/coder/coder-1.10.mur.zip\n");
    assert_eq!(stderr(&o), "");
    assert_eq!(
        zip_entries(&zip),
        [
            ("capsule.wasm".to_string(), WAT.as_bytes().to_vec()),
            ("murmur.yaml".to_string(), CODER.as_bytes().to_vec())
        ]
    );
    let first = std::fs::read(&zip).unwrap();
    ok(&sb.run(sb.dir.path(), &["build", "src/coder"]));
    assert_eq!(
        std::fs::read(&zip).unwrap(),
        first,
        "a rebuild of unchanged sources keeps its bytes"
    );
    let sha = sha256(&first);

    // Nothing installed yet, from anywhere.
    let proj = sb.path("proj");
    let o = sb.run(&proj, &["list"]);
    ok(&o);
    assert_eq!(stdout(&o), "No artifacts installed.\n");

    // Global install.
    let o = sb.run(&proj, &["install", "-g", zip.to_str().unwrap()]);
    ok(&o);
    assert_eq!(
        stdout(&o),
        format!("Installed local/coder@1.10 from {}\n", zip.display())
    );
    let gdir = sb.home().join(".murmur/artifacts/local/coder/1.10");
    assert_eq!(std::fs::read(gdir.join("coder-1.10.mur.zip")).unwrap(), first);
    assert_eq!(
        std::fs::read_to_string(gdir.join("coder-1.10.sha256")).unwrap(),
        format!("{sha}\n")
    );
    assert!(!proj.join("murmur.lock").exists(), "-g touches no lock");

    // Project install, run from a subdirectory of the project.
    sb.write("proj/murmur.yaml", "name: proj\nversion: 0.1.0\n");
    let sub = sb.path("proj/deep/er");
    let o = sb.run(&sub, &["install", zip.to_str().unwrap()]);
    ok(&o);
    assert_eq!(
        stdout(&o),
        format!("Installed local/coder@1.10 from {}\n", zip.display())
    );
    let pdir = proj.join(".murmur/artifacts/local/coder/1.10");
    assert_eq!(std::fs::read(pdir.join("coder-1.10.mur.zip")).unwrap(), first);
    assert_eq!(
        std::fs::read_to_string(pdir.join("coder-1.10.sha256")).unwrap(),
        format!("{sha}\n")
    );
    assert_eq!(
        std::fs::read_to_string(proj.join("murmur.lock")).unwrap(),
        format!(
            "lock_version: 3\nartifacts:\n- name: local/coder\n  resolved_version: '1.10'\n  sha256:\n    any: {sha}\n  origin: operator\n"
        )
    );

    // A second capsule, global only, and a second version of coder.
    let helper = source(&sb, "src/helper", "name: helper\nversion: 2.0.0\n", None);
    ok(&sb.run(sb.dir.path(), &["build", helper.to_str().unwrap()]));
    let helper_zip = helper.join("helper-2.0.0.mur.zip");
    assert_eq!(
        zip_entries(&helper_zip).len(),
        1,
        "a manifest-only capsule packs only murmur.yaml"
    );
    ok(&sb.run(&proj, &["install", "--global", helper_zip.to_str().unwrap()]));
    sb.write("src/coder/murmur.yaml", &CODER.replace("1.10", "1.9"));
    ok(&sb.run(sb.dir.path(), &["build", "src/coder"]));
    let zip19 = src.join("coder-1.9.mur.zip");
    ok(&sb.run(&proj, &["install", "-g", zip19.to_str().unwrap()]));
    let (h_helper, h19) = (
        sha256(&std::fs::read(&helper_zip).unwrap()),
        sha256(&std::fs::read(&zip19).unwrap()),
    );

    // The empty component cannot run (it exports no `run`), so no install compiles it into the
    // cache: every coder is `not-compiled` (compiled.rs covers the `compiled` column).
    let o = sb.run(&sub, &["list"]);
    ok(&o);
    assert_eq!(
        stdout(&o),
        format!(
            "local/coder   1.10   project  {}  not-compiled\nlocal/coder   1.9    global   {}  not-compiled\nlocal/coder   1.10   global   {}  not-compiled\nlocal/helper  2.0.0  global   {}  -\n",
            &sha[..12],
            &h19[..12],
            &sha[..12],
            &h_helper[..12]
        )
    );
    // Outside any project only the global store lists; a roster.yaml also marks a project.
    let o = sb.run(sb.dir.path(), &["list"]);
    assert_eq!(stdout(&o).lines().count(), 3);
    let formation = sb.path("formation");
    sb.write("formation/roster.yaml", "roster_version: 1\n");
    std::fs::create_dir_all(formation.join(".murmur/artifacts/local/solo/1")).unwrap();
    std::fs::write(formation.join(".murmur/artifacts/local/solo/1/solo-1.mur.zip"), b"z").unwrap();
    std::fs::write(
        formation.join(".murmur/artifacts/local/solo/1/solo-1.sha256"),
        format!("{}\n", sha256(b"z")),
    )
    .unwrap();
    let o = sb.run(&formation, &["list"]);
    assert_eq!(
        stdout(&o).lines().next(),
        // Padded to the wider rows of the global store below it.
        Some(format!("local/solo    1      project  {}  -", &sha256(b"z")[..12]).as_str())
    );
}

#[test]
fn reinstall_replaces_and_upserts_the_lock() {
    let sb = Sandbox::new();
    let proj = sb.path("proj");
    sb.write(
        "proj/murmur.lock",
        "lock_version: 3\nartifacts:\n  - name: gh/other\n    resolved_version: 1.10\n  - name: local/coder\n    resolved_version: 0.0.1\n    sha256: {any: 0000000000000000000000000000000000000000000000000000000000000000}\n",
    );
    sb.write("proj/murmur.yaml", "name: proj\nversion: 1\n");
    let src = source(&sb, "proj/coder", CODER, Some(WAT));
    ok(&sb.run(&proj, &["build", "coder"]));
    let zip = src.join("coder-1.10.mur.zip");
    ok(&sb.run(&proj, &["install", "coder/coder-1.10.mur.zip"]));
    let old = sha256(&std::fs::read(&zip).unwrap());

    // Change the component, rebuild, reinstall: the stored copy and sidecar follow.
    sb.write("proj/coder/capsule.wat", "(component) ;; v2\n");
    ok(&sb.run(&proj, &["build", "coder"]));
    let o = sb.run(&proj, &["install", "coder/coder-1.10.mur.zip"]);
    ok(&o);
    let new = sha256(&std::fs::read(&zip).unwrap());
    assert_ne!(old, new);
    // Said, not silent: other bytes now stand at that version.
    assert_eq!(
        stdout(&o),
        format!(
            "Replaced local/coder@1.10 from coder/coder-1.10.mur.zip (sha256 {} \u{2192} {}; sessions already running keep the old bytes)\n",
            &old[..12],
            &new[..12]
        )
    );
    let again = sb.run(&proj, &["install", "coder/coder-1.10.mur.zip"]);
    ok(&again);
    assert_eq!(
        stdout(&again),
        "Installed local/coder@1.10 from coder/coder-1.10.mur.zip (the same bytes as before)\n"
    );
    let dir = proj.join(".murmur/artifacts/local/coder/1.10");
    assert_eq!(sha256(&std::fs::read(dir.join("coder-1.10.mur.zip")).unwrap()), new);
    assert_eq!(
        std::fs::read_to_string(dir.join("coder-1.10.sha256")).unwrap(),
        format!("{new}\n")
    );
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporary files are left behind: {names:?}");
    assert_eq!(
        std::fs::read_to_string(proj.join("murmur.lock")).unwrap(),
        format!(
            "lock_version: 3\nartifacts:\n- name: gh/other\n  resolved_version: '1.10'\n- name: local/coder\n  resolved_version: '1.10'\n  sha256:\n    any: {new}\n  origin: operator\n"
        )
    );
}

#[test]
fn build_refusals() {
    let sb = Sandbox::new();
    let cwd = sb.dir.path();

    let o = sb.run(cwd, &["build", "nowhere"]);
    let err = refused(&o, "E-MAN-001");
    assert!(
        err.starts_with("error[E-MAN-001]: murmur.yaml not found at nowhere/murmur.yaml\n  hint: "),
        "{err}"
    );

    source(
        &sb,
        "bad",
        "name: bad\nversion: 1\nlifecycle: {queue_depth: lots}\n",
        None,
    );
    let err = refused(&sb.run(cwd, &["build", "bad"]), "E-MAN-001");
    assert!(
        err.starts_with("error[E-MAN-001]: murmur.yaml: lifecycle.queue_depth: must be an integer, found a string\n")
    );

    source(
        &sb,
        "both",
        "name: both\nversion: 1\ninference: {}\ncomponent: c.wat\n",
        None,
    );
    refused(&sb.run(cwd, &["build", "both"]), "E-MAN-003");

    source(
        &sb,
        "nocomp",
        "name: nocomp\nversion: 1\ncomponent: missing.wasm\n",
        None,
    );
    let err = refused(&sb.run(cwd, &["build", "nocomp"]), "E-BLD-001");
    assert!(
        err.starts_with("error[E-BLD-001]: component 'missing.wasm' not found at nocomp/missing.wasm\n  hint: "),
        "{err}"
    );
    assert!(!sb.dir.path().join("nocomp/nocomp-1.mur.zip").exists());

    source(&sb, "dircomp", "name: dircomp\nversion: 1\ncomponent: sub\n", None);
    sb.path("dircomp/sub");
    let err = refused(&sb.run(cwd, &["build", "dircomp"]), "E-BLD-001");
    assert!(
        err.starts_with("error[E-BLD-001]: component 'sub' at dircomp/sub is not a file"),
        "{err}"
    );

    // Unknown keys warn on stderr, and the build still succeeds.
    source(
        &sb,
        "warn",
        "name: warn\nversion: 1\nflavour: mild\nruntime: {x: 1}\n",
        None,
    );
    let o = sb.run(cwd, &["build", "warn"]);
    ok(&o);
    assert_eq!(
        stderr(&o),
        "warning[W-SEC-019]: murmur.yaml: flavour: unknown key; it is ignored\n"
    );
}

#[test]
fn install_refusals() {
    let sb = Sandbox::new();
    let proj = sb.path("proj");
    sb.write("proj/murmur.yaml", "name: proj\nversion: 1\n");

    let err = refused(&sb.run(&proj, &["install", "missing.mur.zip"]), "E-INS-001");
    assert!(
        err.starts_with("error[E-INS-001]: cannot read missing.mur.zip: "),
        "{err}"
    );

    sb.write("proj/junk.mur.zip", "not a zip");
    let err = refused(&sb.run(&proj, &["install", "junk.mur.zip"]), "E-INS-001");
    assert!(
        err.starts_with("error[E-INS-001]: junk.mur.zip is not a capsule archive: not a ZIP archive: "),
        "{err}"
    );

    let no_manifest = write_zip(&sb, "proj/empty.mur.zip", &[("capsule.wasm", b"x")]);
    let err = refused(&sb.run(&proj, &["install", no_manifest.to_str().unwrap()]), "E-INS-001");
    assert!(
        err.contains("is not a capsule archive: the archive has no murmur.yaml at its root"),
        "{err}"
    );

    write_zip(&sb, "proj/bad.mur.zip", &[("murmur.yaml", b"name: Bad\nversion: 1\n")]);
    let err = refused(&sb.run(&proj, &["install", "bad.mur.zip"]), "E-INS-001");
    assert!(
        err.starts_with("error[E-INS-001]: bad.mur.zip: its packed murmur.yaml does not parse: murmur.yaml: name: 'Bad' may hold only"),
        "{err}"
    );

    // No project root without -g: nothing is stored anywhere.
    let good = write_zip(
        &sb,
        "elsewhere/good.mur.zip",
        &[("murmur.yaml", b"name: good\nversion: 1\n")],
    );
    let outside = sb.path("elsewhere");
    let err = refused(&sb.run(&outside, &["install", "good.mur.zip"]), "E-INS-001");
    assert!(
        err.starts_with(&format!(
            "error[E-INS-001]: no project root found: no murmur.yaml in {} or any parent directory\n  hint: ",
            outside.canonicalize().unwrap().display()
        )),
        "{err}"
    );
    assert!(!sb.home().join(".murmur/artifacts").exists());
    ok(&sb.run(&outside, &["install", "-g", good.to_str().unwrap()]));

    // A project lock that does not read refuses before anything is stored, and is kept as is.
    sb.write("proj/murmur.lock", "lock_version: 2\n");
    let err = refused(&sb.run(&proj, &["install", good.to_str().unwrap()]), "E-RUN-003");
    assert!(
        err.starts_with("error[E-RUN-003]: invalid murmur.lock: lock_version is 2; this build reads lock_version 3"),
        "{err}"
    );
    assert!(!proj.join(".murmur/artifacts/local/good").exists());
    assert_eq!(
        std::fs::read_to_string(proj.join("murmur.lock")).unwrap(),
        "lock_version: 2\n"
    );
}

fn write_zip(sb: &Sandbox, rel: &str, entries: &[(&str, &[u8])]) -> std::path::PathBuf {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, data) in entries {
        zip.start_file(*name, zip::write::SimpleFileOptions::default()).unwrap();
        zip.write_all(data).unwrap();
    }
    let bytes = zip.finish().unwrap().into_inner();
    let path = sb.dir.path().join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}
