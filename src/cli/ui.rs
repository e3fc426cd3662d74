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
        open_browser(&bound.launch_url());
    }
    bound
        .serve()
        .map_err(|e| Diagnostic::new(diag::E_UI_001, format!("the server stopped: {e}")))?;
    Ok(0)
}

/// Hands the browser a one-time launch address (not the token: argv is readable by every user
/// of the machine), where one is available.
fn open_browser(url: &str) {
    let opener = ["xdg-open", "open"].into_iter().find(|p| {
        std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
    });
    let Some(opener) = opener else {
        eprintln!("mur ui: no browser opener (xdg-open) found: open the URL above yourself");
        return;
    };
    let spawned = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("mur ui: {opener} cannot be run ({e}): open the URL above yourself");
    }
}
