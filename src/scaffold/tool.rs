//! `mur new --tool NAME --lang LANG`, run in a model capsule's source directory: the sources of a
//! WebAssembly tool under `tools/NAME/`, and its entry in `murmur.yaml`
//! (docs/reference/capsules.md#tools). Pure: texts in, texts out; `crate::cli::new` writes them.
//!
//! The entry is added to the manifest's text, so the user's comments and layout stay; the result
//! is parsed again and must hold the new tool and warn of nothing new, or nothing is written.

use crate::diag::{self, Diagnostic, shown};
use crate::manifest::{self, Language, ToolSource};

use super::File;

/// The component `mur build` makes in the tool's directory.
pub const COMPONENT: &str = "tool.wasm";

/// The tool's directory, relative to the capsule's.
pub fn dir(name: &str) -> String {
    format!("tools/{name}")
}

/// Checks the name of `mur new --tool NAME` (E-NEW-002): the manifest's rule for tool names.
pub fn check_name(name: &str) -> Result<(), Diagnostic> {
    if !manifest::tool_name_ok(name) || manifest::RUNTIME_TOOL_NAMES.contains(&name) {
        return Err(Diagnostic::new(
            diag::E_NEW_002,
            format!("'{}' cannot name a tool", shown(name)),
        )
        .with_hint("a tool name is 1 to 32 lowercase letters, digits and '-', starting with a letter, and not call-member, end-without-answer or request-input"));
    }
    Ok(())
}

/// The tool's source files, at their paths relative to the capsule's directory.
pub fn files(name: &str, lang: Language) -> Vec<File> {
    let fill = |t: &str| t.replace("@NAME@", name).into_bytes();
    let files: Vec<(&str, Vec<u8>)> = match lang {
        Language::Python => vec![
            ("app.py", fill(PYTHON_APP)),
            (".gitignore", b"__pycache__/\n.venv/\ntool.wasm\n".to_vec()),
        ],
        Language::JavaScript => vec![
            ("app.js", fill(JAVASCRIPT_APP)),
            ("package.json", fill(JAVASCRIPT_PACKAGE)),
            (".gitignore", b"node_modules/\ntool.wasm\n".to_vec()),
        ],
        Language::Rust => vec![
            ("Cargo.toml", fill(RUST_CARGO)),
            ("src/lib.rs", fill(RUST_LIB)),
            ("wit/tool.wit", TOOL_WIT.as_bytes().to_vec()),
            (".gitignore", b"target/\nCargo.lock\ntool.wasm\n".to_vec()),
        ],
    };
    let dir = dir(name);
    files
        .into_iter()
        .map(|(path, bytes)| File {
            path: format!("{dir}/{path}"),
            bytes,
        })
        .collect()
}

const PYTHON_APP: &str = include_str!("templates/tool/python/app.py");
const JAVASCRIPT_APP: &str = include_str!("templates/tool/javascript/app.js");
const JAVASCRIPT_PACKAGE: &str = include_str!("templates/tool/javascript/package.json");
const RUST_CARGO: &str = include_str!("templates/tool/rust/Cargo.toml");
const RUST_LIB: &str = include_str!("templates/tool/rust/src/lib.rs");
const TOOL_WIT: &str = include_str!("../tools/wit/tool.wit");

/// E-NEW-005: the directory's `murmur.yaml` cannot take the tool.
fn refuse(why: String, hint: &str) -> Diagnostic {
    Diagnostic::new(diag::E_NEW_005, format!("mur new --tool: {why}")).with_hint(hint)
}

/// `manifest` (a model capsule's `murmur.yaml` text) with an entry for tool `name` added to its
/// `tools:` list, or a new `tools:` list at its end.
pub fn add_entry(manifest_text: &str, name: &str, lang: Language) -> Result<String, Diagnostic> {
    let before = manifest::parse(manifest_text.as_bytes()).map_err(|d| {
        refuse(
            format!("murmur.yaml here cannot be read: {}", d.message),
            "fix murmur.yaml first (mur build . reports the same), then run mur new --tool again",
        )
    })?;
    if before.manifest.inference.is_none() {
        return Err(refuse(
            "murmur.yaml here is not a model capsule's (it has no inference block), and only a model calls tools"
                .into(),
            "run mur new --tool inside the source directory of a model capsule (`mur new --roster NAME --inference openai` scaffolds two)",
        ));
    }
    if before.manifest.tools.iter().any(|t| t.name == name) {
        return Err(refuse(
            format!("murmur.yaml already declares a tool named '{name}'"),
            "choose another name, or remove that entry first",
        ));
    }
    let item = |indent: &str| {
        format!(
            "{indent}- name: {name}\n{indent}  component: {}/{COMPONENT}\n{indent}  build:\n{indent}    language: {}\n",
            dir(name),
            lang.as_str()
        )
    };
    let lines: Vec<&str> = manifest_text.split_inclusive('\n').collect();
    let key = lines.iter().position(|l| {
        l.strip_prefix("tools:")
            .is_some_and(|rest| rest.trim().is_empty() || rest.trim_start().starts_with('#'))
    });
    let text = match key {
        None if lines.iter().any(|l| l.starts_with("tools:")) => {
            return Err(refuse(
                "murmur.yaml writes its tools list on one line, and mur new adds entries only to a block list".into(),
                "write the tools list one `- name: …` entry per line, or add the entry by hand",
            ));
        }
        None => {
            let mut t = manifest_text.to_string();
            if !t.is_empty() && !t.ends_with('\n') {
                t.push('\n');
            }
            t.push_str("# Tools the model may call (docs/reference/capsules.md#tools).\ntools:\n");
            t.push_str(&item("  "));
            t
        }
        Some(at) => {
            // The new entry goes first, at the indent of the list's first item.
            let indent = lines[at + 1..]
                .iter()
                .map(|l| l.trim_end_matches('\n'))
                .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
                .and_then(|l| l.find("- ").filter(|i| l[..*i].bytes().all(|b| b == b' ')))
                .map(|i| " ".repeat(i))
                .unwrap_or_else(|| "  ".into());
            let mut t: String = lines[..=at].concat();
            if !t.ends_with('\n') {
                t.push('\n');
            }
            t.push_str(&item(&indent));
            t.push_str(&lines[at + 1..].concat());
            t
        }
    };
    let after = manifest::parse(text.as_bytes()).map_err(|d| {
        refuse(
            format!("murmur.yaml would not parse with the new entry: {}", d.message),
            "add the entry by hand: `- {name: NAME, component: tools/NAME/tool.wasm, build: {language: LANG}}` under tools:",
        )
    })?;
    let added = after
        .manifest
        .tools
        .iter()
        .any(|t| t.name == name && matches!(&t.source, ToolSource::Wasm { build: Some(l), .. } if *l == lang));
    if !added || after.warnings.len() > before.warnings.len() {
        return Err(refuse(
            "murmur.yaml's tools list has a layout mur new cannot add to".into(),
            "add the entry by hand: `- {name: NAME, component: tools/NAME/tool.wasm, build: {language: LANG}}` under tools:",
        ));
    }
    Ok(text)
}

/// The lines after the file list.
pub fn next_steps(name: &str, lang: Language) -> Vec<String> {
    let dir = dir(name);
    vec![
        super::install_line(lang, &[&dir]),
        "mur build . && mur install -g <the .mur.zip it names>".to_string(),
        format!("the model now sees a tool named {name}; edit {dir}/ to make it yours"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: &str = "name: lead\nversion: 0.1.0\ninference:\n  provider: openai\n  model: m\n";

    fn tools_of(text: &str) -> Vec<(String, String)> {
        manifest::parse(text.as_bytes())
            .unwrap_or_else(|d| panic!("{}", d.render("")))
            .manifest
            .tools
            .into_iter()
            .map(|t| match t.source {
                ToolSource::Wasm { component, .. } => (t.name, component),
                ToolSource::Mcp { url, .. } => (t.name, url),
            })
            .collect()
    }

    #[test]
    fn an_entry_is_added_to_the_list_or_as_a_new_list() {
        let fresh = add_entry(MODEL, "words", Language::Python).unwrap_or_else(|d| panic!("{}", d.render("")));
        assert!(fresh.starts_with(MODEL), "the user's text stays as it was");
        assert_eq!(tools_of(&fresh), [("words".into(), "tools/words/tool.wasm".into())]);
        let second = add_entry(&fresh, "count", Language::JavaScript).unwrap_or_else(|d| panic!("{}", d.render("")));
        assert_eq!(
            tools_of(&second),
            [
                ("count".into(), "tools/count/tool.wasm".into()),
                ("words".into(), "tools/words/tool.wasm".into())
            ]
        );
        // A list at column 0 keeps its indent, comments and all.
        let flush = format!(
            "{MODEL}tools: # mine\n# the search server\n- {{name: s, mcp: 'https://s.example/mcp', allow: [q]}}\n"
        );
        let added = add_entry(&flush, "words", Language::Rust).unwrap_or_else(|d| panic!("{}", d.render("")));
        assert!(added.contains("tools: # mine\n- name: words\n"), "{added}");
        assert_eq!(tools_of(&added).len(), 2);
        // No trailing newline at the end of the file.
        assert_eq!(
            tools_of(
                &add_entry(MODEL.trim_end(), "w", Language::Python).unwrap_or_else(|d| panic!("{}", d.render("")))
            )
            .len(),
            1
        );
    }

    #[test]
    fn a_manifest_that_cannot_take_the_tool_is_refused() {
        let component = "name: c\nversion: 0.1.0\ncomponent: capsule.wasm\n";
        let cases: Vec<(String, &str)> = vec![
            (component.into(), "not a model capsule"),
            ("name: [\n".into(), "cannot be read"),
            (
                format!("{MODEL}tools: [{{name: words, component: t.wasm}}]\n"),
                "already declares a tool named 'words'",
            ),
            (
                format!("{MODEL}tools: [{{name: other, component: t.wasm}}]\n"),
                "on one line",
            ),
        ];
        for (text, words) in cases {
            let d = add_entry(&text, "words", Language::Python)
                .err()
                .unwrap_or_else(|| panic!("{text} was taken"));
            assert_eq!(d.code, diag::E_NEW_005);
            assert!(d.message.contains(words), "{:?} lacks {words:?}", d.message);
        }
        for bad in ["Words", "call-member", "a_b", ""] {
            assert_eq!(check_name(bad).err().map(|d| d.code), Some(diag::E_NEW_002), "{bad}");
        }
        assert!(check_name("word-count").is_ok());
    }

    #[test]
    fn every_language_writes_its_sources_under_the_tools_directory() {
        for lang in [Language::Python, Language::JavaScript, Language::Rust] {
            let files = files("words", lang);
            assert!(files.iter().all(|f| f.path.starts_with("tools/words/")), "{lang:?}");
            let text: String = files
                .iter()
                .map(|f| String::from_utf8_lossy(&f.bytes).into_owned())
                .collect();
            assert!(!text.contains("@NAME@") && text.contains("words"), "{lang:?}");
            assert!(
                files
                    .iter()
                    .any(|f| f.path == format!("tools/words/{}", super::super::toolchain::entry(lang))),
                "{lang:?}: mur build starts from its entry file"
            );
        }
    }
}
