//! The default guard (docs/guide.md#limits): a model capsule run without limits of its own is
//! still stopped, at [`DEFAULT_MAX_TURNS`] model turns per task and [`DEFAULT_MAX_TOKENS`] tokens
//! (a lone session's, or a formation's over every member). `--max-turns` and `--max-tokens` raise
//! or lower either; the word [`UNLIMITED`] lifts the default explicitly. A capsule's own
//! `inference.max_turns` and `inference.max_session_tokens` always hold: a flag only narrows them.

/// Model turns per task when neither `inference.max_turns` nor `--max-turns` sets them.
pub const DEFAULT_MAX_TURNS: u32 = 50;

/// Tokens (input plus output, over every model turn) of a lone session, or of a formation over
/// every member, when neither the manifest nor `--max-tokens` sets them.
pub const DEFAULT_MAX_TOKENS: u64 = 1_000_000;

/// The value of `--max-turns` / `--max-tokens` that lifts the default guard.
pub const UNLIMITED: &str = "unlimited";

/// A limit as the command line gave it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Limit {
    /// Not given: the default guard holds unless the manifest sets its own.
    #[default]
    Default,
    /// A number.
    Set(u64),
    /// `unlimited`: no default guard (the manifest's own limit still holds).
    Unlimited,
}

impl Limit {
    /// The value to hand on a command line (`None` for [`Limit::Default`]).
    pub fn arg(self) -> Option<String> {
        match self {
            Limit::Default => None,
            Limit::Set(n) => Some(n.to_string()),
            Limit::Unlimited => Some(UNLIMITED.to_string()),
        }
    }
}

/// `--max-tokens` as written: a budget ([`crate::budget::parse_limit`]) or `unlimited`.
pub fn parse_tokens(text: &str) -> Result<Limit, String> {
    if text.trim().eq_ignore_ascii_case(UNLIMITED) {
        return Ok(Limit::Unlimited);
    }
    crate::budget::parse_limit(text).map(Limit::Set)
}

/// `--max-turns` as written: a whole number from 1 to 2^32-1, or `unlimited`.
pub fn parse_turns(text: &str) -> Result<Limit, String> {
    let t = text.trim();
    if t.eq_ignore_ascii_case(UNLIMITED) {
        return Ok(Limit::Unlimited);
    }
    let shown = crate::diag::shown(text);
    match t.parse::<u64>() {
        Ok(0) => Err(format!(
            "'{shown}' is zero: a task with no model turn cannot answer; write `unlimited` to lift the limit"
        )),
        Ok(n) if n <= u64::from(u32::MAX) => Ok(Limit::Set(n)),
        Ok(_) => Err(format!("'{shown}' is too large: the most is {}", u32::MAX)),
        Err(_) => Err(format!(
            "'{shown}' is not a whole number: give a number of model turns per task, or `unlimited`"
        )),
    }
}

/// Where a limit in force comes from, for the launch line and a refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The capsule's murmur.yaml.
    Manifest,
    /// The command line's flag.
    Flag,
    /// The default guard.
    Default,
}

/// The limit in force, from the flag and the manifest's own: the smaller of the two; the default
/// when neither is given; the manifest's (or none) when the flag says `unlimited`.
pub fn resolve(flag: Limit, manifest: Option<u64>, default: u64) -> (Option<u64>, Source) {
    match (flag, manifest) {
        (Limit::Set(f), Some(m)) if m <= f => (Some(m), Source::Manifest),
        (Limit::Set(f), _) => (Some(f), Source::Flag),
        (_, Some(m)) => (Some(m), Source::Manifest),
        (Limit::Default, None) => (Some(default), Source::Default),
        (Limit::Unlimited, None) => (None, Source::Flag),
    }
}

/// Model turns per task: [`resolve`] with [`DEFAULT_MAX_TURNS`].
pub fn turns(flag: Limit, manifest: Option<u32>) -> (Option<u32>, Source) {
    let (n, s) = resolve(flag, manifest.map(u64::from), u64::from(DEFAULT_MAX_TURNS));
    (n.map(|n| u32::try_from(n).unwrap_or(u32::MAX)), s)
}

/// Tokens: [`resolve`] with [`DEFAULT_MAX_TOKENS`].
pub fn tokens(flag: Limit, manifest: Option<u64>) -> (Option<u64>, Source) {
    resolve(flag, manifest, DEFAULT_MAX_TOKENS)
}

fn part(what: &str, limit: Option<u64>, source: Source, key: &str, flag: &str) -> String {
    match (limit, source) {
        (None, _) => format!("{what}: unlimited ({flag} unlimited)"),
        (Some(n), Source::Default) => {
            format!("{what}: {n} (the default; raise with {flag} N, lift with {flag} unlimited)")
        }
        (Some(n), Source::Flag) => format!("{what}: {n} ({flag})"),
        (Some(n), Source::Manifest) => format!("{what}: {n} ({key})"),
    }
}

/// The guard as shown at launch: `guard: model turns per task: 50 (the default; …), tokens: …`.
/// `scope` says whose tokens ("session" or "formation").
pub fn describe(turns: (Option<u32>, Source), tokens: (Option<u64>, Source), scope: &str) -> String {
    format!(
        "guard: {}; {}",
        part(
            "model turns per task",
            turns.0.map(u64::from),
            turns.1,
            "inference.max_turns",
            "--max-turns"
        ),
        part(
            &format!("tokens per {scope}"),
            tokens.0,
            tokens.1,
            "inference.max_session_tokens",
            "--max-tokens"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a flag's text parses to: the limit, or a phrase of the refusal.
    type Parsed = Result<Limit, &'static str>;
    /// What [`resolve`] answers.
    type InForce = (Option<u64>, Source);

    #[test]
    fn parsing_the_flags() {
        let cases: &[(&str, Parsed, Parsed)] = &[
            ("unlimited", Ok(Limit::Unlimited), Ok(Limit::Unlimited)),
            (" Unlimited ", Ok(Limit::Unlimited), Ok(Limit::Unlimited)),
            ("200", Ok(Limit::Set(200)), Ok(Limit::Set(200))),
            ("0", Err("is zero"), Err("is zero")),
            ("-3", Err("is negative"), Err("is not a whole number")),
            ("lots", Err("is not a whole number"), Err("is not a whole number")),
            ("4294967296", Ok(Limit::Set(4_294_967_296)), Err("too large")),
        ];
        for (text, tokens, turns) in cases {
            for (got, want) in [(parse_tokens(text), tokens), (parse_turns(text), turns)] {
                match (got, want) {
                    (Ok(g), Ok(w)) => assert_eq!(g, *w, "{text}"),
                    (Err(g), Err(w)) => assert!(g.contains(w), "{text}: {g}"),
                    (g, w) => panic!("{text}: got {g:?}, want {w:?}"),
                }
            }
        }
    }

    #[test]
    fn the_limit_in_force() {
        let cases: &[(Limit, Option<u64>, InForce)] = &[
            (Limit::Default, None, (Some(7), Source::Default)),
            (Limit::Default, Some(3), (Some(3), Source::Manifest)),
            (Limit::Default, Some(30), (Some(30), Source::Manifest)),
            (Limit::Set(5), None, (Some(5), Source::Flag)),
            (Limit::Set(50), None, (Some(50), Source::Flag)),
            (Limit::Set(5), Some(3), (Some(3), Source::Manifest)),
            (Limit::Set(5), Some(5), (Some(5), Source::Manifest)),
            (Limit::Set(2), Some(3), (Some(2), Source::Flag)),
            (Limit::Unlimited, None, (None, Source::Flag)),
            (Limit::Unlimited, Some(3), (Some(3), Source::Manifest)),
        ];
        for (flag, manifest, want) in cases {
            assert_eq!(resolve(*flag, *manifest, 7), *want, "{flag:?} {manifest:?}");
        }
        assert_eq!(turns(Limit::Default, None), (Some(DEFAULT_MAX_TURNS), Source::Default));
        assert_eq!(
            tokens(Limit::Default, None),
            (Some(DEFAULT_MAX_TOKENS), Source::Default)
        );
        assert_eq!(turns(Limit::Set(u64::MAX), None), (Some(u32::MAX), Source::Flag));
    }

    #[test]
    fn the_launch_line_says_where_each_limit_comes_from_and_how_to_change_it() {
        let cases = [
            (
                turns(Limit::Default, None),
                tokens(Limit::Default, None),
                "guard: model turns per task: 50 (the default; raise with --max-turns N, lift with --max-turns unlimited); \
                 tokens per session: 1000000 (the default; raise with --max-tokens N, lift with --max-tokens unlimited)",
            ),
            (
                turns(Limit::Default, Some(25)),
                tokens(Limit::Unlimited, None),
                "guard: model turns per task: 25 (inference.max_turns); tokens per session: unlimited (--max-tokens unlimited)",
            ),
            (
                turns(Limit::Set(9), None),
                tokens(Limit::Set(10), Some(20)),
                "guard: model turns per task: 9 (--max-turns); tokens per session: 10 (--max-tokens)",
            ),
        ];
        for (t, k, want) in cases {
            assert_eq!(describe(t, k, "session"), want);
        }
    }

    #[test]
    fn a_limit_is_handed_on_as_written() {
        assert_eq!(Limit::Default.arg(), None);
        assert_eq!(Limit::Set(4).arg().as_deref(), Some("4"));
        assert_eq!(Limit::Unlimited.arg().as_deref(), Some("unlimited"));
    }
}
