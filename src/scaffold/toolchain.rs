//! What `mur build` runs to make a component from a capsule's sources (`build.language`): the
//! tool of each language, where it is looked for, its argv and its environment, and the WIT
//! files the Python and JavaScript tools read. Pure: paths in, commands out; `crate::cli::build`
//! runs them.
//!
//! Invariants: a tool gets a fixed argv and an environment of a few named variables (never the
//! caller's tokens or keys); the WIT it reads is the runtime's own, written fresh for each build,
//! so a capsule is always built against the world the runtime hosts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::manifest::Language;

/// The entry file of a Python capsule (module `app`, class `WitWorld`).
pub const PYTHON_ENTRY: &str = "app.py";
/// The entry module of a JavaScript capsule (exports `run`).
pub const JAVASCRIPT_ENTRY: &str = "app.js";
/// The crate of a Rust capsule.
pub const RUST_ENTRY: &str = "Cargo.toml";

/// The pinned versions the hints install (the versions the tests build with).
pub const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";
pub const COMPONENTIZE_JS: &str = "@bytecodealliance/componentize-js@0.23.0";
/// The Rust target whose output is a component.
pub const RUST_TARGET: &str = "wasm32-wasip2";

/// What a build makes: a capsule's component or one of a model capsule's tools. Each has its
/// own WIT package and its own guest world: the host world plus the outgoing HTTP handler and the
/// environment, so the generated bindings can send requests and read `MURMUR_FORMATION_PEERS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    Capsule,
    Tool,
}

/// The WASI packages both worlds' guests import, as wasmtime's wasi-http 48.0.8 ships them.
const WASI_DEPS: [(&str, &str); 7] = [
    ("deps/cli.wit", include_str!("wit/deps/cli.wit")),
    ("deps/clocks.wit", include_str!("wit/deps/clocks.wit")),
    ("deps/filesystem.wit", include_str!("wit/deps/filesystem.wit")),
    ("deps/http.wit", include_str!("wit/deps/http.wit")),
    ("deps/io.wit", include_str!("wit/deps/io.wit")),
    ("deps/random.wit", include_str!("wit/deps/random.wit")),
    ("deps/sockets.wit", include_str!("wit/deps/sockets.wit")),
];

impl World {
    /// The world the Python and JavaScript tools build against.
    pub fn guest(self) -> &'static str {
        match self {
            World::Capsule => "capsule-guest",
            World::Tool => "tool-guest",
        }
    }

    /// Its WIT directory, by relative path: the package, its guest world, the WASI deps.
    pub fn wit_files(self) -> Vec<(&'static str, &'static str)> {
        let own = match self {
            World::Capsule => [
                ("capsule.wit", include_str!("../capsule/wit/capsule.wit")),
                ("guest.wit", include_str!("wit/guest.wit")),
            ],
            World::Tool => [
                ("tool.wit", include_str!("../tools/wit/tool.wit")),
                ("guest.wit", include_str!("wit/tool-guest.wit")),
            ],
        };
        own.into_iter().chain(WASI_DEPS).collect()
    }

    /// `capsule` or `tool`, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            World::Capsule => "capsule",
            World::Tool => "tool",
        }
    }
}

/// The variables a tool keeps from mur's environment: the search path (node, python, rustc),
/// a home for its caches, the temp directory, and Rust's own toolchain selection.
pub const PASSED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "LANG",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
];

/// The file a language's sources start from, relative to the capsule's directory.
pub fn entry(lang: Language) -> &'static str {
    match lang {
        Language::Python => PYTHON_ENTRY,
        Language::JavaScript => JAVASCRIPT_ENTRY,
        Language::Rust => RUST_ENTRY,
    }
}

/// The program each language runs.
pub fn program(lang: Language) -> &'static str {
    match lang {
        Language::Python => "componentize-py",
        Language::JavaScript => "componentize-js",
        Language::Rust => "cargo",
    }
}

/// The one command that installs a missing tool, run in the capsule's directory.
pub fn install_hint(lang: Language) -> String {
    match lang {
        Language::Python => format!("python3 -m pip install {COMPONENTIZE_PY}"),
        Language::JavaScript => format!("npm install {COMPONENTIZE_JS}"),
        Language::Rust => format!("rustup target add {RUST_TARGET}"),
    }
}

/// Where the program is looked for, in order: the capsule's own environment (`.venv/bin`,
/// `node_modules/.bin`, as `npx` would), then each directory of `path` (the `PATH` value).
pub fn candidates(lang: Language, dir: &Path, path: Option<&std::ffi::OsStr>) -> Vec<PathBuf> {
    let name = program(lang);
    let mut out = Vec::new();
    match lang {
        Language::Python => out.push(dir.join(".venv/bin").join(name)),
        Language::JavaScript => out.push(dir.join("node_modules/.bin").join(name)),
        Language::Rust => {}
    }
    if let Some(p) = path {
        out.extend(
            std::env::split_paths(p)
                .filter(|d| d.is_absolute())
                .map(|d| d.join(name)),
        );
    }
    out
}

/// The argv after the program: build `dir`'s sources into `out`, reading the WIT in `wit`.
/// Rust builds into `dir/target` and reports its artifact as JSON lines on stdout.
pub fn args(lang: Language, world: World, dir: &Path, wit: &Path, out: &Path) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |s: &str| a.push(s.into());
    match lang {
        Language::Python => {
            for s in ["--quiet", "-d"] {
                push(s);
            }
            a.push(wit.into());
            for s in ["-w", world.guest(), "componentize", "-p"] {
                a.push(s.into());
            }
            a.push(dir.into());
            for s in ["app", "-o"] {
                a.push(s.into());
            }
            a.push(out.into());
        }
        Language::JavaScript => {
            push("--wit");
            a.push(wit.into());
            for s in ["--world-name", world.guest(), "-o"] {
                a.push(s.into());
            }
            a.push(out.into());
            a.push(dir.join(JAVASCRIPT_ENTRY).into());
        }
        Language::Rust => {
            for s in [
                "build",
                "--release",
                "--target",
                RUST_TARGET,
                "--message-format",
                "json-render-diagnostics",
                "--manifest-path",
            ] {
                push(s);
            }
            a.push(dir.join(RUST_ENTRY).into());
            a.push("--target-dir".into());
            a.push(dir.join("target").into());
        }
    }
    a
}

/// Whether `component:` can name the file a build writes: a relative path inside the capsule's
/// directory (no root, no `..`), so a toolchain never writes outside it.
pub fn output_inside(rel: &str) -> bool {
    let p = Path::new(rel);
    !rel.is_empty()
        && p.components()
            .all(|c| matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir))
        && p.file_name().is_some()
}

/// The `.wasm` a `cargo --message-format json` line reports for a `cdylib` target, if any.
pub fn cargo_artifact(line: &str) -> Option<PathBuf> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["reason"] != "compiler-artifact" {
        return None;
    }
    let kinds = v["target"]["kind"].as_array()?;
    if !kinds.iter().any(|k| k == "cdylib" || k == "bin") {
        return None;
    }
    v["filenames"]
        .as_array()?
        .iter()
        .filter_map(|f| f.as_str())
        .find(|f| f.ends_with(".wasm"))
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(a: Vec<OsString>) -> Vec<String> {
        a.into_iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn argv_per_language() {
        let (dir, wit, out) = (Path::new("/p/cap"), Path::new("/t/wit"), Path::new("/p/cap/c.tmp"));
        let table: &[(Language, &str)] = &[
            (
                Language::Python,
                "--quiet -d /t/wit -w capsule-guest componentize -p /p/cap app -o /p/cap/c.tmp",
            ),
            (
                Language::JavaScript,
                "--wit /t/wit --world-name capsule-guest -o /p/cap/c.tmp /p/cap/app.js",
            ),
            (
                Language::Rust,
                "build --release --target wasm32-wasip2 --message-format json-render-diagnostics --manifest-path /p/cap/Cargo.toml --target-dir /p/cap/target",
            ),
        ];
        for (lang, want) in table {
            assert_eq!(
                strings(args(*lang, World::Capsule, dir, wit, out)).join(" "),
                *want,
                "{lang:?}"
            );
            let tool = want.replace("capsule-guest", "tool-guest");
            assert_eq!(
                strings(args(*lang, World::Tool, dir, wit, out)).join(" "),
                tool,
                "{lang:?}"
            );
        }
    }

    #[test]
    fn hints_are_one_install_command() {
        let table: &[(Language, &str)] = &[
            (Language::Python, "python3 -m pip install componentize-py==0.25.1"),
            (
                Language::JavaScript,
                "npm install @bytecodealliance/componentize-js@0.23.0",
            ),
            (Language::Rust, "rustup target add wasm32-wasip2"),
        ];
        for (lang, want) in table {
            assert_eq!(install_hint(*lang), *want);
        }
    }

    #[test]
    fn the_capsules_own_environment_comes_before_path() {
        let dir = Path::new("/p/cap");
        let path = std::ffi::OsString::from("/usr/bin:relative:/opt/bin");
        let got = |lang| {
            candidates(lang, dir, Some(&path))
                .into_iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            got(Language::Python),
            [
                "/p/cap/.venv/bin/componentize-py",
                "/usr/bin/componentize-py",
                "/opt/bin/componentize-py"
            ]
        );
        assert_eq!(
            got(Language::JavaScript),
            [
                "/p/cap/node_modules/.bin/componentize-js",
                "/usr/bin/componentize-js",
                "/opt/bin/componentize-js"
            ]
        );
        assert_eq!(got(Language::Rust), ["/usr/bin/cargo", "/opt/bin/cargo"]);
        assert_eq!(candidates(Language::Rust, dir, None), Vec::<PathBuf>::new());
    }

    #[test]
    fn cargo_reports_the_component() {
        let table: &[(&str, Option<&str>)] = &[
            (
                r#"{"reason":"compiler-artifact","target":{"kind":["cdylib"]},"filenames":["/t/x.d","/t/wasm32-wasip2/release/cap.wasm"]}"#,
                Some("/t/wasm32-wasip2/release/cap.wasm"),
            ),
            (
                r#"{"reason":"compiler-artifact","target":{"kind":["lib"]},"filenames":["/t/libdep.rlib"]}"#,
                None,
            ),
            (r#"{"reason":"build-finished","success":true}"#, None),
            ("not json", None),
        ];
        for (line, want) in table {
            assert_eq!(cargo_artifact(line), want.map(PathBuf::from), "{line}");
        }
    }

    #[test]
    fn a_build_writes_only_inside_the_capsule() {
        for ok in ["capsule.wasm", "out/capsule.wasm", "./capsule.wasm"] {
            assert!(output_inside(ok), "{ok}");
        }
        for bad in [
            "",
            "/tmp/capsule.wasm",
            "../capsule.wasm",
            "out/../../x.wasm",
            ".",
            "out/..",
        ] {
            assert!(!output_inside(bad), "{bad}");
        }
    }

    #[test]
    fn each_wit_has_its_world_and_guest_world() {
        for (world, host, guest) in [
            (World::Capsule, "world capsule {", "world capsule-guest {"),
            (World::Tool, "world tool {", "world tool-guest {"),
        ] {
            let text: String = world.wit_files().iter().map(|(_, t)| *t).collect();
            assert!(text.contains(host) && text.contains(guest), "{world:?}");
            assert!(text.contains("package wasi:http@0.2.12;"));
        }
    }
}
