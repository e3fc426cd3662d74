//! The compiled-component cache (issue 19, item 2), through the real binary: `mur install`
//! compiles a component into `~/.murmur/compiled`, a launch loads it and compiles nothing, and an
//! entry that is truncated, foreign, in a project directory or in a directory others may write is
//! never trusted. What a process did is read from its `RUST_LOG=mur=debug` lines: `compiled
//! component <sha12>` or `loaded compiled <sha12>`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::support::{Sandbox, stderr, stdout};

const ECHO: &str = "actors/echo/capsule.wat";
/// Answers `ok` whatever its task: an echo that answers `ok` ran shout's code.
const SHOUT: &str = "src/capsule/testdata/shout.wat";

/// What one launch did with the cache.
#[derive(Debug, PartialEq, Eq)]
enum Did {
    Compiled,
    Loaded,
}

/// Runs `mur run --capsule local/<name> --task hi` in `cwd`; checks it answered `want` and
/// returns what it did with the cache and its stderr.
#[track_caller]
fn launch(sb: &Sandbox, cwd: &Path, name: &str, want: &str) -> (Did, String) {
    let o = sb
        .mur(cwd)
        .args([
            "run",
            "--capsule",
            &format!("local/{name}"),
            "--capsule-version",
            "0.1.0",
        ])
        .args(["--task", "hi"])
        .env("RUST_LOG", "mur=debug")
        .output()
        .expect("spawn mur");
    let err = stderr(&o);
    assert_eq!(stdout(&o), format!("{want}\n"), "{err}");
    assert_eq!(o.status.code(), Some(0), "{err}");
    let compiled = err.matches("compiled component ").count();
    let loaded = err.matches("loaded compiled ").count();
    let did = match (compiled, loaded) {
        (1, 0) => Did::Compiled,
        (0, 1) => Did::Loaded,
        _ => panic!("one compile or one load expected, found {compiled} and {loaded}: {err}"),
    };
    (did, err)
}

fn cache_dir(sb: &Sandbox) -> PathBuf {
    sb.home().join(".murmur/compiled")
}

/// The `(entry, record)` files in the cache, sorted.
fn entries(dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.extension().is_some_and(|e| e == "cwasm"));
    found.sort();
    found
        .into_iter()
        .map(|p| {
            let sum = p.with_extension("sum");
            (p, sum)
        })
        .collect()
}

/// The one entry in the cache.
#[track_caller]
fn only_entry(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let all = entries(&cache_dir(sb));
    assert_eq!(all.len(), 1, "{all:?}");
    all.into_iter().next().expect("one entry")
}

#[test]
fn install_compiles_once_and_every_launch_loads_it() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let (entry, record) = only_entry(&sb);
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&cache_dir(&sb)), 0o700);
    assert_eq!((mode(&entry), mode(&record)), (0o600, 0o600));
    let stamp = std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime");
    for _ in 0..2 {
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    }
    assert_eq!(
        std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime"),
        stamp,
        "a load rewrites nothing"
    );

    // Without the cache the first launch compiles and stores, the next one loads.
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    let (did, first) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled);
    let (did, second) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Loaded);
    let sha = |err: &str, what: &str| {
        let at = err.find(what).expect("log line") + what.len();
        err[at..at + 12].to_string()
    };
    assert_eq!(sha(&first, "compiled component "), sha(&second, "loaded compiled "));
    assert_eq!(only_entry(&sb).0, entry, "the same key names the entry");
}

#[test]
fn list_shows_whether_each_component_is_compiled() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    sb.install_manifest("plain", "name: plain\nversion: 0.1.0\n");
    let list = |sb: &Sandbox| -> Vec<String> {
        let o = sb.run(&cwd, &["list"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        stdout(&o)
            .lines()
            .map(|l| l.rsplit("  ").next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(list(&sb), ["compiled", "-"]);
    let o = sb.run(&cwd, &["list", "--json"]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).expect("json");
    assert_eq!(
        (&v["artifacts"][0]["compiled"], &v["artifacts"][1]["compiled"]),
        (&serde_json::json!(true), &serde_json::Value::Null),
        "{v}"
    );
    let (entry, _) = only_entry(&sb);
    std::fs::remove_file(&entry).expect("rm entry");
    assert_eq!(list(&sb), ["not-compiled", "-"]);
    launch(&sb, &cwd, "echo", "hi");
    assert_eq!(list(&sb), ["compiled", "-"]);
}

#[test]
fn a_truncated_entry_is_compiled_again_and_replaced() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let (entry, _) = only_entry(&sb);
    let whole = std::fs::read(&entry).expect("entry");
    for cut in [whole.len() / 2, 0] {
        std::fs::write(&entry, &whole[..cut]).expect("truncate");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled, "cut at {cut}");
        assert_eq!(std::fs::read(&entry).expect("entry").len(), whole.len(), "replaced");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    }
    // A record cut short is as bad as an entry cut short.
    let (_, record) = only_entry(&sb);
    let text = std::fs::read(&record).expect("record");
    std::fs::write(&record, &text[..text.len() / 2]).expect("truncate record");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled);
    assert_eq!(std::fs::read(&record).expect("record"), text);
}

#[test]
fn a_foreign_or_random_entry_is_compiled_again_never_run() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("shout", SHOUT, "");
    let (shout_entry, shout_record) = only_entry(&sb);
    sb.install_component("echo", ECHO, "");
    let (entry, record) = entries(&cache_dir(&sb))
        .into_iter()
        .find(|(e, _)| *e != shout_entry)
        .expect("echo's entry");
    let (echo_bytes, echo_record) = (
        std::fs::read(&entry).expect("entry"),
        std::fs::read(&record).expect("record"),
    );
    let shout_bytes = std::fs::read(&shout_entry).expect("shout entry");
    let random: Vec<u8> = (0..echo_bytes.len()).map(|i| (i * 7919 % 251) as u8).collect();
    // Each planted (entry, record) would run other code than echo's, or none; echo must still
    // answer `hi`, not shout's `ok`.
    let plants: [(&str, &[u8], Vec<u8>); 4] = [
        (
            "shout's entry and record",
            &shout_bytes,
            std::fs::read(&shout_record).expect("record"),
        ),
        ("shout's entry, echo's record", &shout_bytes, echo_record.clone()),
        ("random bytes of the right length", &random, echo_record.clone()),
        (
            "echo's entry, garbage record",
            &echo_bytes,
            b"mur-compiled 1\nid x\n".to_vec(),
        ),
    ];
    for (what, bytes, rec) in plants {
        std::fs::write(&entry, bytes).expect("plant entry");
        std::fs::write(&record, &rec).expect("plant record");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled, "{what}");
        assert_eq!(std::fs::read(&entry).expect("entry"), echo_bytes, "{what}: replaced");
        assert_eq!(std::fs::read(&record).expect("record"), echo_record, "{what}: replaced");
    }
    assert_eq!(
        launch(&sb, &cwd, "shout", "ok").0,
        Did::Loaded,
        "shout's own entry is untouched"
    );
}

#[test]
fn a_compiled_entry_in_a_project_directory_is_ignored() {
    let sb = Sandbox::new();
    let proj = sb.path("proj");
    sb.write("proj/murmur.yaml", "name: proj\nversion: 0.1.0\n");
    sb.install_component("echo", ECHO, "");
    let zip = sb.dir.path().join("src/echo/echo-0.1.0.mur.zip");
    let o = sb.run(&proj, &["install", zip.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !proj.join(".murmur/compiled").exists(),
        "install writes native code only to the home"
    );
    // The user's entry moves into the project, where the project store and lock live.
    let (entry, record) = only_entry(&sb);
    let planted = proj.join(".murmur/compiled");
    std::fs::create_dir_all(&planted).expect("mkdir");
    std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    for f in [&entry, &record] {
        std::fs::rename(f, planted.join(f.file_name().expect("name"))).expect("move");
    }
    assert_eq!(launch(&sb, &proj, "echo", "hi").0, Did::Compiled);
    assert_eq!(launch(&sb, &proj, "echo", "hi").0, Did::Loaded, "from the home");
    assert_eq!(entries(&planted).len(), 1, "the project's copy is left alone");
}

#[test]
fn a_cache_directory_others_may_write_is_not_trusted() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let dir = cache_dir(&sb);
    let (entry, _) = only_entry(&sb);
    let stamp = std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime");
    for mode in [0o777, 0o770, 0o702] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let (did, err) = launch(&sb, &cwd, "echo", "hi");
        assert_eq!(did, Did::Compiled, "mode {mode:o}");
        assert_eq!(err.matches("warning[W-CMP-001]").count(), 1, "mode {mode:o}: {err}");
        assert!(err.contains(&format!("{} is not used", dir.display())), "{err}");
        assert_eq!(
            std::fs::metadata(&entry).and_then(|m| m.modified()).expect("mtime"),
            stamp,
            "nothing is written into an untrusted directory"
        );
        let o = sb.run(&cwd, &["list"]);
        assert!(stdout(&o).ends_with("  not-compiled\n"), "{}", stdout(&o));
    }
    // A symlink to a directory of the user's own is not the cache either.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let real = sb.path("elsewhere");
    std::fs::rename(&dir, real.join("compiled")).expect("move");
    std::os::unix::fs::symlink(real.join("compiled"), &dir).expect("symlink");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled);
    assert!(err.contains("warning[W-CMP-001]"), "{err}");
    // Put back as it should be, it is used again.
    std::fs::remove_file(&dir).expect("rm link");
    std::fs::rename(real.join("compiled"), &dir).expect("move back");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
}

#[test]
fn members_missing_at_once_leave_one_whole_entry() {
    let sb = Sandbox::new();
    sb.install_component("echo", ECHO, "");
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    let mut roster = String::from("roster_version: 1\nmembers:\n");
    for i in 0..4 {
        roster.push_str(&format!(
            "  - name: m{i}\n    capsule: local/echo\n    version: 0.1.0\n{}",
            if i == 0 { "    entry: true\n" } else { "" }
        ));
    }
    sb.write("f/roster.yaml", &roster);
    let dir = sb.path("f");
    let o = sb.run(&dir, &["run", "--roster", "--task", "hi"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("hi"), "{}", stdout(&o));
    // Whoever renamed last, the entry is whole and the next launch loads it.
    only_entry(&sb);
    let leftovers: Vec<_> = std::fs::read_dir(cache_dir(&sb))
        .expect("cache")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert_eq!(launch(&sb, &sb.path("w"), "echo", "hi").0, Did::Loaded);
}

/// Ownership needs a second user: only root can hand a file to one, so elsewhere this test only
/// checks that the cache works.
#[test]
fn a_cache_owned_by_another_user_is_not_trusted() {
    use nix::unistd::{Gid, Uid, chown};
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    if !Uid::current().is_root() {
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
        return;
    }
    let nobody = (Some(Uid::from_raw(65534)), Some(Gid::from_raw(65534)));
    let (entry, record) = only_entry(&sb);
    // An entry or record of another user's is compiled again and replaced by one of this user's.
    for file in [&entry, &record] {
        chown(file, nobody.0, nobody.1).expect("chown");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Compiled, "{}", file.display());
        let meta = std::fs::metadata(file).expect("stat");
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), 0, "replaced");
        assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    }
    // A directory of another user's is not used at all.
    let dir = cache_dir(&sb);
    chown(&dir, nobody.0, nobody.1).expect("chown");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Compiled);
    assert!(
        err.contains("warning[W-CMP-001]") && err.contains("owned by uid 65534"),
        "{err}"
    );
}

/// A hit is decided by the archive's sha256 alone: the component is neither inflated nor hashed.
/// The archive here holds a `capsule.wasm` that cannot be inflated (its CRC is wrong), and its
/// entry is planted (compiled from echo) under that archive's key: a member that reads the
/// component fails, one that does not answers `hi`.
#[test]
fn a_hit_does_not_read_the_component() {
    use mur::capsule::{CapsuleEngine, CompiledCache};
    use mur::store::{self, archive};
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    let good = std::fs::read(sb.dir.path().join("src/echo/echo-0.1.0.mur.zip")).expect("zip");
    let crc = zip::ZipArchive::new(std::io::Cursor::new(&good[..]))
        .expect("zip")
        .by_name(archive::COMPONENT_ENTRY)
        .expect("capsule.wasm")
        .crc32();
    let mut damaged = good.clone();
    let (from, to) = (crc.to_le_bytes(), (crc ^ 1).to_le_bytes());
    let mut patched = 0;
    for i in 0..damaged.len() - 4 {
        if damaged[i..i + 4] == from {
            damaged[i..i + 4].copy_from_slice(&to);
            patched += 1;
        }
    }
    assert_eq!(patched, 2, "the local header's and the central directory's CRC");
    assert!(archive::open_index(&damaged).is_ok());
    let inflated = archive::read_component(&damaged).expect_err("a wrong CRC fails the read");
    let global = mur::paths::MurHome::at_home(&sb.home()).artifacts();
    let (_, sha) = store::install(&global, &mur::names::ArtifactName::local("echo"), "0.1.0", &damaged)
        .expect("store the damaged archive");

    // Planted as a miss would have written it, had the component read.
    let wat = std::fs::read(crate::support::repo_root().join(ECHO)).expect("echo");
    let engine = CapsuleEngine::new().expect("engine");
    CompiledCache::at(cache_dir(&sb))
        .precompile(&engine, &sha, &wat)
        .expect("plant");
    let (did, err) = launch(&sb, &cwd, "echo", "hi");
    assert_eq!(did, Did::Loaded, "{err}");
    assert!(err.contains("capsule.wasm not read"), "{err}");
    assert!(!err.contains("read capsule.wasm of"), "{err}");

    // Without the entry the component is read, and its damage refuses the launch.
    for (entry, record) in entries(&cache_dir(&sb)) {
        std::fs::remove_file(entry).expect("rm entry");
        std::fs::remove_file(record).expect("rm record");
    }
    let o = sb
        .mur(&cwd)
        .args([
            "run",
            "--capsule",
            "local/echo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ])
        .output()
        .expect("spawn mur");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("error[E-RUN-002]") && err.contains("its component cannot be read") && err.contains(&inflated),
        "{err}"
    );
}

/// The key is the archive's sha256: an archive reinstalled under the same name and version with
/// another component is another key, so the old entry is never run for it.
#[test]
fn a_reinstalled_archive_never_runs_the_old_entry() {
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("echo", ECHO, "");
    assert_eq!(launch(&sb, &cwd, "echo", "hi").0, Did::Loaded);
    // local/echo@0.1.0 now holds shout's component; echo's entry stays in the cache.
    std::fs::remove_dir_all(sb.path("src/echo")).expect("rm src");
    sb.install_component("echo", SHOUT, "");
    assert_eq!(entries(&cache_dir(&sb)).len(), 2);
    assert_eq!(launch(&sb, &cwd, "echo", "ok").0, Did::Loaded);
    // Without its entry, the new archive is compiled, not served by the old one's.
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    assert_eq!(launch(&sb, &cwd, "echo", "ok").0, Did::Compiled);
}

/// `n` members of local/echo, the first the entry.
fn echo_formation(sb: &Sandbox, n: usize) -> PathBuf {
    let mut roster = String::from("roster_version: 1\nmembers:\n");
    for i in 0..n {
        roster.push_str(&format!(
            "  - name: m{i}\n    capsule: local/echo\n    version: 0.1.0\n{}",
            if i == 0 { "    entry: true\n" } else { "" }
        ));
    }
    sb.write("f/roster.yaml", &roster);
    sb.path("f")
}

/// The launcher compiles a missing component once, checks its entry once and hands it, open, to
/// every member running it: with an empty cache, four members mean one compilation, and every
/// member (peers' stderr is relayed with their names) maps the launcher's entry.
#[test]
fn a_formation_compiles_each_component_once_and_hands_every_member_its_entry() {
    let sb = Sandbox::new();
    sb.install_component("echo", ECHO, "");
    std::fs::remove_dir_all(cache_dir(&sb)).expect("rm cache");
    let dir = echo_formation(&sb, 4);
    for round in ["empty cache", "warm cache"] {
        let o = sb
            .mur(&dir)
            .args(["run", "--roster", "--task", "hi"])
            .env("RUST_LOG", "mur=debug")
            .output()
            .expect("spawn mur");
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{round}: {err}");
        assert_eq!(stdout(&o), "hi\n", "{round}: {err}");
        let compiled = err.matches("compiled component ").count();
        assert_eq!(compiled, usize::from(round == "empty cache"), "{round}: {err}");
        assert_eq!(
            err.matches("from the launcher's descriptor").count(),
            4,
            "{round}: {err}"
        );
        assert_eq!(err.matches("loaded compiled ").count(), 4, "{round}: {err}");
        assert!(!err.contains("not used"), "{round}: {err}");
        only_entry(&sb);
    }
}

/// A member takes a handed descriptor only for its own key: one checked for another component (or
/// one that is no regular file) is not used, and the member checks the cache itself and runs its
/// own component (shout's code would answer `ok`).
#[test]
fn a_handed_entry_of_another_key_is_not_used() {
    use std::os::fd::AsRawFd;
    let sb = Sandbox::new();
    let cwd = sb.path("w");
    sb.install_component("shout", SHOUT, "");
    let (shout_entry, _) = only_entry(&sb);
    let shout_key = shout_entry
        .file_stem()
        .and_then(|s| s.to_str())
        .expect("key")
        .to_string();
    sb.install_component("echo", ECHO, "");
    let echo_key = entries(&cache_dir(&sb))
        .into_iter()
        .map(|(e, _)| e.file_stem().and_then(|s| s.to_str()).expect("key").to_string())
        .find(|k| *k != shout_key)
        .expect("echo's entry");
    for (file, key, why) in [
        (&shout_entry, &shout_key, "checked for another archive"),
        (&PathBuf::from("/dev/null"), &echo_key, "not a regular file"),
    ] {
        let handed = std::fs::File::open(file).expect("open");
        let raw = handed.as_raw_fd();
        let mut cmd = sb.mur(&cwd);
        cmd.args([
            "run",
            "--capsule",
            "local/echo",
            "--capsule-version",
            "0.1.0",
            "--task",
            "hi",
        ])
        .env("RUST_LOG", "mur=debug")
        .env("MURMUR_COMPILED_FD", raw.to_string())
        .env("MURMUR_COMPILED_KEY", key);
        // SAFETY: only an async-signal-safe fcntl runs between fork and exec.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let o = cmd.output().expect("spawn mur");
        let err = stderr(&o);
        assert_eq!(stdout(&o), "hi\n", "{err}");
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(err.contains("compiled entry is not used") && err.contains(why), "{err}");
        assert!(!err.contains("from the launcher's descriptor"), "{err}");
        assert_eq!(err.matches("loaded compiled ").count(), 1, "{err}");
    }
}
