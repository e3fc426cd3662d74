//! `mur ui`: serves the live view of this user's formations on 127.0.0.1 and prints its URL,
//! which carries the page's access token (printed once, for the operator only).

use super::{Outcome, UiArgs};
use crate::diag::{self, Diagnostic};
use crate::paths::MurHome;

pub fn run(args: &UiArgs) -> Outcome {
    let port = args.port.unwrap_or(0);
    let bound = crate::ui::bind(crate::ui::UiOptions {
        home: MurHome::from_env(),
        port,
    })
    .map_err(|e| Diagnostic::new(diag::E_UI_001, format!("cannot serve on 127.0.0.1:{port}: {e}")))?;
    let url = bound.url();
    println!(
        "mur ui: serving the records of {} at",
        MurHome::from_env().records().display()
    );
    println!("{url}");
    println!("(the URL carries this page's token: open it here, share it with no one; Ctrl-C stops)");
    if args.open {
        match bound.write_launch_page() {
            Ok(page) => open_browser(&page),
            Err(e) => eprintln!("mur ui: the launch page cannot be written ({e}): open the URL above yourself"),
        }
    }
    bound
        .serve()
        .map_err(|e| Diagnostic::new(diag::E_UI_001, format!("the server stopped: {e}")))?;
    Ok(0)
}

/// Hands the browser the `file://` address of the owner-only launch page (never the token nor
/// the launch code: argv is readable by every user of the machine), where a browser is
/// available: `$BROWSER`, else `xdg-open` (or `open`) on `PATH`.
/// With none, the URL printed above is the way in; that is a note, not an error.
fn open_browser(url: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let on_path = |p: &str| {
        if p.contains('/') {
            return std::path::Path::new(p).is_file();
        }
        std::env::split_paths(&path).any(|d| d.join(p).is_file())
    };
    let browser = std::env::var("BROWSER").ok();
    let Some(argv) = opener(browser.as_deref(), on_path, url) else {
        eprintln!(
            "mur ui: no browser found ($BROWSER is unset and no xdg-open is on PATH): open the URL above yourself"
        );
        return;
    };
    let spawned = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    match spawned {
        // Reaped on its own thread: an opener that returns at once leaves no zombie behind.
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
        }
        Err(e) => eprintln!(
            "mur ui: {} cannot be run ({e}): open the URL above yourself",
            crate::diag::shown(&argv[0])
        ),
    }
}

/// The command that opens `url`: the first of `$BROWSER`'s `:`-separated commands that exists
/// (its `%s` replaced by the URL, or the URL added as its last argument), else `xdg-open` or
/// `open`.
fn opener(browser: Option<&str>, exists: impl Fn(&str) -> bool, url: &str) -> Option<Vec<String>> {
    for command in browser.unwrap_or_default().split(':') {
        let words: Vec<&str> = command.split_whitespace().collect();
        let Some(program) = words.first() else { continue };
        if !exists(program) {
            continue;
        }
        let mut argv: Vec<String> = words.iter().map(|w| w.replace("%s", url)).collect();
        if !words.iter().skip(1).any(|w| w.contains("%s")) {
            argv.push(url.to_owned());
        }
        return Some(argv);
    }
    ["xdg-open", "open"]
        .into_iter()
        .find(|p| exists(p))
        .map(|p| vec![p.to_owned(), url.to_owned()])
}

#[cfg(test)]
mod tests {
    use super::opener;

    #[test]
    fn the_browser_is_browser_then_xdg_open() {
        let url = "http://127.0.0.1:1/?launch=ab";
        // (BROWSER, programs that exist, argv)
        type Case<'a> = (Option<&'a str>, &'a [&'a str], Option<&'a [&'a str]>);
        let table: &[Case] = &[
            (None, &[], None),
            (None, &["xdg-open"], Some(&["xdg-open", url])),
            (Some(""), &["open"], Some(&["open", url])),
            (Some("firefox"), &["firefox", "xdg-open"], Some(&["firefox", url])),
            (
                Some("/opt/b --new-tab"),
                &["/opt/b"],
                Some(&["/opt/b", "--new-tab", url]),
            ),
            (Some("nope:w3m %s"), &["w3m"], Some(&["w3m", url])),
            (Some("nope"), &["xdg-open"], Some(&["xdg-open", url])),
            (Some("nope"), &[], None),
        ];
        for (browser, exists, want) in table {
            let got = opener(*browser, |p: &str| exists.contains(&p), url);
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{browser:?} {exists:?}");
        }
    }
}
