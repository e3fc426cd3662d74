//! Facts about processes on this host: start time tokens and liveness.
//!
//! A pid alone can be reused; a pid together with its start time (clock ticks since boot, field
//! 22 of `/proc/<pid>/stat`) names one process for its whole life. Running records, formation
//! markers and `mur stop` all identify processes this way.

use std::path::Path;

/// The start time of `pid` as the host reports it, as a decimal string; `None` if unreadable.
pub fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat")).ok()?;
    parse_start_field(&stat)
}

/// This process's own start token.
pub fn own_start() -> Option<String> {
    process_start(std::process::id())
}

/// Field 22 of a `/proc/<pid>/stat` line. The command name (field 2) is parenthesised and may
/// itself contain spaces and parentheses, so fields are counted after its last `)`.
fn parse_start_field(stat: &str) -> Option<String> {
    let after = &stat[stat.rfind(')')? + 1..];
    // After the name come fields 3, 4, …; field 22 is the 20th of them.
    let field = after.split_whitespace().nth(19)?;
    field.bytes().all(|b| b.is_ascii_digit()).then(|| field.to_string())
}

/// True when `pid` exists and, if `start` is given and non-empty, still has that start token.
pub fn is_alive(pid: u32, start: Option<&str>) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    match process_start(pid) {
        None => false,
        Some(now) => match start {
            Some(s) if !s.is_empty() => now == s,
            _ => !is_zombie(pid),
        },
    }
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(Path::new("/proc").join(pid.to_string()).join("stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 1..].trim_start().starts_with('Z')))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_field_survives_odd_command_names() {
        let line = "4242 (we ird) (name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_start_field(line).as_deref(), Some("987654"));
        assert_eq!(parse_start_field("garbage"), None);
    }

    #[test]
    fn own_process_is_alive_with_its_start() {
        let start = own_start().expect("procfs readable");
        assert!(is_alive(std::process::id(), Some(&start)));
        assert!(!is_alive(std::process::id(), Some("1")));
        assert!(!is_alive(0, None));
    }
}
