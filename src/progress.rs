//! A spinner on stderr for the slow steps a person waits on: compiling a component (seconds for
//! a Python runtime), at `mur install`, a cold launch or a lone `mur run --capsule`. It shows
//! only when stderr is a terminal (as cargo's does) and says what is being compiled; piped or
//! redirected output gets nothing, so scripts and logs see exactly what they saw before.

use std::io::Write;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the spinner redraws.
const TICK: Duration = Duration::from_millis(100);
const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// A running spinner; [`Spinner::finish`] replaces it with its closing line. Dropping it clears
/// the line and prints nothing more.
pub struct Spinner {
    running: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    prefix: String,
    started: Instant,
}

impl Spinner {
    /// `<prefix><frame> <what> <seconds>s`, redrawn in place, when stderr is a terminal.
    pub fn start(prefix: &str, what: String) -> Spinner {
        use std::io::IsTerminal;
        let started = Instant::now();
        let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
        if !std::io::stderr().is_terminal() || dumb {
            return Spinner {
                running: None,
                prefix: prefix.to_string(),
                started,
            };
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let line_prefix = prefix.to_string();
        let thread = std::thread::Builder::new()
            .name("mur-progress".into())
            .spawn(move || {
                let mut frame = 0usize;
                loop {
                    let secs = started.elapsed().as_secs_f64();
                    let line = format!(
                        "\r\x1b[2K{line_prefix}{} {what} {secs:.0}s",
                        FRAMES[frame % FRAMES.len()]
                    );
                    // A terminal that went away must not end the command.
                    let _ = std::io::stderr().lock().write_all(line.as_bytes());
                    frame += 1;
                    match stopped.recv_timeout(TICK) {
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        _ => break,
                    }
                }
                let _ = std::io::stderr().lock().write_all(b"\r\x1b[2K");
            })
            .ok();
        Spinner {
            running: thread.map(|t| (stop, t)),
            prefix: prefix.to_string(),
            started,
        }
    }

    /// Stops the spinner and, on a terminal, leaves `<prefix><done> in <seconds> s` in its place.
    pub fn finish(mut self, done: &str) {
        if self.stop() {
            let secs = self.started.elapsed().as_secs_f64();
            let _ = writeln!(std::io::stderr().lock(), "{}{done} in {secs:.1} s", self.prefix);
        }
    }

    /// Ends the spinner's thread; whether one ran.
    fn stop(&mut self) -> bool {
        match self.running.take() {
            Some((stop, thread)) => {
                drop(stop);
                let _ = thread.join();
                true
            }
            None => false,
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop();
    }
}
