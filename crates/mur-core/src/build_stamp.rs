//! Whether `mur build` may skip a toolchain run: the build stamp [ours].
//!
//! A component built from sources (`build.language`, a capsule's or a tool's) gets a small stamp
//! under the capsule's `.murmur/build/`, named after the component's path: the digest of its
//! recipe (what the build was asked to make and with which toolchain), the sha256 of every input
//! file of its directory, and the sha256 of the component it wrote. The next build gathers the
//! same facts and runs the toolchain only when [`judge`] finds one that differs, and says which.
//!
//! Pure: the caller walks the directory (keeping what [`is_input`] keeps), hashes the files and
//! the toolchain's identity, reads and writes the stamp file.
//!
//! Invariants:
//! - A stamp is a cache, never a promise: absent, unreadable, of another format or naming other
//!   facts, the component is built.
//! - The component itself, its staged copies, packed archives and the directories tools and
//!   package managers write into (`target/`, `node_modules/`, `.venv/`, …) are never inputs, so a
//!   build does not make its own next build stale.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The stamp's format; a stamp of any other is not read.
pub const FORMAT: u32 = 1;

/// Where stamps are kept, relative to the capsule's directory.
pub const STAMP_DIR: &str = ".murmur/build";

/// The most files a component's directory may hold for its inputs to be compared; a larger one
/// is always built (the walk itself would cost what the stamp saves).
pub const MAX_FILES: usize = 10_000;

/// The most bytes those files may hold together, for the same reason.
pub const MAX_BYTES: u64 = 256 << 20;

/// Directories that are never inputs, wherever they are: version control, mur's own, and what
/// toolchains and package managers write.
const SKIPPED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".murmur",
    ".venv",
    "venv",
    "node_modules",
    "target",
    "__pycache__",
    ".mypy_cache",
    ".pytest_cache",
];

/// Files at the top of the directory that describe the capsule rather than build it.
const SKIPPED_TOP_FILES: &[&str] = &["murmur.yaml", "murmur.lock"];

/// Directories at the top of the directory that describe the capsule rather than build it.
const SKIPPED_TOP_DIRS: &[&str] = &[".schemas"];

/// Whether the entry at `rel` (relative to the directory the toolchain builds in) is an input of
/// the component `output` (its path in that directory), or, for a directory, may hold some.
pub fn is_input(rel: &Path, is_dir: bool, output: &str) -> bool {
    let parts: Vec<&str> = match rel
        .components()
        .map(|c| match c {
            Component::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect::<Option<Vec<&str>>>()
    {
        Some(p) if !p.is_empty() => p,
        // Not a plain relative path: nothing the walk gives; never an input.
        _ => return false,
    };
    let name = parts[parts.len() - 1];
    let top = parts.len() == 1;
    if is_dir {
        return !SKIPPED_DIRS.contains(&name) && (!top || !SKIPPED_TOP_DIRS.contains(&name));
    }
    if top && SKIPPED_TOP_FILES.contains(&name) {
        return false;
    }
    // The component, and `<component>.tmp-<uuid>`, what a build stages before its rename.
    let path = parts.join("/");
    let output = output.strip_prefix("./").unwrap_or(output);
    if path == output || path.starts_with(&format!("{output}.tmp-")) {
        return false;
    }
    !(name.ends_with(".mur.zip") || name.ends_with(".pyc"))
}

/// The stamp of the component at `component` (relative to the capsule's directory), relative to
/// that directory; `None` for a path that is not plain (such a component is always built).
pub fn stamp_path(component: &str) -> Option<PathBuf> {
    let rel = Path::new(component);
    let plain = !component.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| {
        let mut name = rel.as_os_str().to_os_string();
        name.push(".stamp");
        Path::new(STAMP_DIR).join(name)
    })
}

/// The digest of a build's recipe: its `(fact, value)` pairs in the order given (language,
/// world, output, the toolchain's identity, the WIT it builds against, mur's version).
pub fn recipe(facts: &[(&str, &str)]) -> String {
    let text: String = facts
        .iter()
        .map(|(k, v)| format!("{}\n", serde_json::json!([k, v])))
        .collect();
    crate::digest::sha256_hex(text.as_bytes())
}

/// What one build recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stamp {
    pub format: u32,
    /// [`recipe`]'s digest.
    pub recipe: String,
    /// The sha256 of each input file, by its path relative to the build directory (`/`-separated).
    pub files: BTreeMap<String, String>,
    /// The sha256 of the component the build wrote.
    pub output: String,
}

impl Stamp {
    pub fn new(recipe: String, files: BTreeMap<String, String>, output: String) -> Stamp {
        Stamp {
            format: FORMAT,
            recipe,
            files,
            output,
        }
    }

    /// One JSON line, keys sorted.
    pub fn render(&self) -> String {
        let mut s = serde_json::to_string(self).unwrap_or_default();
        s.push('\n');
        s
    }

    /// The stamp in `text`, if it is one of this format.
    pub fn parse(text: &str) -> Option<Stamp> {
        let s: Stamp = serde_json::from_str(text.trim_end()).ok()?;
        (s.format == FORMAT).then_some(s)
    }
}

/// Whether to run the toolchain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every fact is as the stamp recorded: the component on disk is the one they make.
    Unchanged,
    Build(Why),
}

/// Why a component is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// No stamp: never built here (or built by an older mur).
    First,
    /// A stamp that does not read as one of this format.
    Unreadable,
    /// The language, world, output path, toolchain, WIT or mur's version differ.
    Recipe,
    /// Input files differ (each list sorted).
    Files {
        changed: Vec<String>,
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// The component is not there.
    OutputMissing,
    /// The component is not the one the stamp's build wrote.
    OutputChanged,
}

impl Why {
    /// Words for the build's progress line: `Building … (<this>)`.
    pub fn describe(&self) -> String {
        match self {
            Why::First => "no earlier build recorded".into(),
            Why::Unreadable => "the earlier build's record does not read".into(),
            Why::Recipe => "the toolchain or the build settings changed".into(),
            Why::OutputMissing => "the component is missing".into(),
            Why::OutputChanged => "the component was changed since it was built".into(),
            Why::Files {
                changed,
                added,
                removed,
            } => {
                let mut parts = Vec::new();
                for (names, verb) in [(changed, "changed"), (added, "added"), (removed, "removed")] {
                    if !names.is_empty() {
                        parts.push(format!("{} {verb}", listed(names)));
                    }
                }
                parts.join("; ")
            }
        }
    }
}

/// Up to three names, then how many more.
fn listed(names: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut s = names.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

/// Compares what a build would use now with the stamp's text (`None` when there is no stamp):
/// `recipe` and `files` as [`Stamp`] holds them, `output` the sha256 of the component on disk
/// (`None` when it is not there).
pub fn judge(stamp: Option<&str>, recipe: &str, files: &BTreeMap<String, String>, output: Option<&str>) -> Verdict {
    let Some(text) = stamp else {
        return Verdict::Build(Why::First);
    };
    let Some(old) = Stamp::parse(text) else {
        return Verdict::Build(Why::Unreadable);
    };
    if old.recipe != recipe {
        return Verdict::Build(Why::Recipe);
    }
    if old.files != *files {
        let changed = files
            .iter()
            .filter(|(k, v)| old.files.get(*k).is_some_and(|o| o != *v))
            .map(|(k, _)| k.clone())
            .collect();
        let added = files.keys().filter(|k| !old.files.contains_key(*k)).cloned().collect();
        let removed = old.files.keys().filter(|k| !files.contains_key(*k)).cloned().collect();
        return Verdict::Build(Why::Files {
            changed,
            added,
            removed,
        });
    }
    match output {
        None => Verdict::Build(Why::OutputMissing),
        Some(o) if o != old.output => Verdict::Build(Why::OutputChanged),
        Some(_) => Verdict::Unchanged,
    }
}

/// The files a finished build's stamp records: those hashed after it, provided every file hashed
/// before it is unchanged (a toolchain may add files, as cargo adds `Cargo.lock`). `None` when a
/// source changed while the toolchain ran: the build may have read either version, so no stamp
/// is written and the next build runs again.
pub fn settled(before: &BTreeMap<String, String>, after: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    before.iter().all(|(k, v)| after.get(k) == Some(v)).then_some(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn inputs_leave_out_outputs_and_what_tools_write() {
        let table: &[(&str, bool, bool)] = &[
            ("app.py", false, true),
            ("lib/util.py", false, true),
            ("Cargo.toml", false, true),
            ("Cargo.lock", false, true),
            ("src", true, true),
            ("src/lib.rs", false, true),
            ("tool.wasm", false, false),
            ("tool.wasm.tmp-1234", false, false),
            // Only the top-level one is the output.
            ("sub/tool.wasm", false, true),
            ("words-0.1.0.mur.zip", false, false),
            ("murmur.yaml", false, false),
            ("sub/murmur.yaml", false, true),
            ("lib/x.pyc", false, false),
            ("target", true, false),
            ("node_modules", true, false),
            ("pkg/node_modules", true, false),
            (".venv", true, false),
            ("__pycache__", true, false),
            (".git", true, false),
            (".murmur", true, false),
            (".schemas", true, false),
            ("docs/.schemas", true, true),
            ("", false, false),
            ("../app.py", false, false),
            ("/etc/passwd", false, false),
        ];
        for (rel, is_dir, want) in table {
            assert_eq!(is_input(Path::new(rel), *is_dir, "tool.wasm"), *want, "{rel}");
        }
        // A component in a subdirectory.
        for (rel, want) in [
            ("out/c.wasm", false),
            ("out/c.wasm.tmp-1", false),
            ("c.wasm", true),
            ("out/d.wasm", true),
        ] {
            assert_eq!(is_input(Path::new(rel), false, "out/c.wasm"), want, "{rel}");
            assert_eq!(is_input(Path::new(rel), false, "./out/c.wasm"), want, "{rel}");
        }
    }

    #[test]
    fn stamps_live_under_the_capsules_build_directory() {
        let table: &[(&str, Option<&str>)] = &[
            ("capsule.wasm", Some(".murmur/build/capsule.wasm.stamp")),
            (
                "tools/words/tool.wasm",
                Some(".murmur/build/tools/words/tool.wasm.stamp"),
            ),
            ("../x.wasm", None),
            ("/abs.wasm", None),
            ("./x.wasm", None),
            ("", None),
        ];
        for (component, want) in table {
            assert_eq!(stamp_path(component), want.map(PathBuf::from), "{component}");
        }
    }

    #[test]
    fn a_recipe_names_its_facts_in_order() {
        let a = recipe(&[("language", "python"), ("world", "tool")]);
        assert_eq!(a, recipe(&[("language", "python"), ("world", "tool")]));
        assert_ne!(a, recipe(&[("world", "tool"), ("language", "python")]));
        assert_ne!(a, recipe(&[("language", "python"), ("world", "capsule")]));
        // A value holding a separator cannot pass for two facts.
        assert_ne!(recipe(&[("a", "b\nc")]), recipe(&[("a", "b"), ("c", "")]));
        assert_eq!(a.len(), 64);
    }

    #[test]
    fn a_stamp_reads_back_and_other_text_does_not() {
        let s = Stamp::new("r".into(), files(&[("app.py", "1"), ("b c\n.py", "2")]), "o".into());
        let text = s.render();
        assert!(text.ends_with('\n') && text.lines().count() == 1, "{text}");
        assert_eq!(Stamp::parse(&text), Some(s.clone()));
        let table = [
            "",
            "{}",
            "not json",
            r#"{"format":2,"recipe":"r","files":{},"output":"o"}"#,
            r#"{"format":1,"recipe":"r","files":{},"output":"o","extra":1}"#,
            r#"{"format":1,"recipe":"r","files":{"a":1},"output":"o"}"#,
        ];
        for t in table {
            assert_eq!(Stamp::parse(t), None, "{t}");
        }
    }

    #[test]
    fn the_judgement_names_what_differs() {
        let now = files(&[("app.py", "1"), ("lib.py", "2")]);
        let stamp = Stamp::new("r".into(), now.clone(), "o".into()).render();
        let ch = |c: &[&str], a: &[&str], r: &[&str]| Why::Files {
            changed: c.iter().map(|s| s.to_string()).collect(),
            added: a.iter().map(|s| s.to_string()).collect(),
            removed: r.iter().map(|s| s.to_string()).collect(),
        };
        type Row<'a> = (
            Option<&'a str>,
            &'a str,
            BTreeMap<String, String>,
            Option<&'a str>,
            Verdict,
        );
        let table: Vec<Row<'_>> = vec![
            (Some(&stamp), "r", now.clone(), Some("o"), Verdict::Unchanged),
            (None, "r", now.clone(), Some("o"), Verdict::Build(Why::First)),
            (
                Some("garbage"),
                "r",
                now.clone(),
                Some("o"),
                Verdict::Build(Why::Unreadable),
            ),
            (Some(&stamp), "r2", now.clone(), Some("o"), Verdict::Build(Why::Recipe)),
            (
                Some(&stamp),
                "r",
                files(&[("app.py", "9"), ("lib.py", "2")]),
                Some("o"),
                Verdict::Build(ch(&["app.py"], &[], &[])),
            ),
            (
                Some(&stamp),
                "r",
                files(&[("app.py", "1"), ("new.py", "3")]),
                Some("o"),
                Verdict::Build(ch(&[], &["new.py"], &["lib.py"])),
            ),
            (Some(&stamp), "r", now.clone(), None, Verdict::Build(Why::OutputMissing)),
            (
                Some(&stamp),
                "r",
                now.clone(),
                Some("x"),
                Verdict::Build(Why::OutputChanged),
            ),
            // A changed source is named even when the component is gone too.
            (
                Some(&stamp),
                "r",
                files(&[("app.py", "9"), ("lib.py", "2")]),
                None,
                Verdict::Build(ch(&["app.py"], &[], &[])),
            ),
        ];
        for (i, (stamp, recipe, files, output, want)) in table.into_iter().enumerate() {
            assert_eq!(judge(stamp, recipe, &files, output), want, "row {i}");
        }
    }

    #[test]
    fn reasons_read_as_words() {
        let names = |n: usize| (0..n).map(|i| format!("f{i}.py")).collect::<Vec<_>>();
        let table = [
            (Why::First, "no earlier build recorded"),
            (Why::Recipe, "the toolchain or the build settings changed"),
            (
                Why::Files {
                    changed: names(1),
                    added: vec![],
                    removed: vec![],
                },
                "f0.py changed",
            ),
            (
                Why::Files {
                    changed: names(5),
                    added: vec!["n.py".into()],
                    removed: vec!["o.py".into()],
                },
                "f0.py, f1.py, f2.py and 2 more changed; n.py added; o.py removed",
            ),
        ];
        for (why, want) in table {
            assert_eq!(why.describe(), want);
        }
    }

    #[test]
    fn a_source_changed_during_the_build_writes_no_stamp() {
        let before = files(&[("app.py", "1")]);
        let table = [
            (files(&[("app.py", "1")]), true),
            (files(&[("app.py", "1"), ("Cargo.lock", "2")]), true),
            (files(&[("app.py", "2")]), false),
            (files(&[]), false),
        ];
        for (after, kept) in table {
            assert_eq!(settled(&before, after.clone()).is_some(), kept, "{after:?}");
        }
    }
}
