//! Who may read `mur ui`: a request is served only when its `Host` is exactly the loopback
//! address and port the server listens on (a page of another site that rebinds its name to
//! 127.0.0.1 sends its own name), when it comes from no other origin (`Origin`, and
//! `Sec-Fetch-Site` where a browser sends it), and when it carries the UI's token.
//!
//! The token is 32 random bytes from the OS, printed once in the URL for the operator. The first
//! page load presents it as `?token=`; the server answers with an `HttpOnly; SameSite=Strict`
//! cookie and a redirect to the same path without it, so the token leaves the address bar and the
//! history, the script never sees it, the page's own requests (assets, the event stream, which
//! cannot set headers) carry it, and no other site's request does. Cookies do not tell ports
//! apart, so the cookie's name carries the port. Every comparison takes constant time.
//!
//! `--open` hands the browser neither: a browser's argv is every user's to read. It gets the
//! `file://` address of a 0600 page in the owner-only `~/.murmur/ui/` that carries a one-time
//! launch code, traded once, from whatever site, for the same cookie.

use crate::secret::Secret;

/// The decision for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Allow,
    /// The token came in the query and was right: set the cookie and redirect to `location`.
    Adopt { location: String },
    /// The one-time launch code of `--open`'s launch page came in the query: the caller takes
    /// it (so it works once), then sets the cookie and sends the browser on to `location`.
    Launch { location: String },
    /// Refuse with this status and reason.
    Refuse(u16, &'static str),
}

/// The UI's access token (or its launch code), as lowercase hex: a [`Secret`], shown only in the
/// operator's URL, the launch page and the cookie.
#[derive(Debug, Clone)]
pub struct Token(Secret);

impl Token {
    /// A fresh token from the OS's random source.
    pub fn random() -> std::io::Result<Token> {
        let mut bytes = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::getrandom(&mut bytes[..]).map_err(std::io::Error::other)?;
        Ok(Token(Secret::new(crate::digest::hex(&bytes[..]))))
    }

    pub fn as_str(&self) -> &str {
        self.0.reveal()
    }

    pub fn matches(&self, given: &str) -> bool {
        constant_time_eq(self.0.reveal().as_bytes(), given.as_bytes())
    }
}

/// `a == b` in time that depends only on their lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keeps the optimiser from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// The cookie's name for the server on `port`.
pub fn cookie_name(port: u16) -> String {
    format!("mur_ui_{port}")
}

/// The `Set-Cookie` value that hands the token to the browser.
pub fn set_cookie(port: u16, token: &Token) -> String {
    format!(
        "{}={}; Path=/; HttpOnly; SameSite=Strict",
        cookie_name(port),
        token.as_str()
    )
}

/// What one request's head says, as far as the decision goes.
pub struct Request<'a> {
    pub host: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
    pub cookie: Option<&'a str>,
    pub path: &'a str,
    pub query: &'a str,
}

/// Decides whether the server on `127.0.0.1:port` holding `token` (and, until it is used, the
/// one-time `launch` code) serves `r`.
pub fn decide(r: &Request<'_>, port: u16, token: &Token, launch: Option<&Token>) -> Verdict {
    let own = format!("127.0.0.1:{port}");
    if r.host != Some(own.as_str()) {
        return Verdict::Refuse(421, "the Host header must be this server's loopback address");
    }
    let location = || {
        let rest: Vec<&str> = r
            .query
            .split('&')
            .filter(|p| !p.is_empty() && !matches!(p.split('=').next(), Some("token" | "launch")))
            .collect();
        if rest.is_empty() {
            r.path.to_owned()
        } else {
            format!("{}?{}", r.path, rest.join("&"))
        }
    };
    // The launch code comes from the owner-only page `--open` wrote, a `file://` page: another
    // site to the browser. Only whoever read that page holds the code, so where the request
    // comes from says nothing more; every other request must come from this origin.
    if let Some(given) = query_value(r.query, "launch")
        && launch.is_some_and(|l| l.matches(given))
    {
        return Verdict::Launch { location: location() };
    }
    if let Some(origin) = r.origin
        && origin != format!("http://{own}")
    {
        return Verdict::Refuse(403, "requests from another origin are refused");
    }
    if let Some(site) = r.sec_fetch_site
        && !matches!(site, "same-origin" | "none")
    {
        return Verdict::Refuse(403, "requests from another site are refused");
    }
    let from_cookie = r.cookie.and_then(|c| cookie_value(c, &cookie_name(port)));
    if from_cookie.is_some_and(|v| token.matches(v)) {
        return Verdict::Allow;
    }
    if let Some(given) = query_value(r.query, "token") {
        if token.matches(given) {
            return Verdict::Adopt { location: location() };
        }
        return Verdict::Refuse(403, "the token is not this server's");
    }
    if query_value(r.query, "launch").is_some() {
        return Verdict::Refuse(403, "the launch address works once; open the URL `mur ui` printed");
    }
    Verdict::Refuse(401, "open the URL `mur ui` printed: it carries the token")
}

fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header
        .split(';')
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

fn query_value<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_own_host_same_origin_and_the_token_pass() {
        let token = Token(Secret::new("ab".repeat(32)));
        let good = token.as_str().to_owned();
        let cookie = format!("other=1; mur_ui_8080={good}");
        let wrong_port_cookie = format!("mur_ui_9090={good}");
        let query = format!("token={good}&x=1");
        let bad_query = format!("token={}", "cd".repeat(32));
        let launch = Token(Secret::new("ef".repeat(32)));
        let launch_query = format!("launch={}", launch.as_str());
        let req = |host, origin, site, cookie, query| Request {
            host,
            origin,
            sec_fetch_site: site,
            cookie,
            path: "/formation/frm_x",
            query,
        };
        let h = Some("127.0.0.1:8080");
        // (request, verdict)
        let table: Vec<(Request, Verdict)> = vec![
            (req(h, None, None, Some(cookie.as_str()), ""), Verdict::Allow),
            (
                req(
                    h,
                    Some("http://127.0.0.1:8080"),
                    Some("same-origin"),
                    Some(cookie.as_str()),
                    "",
                ),
                Verdict::Allow,
            ),
            (
                req(h, None, Some("none"), None, query.as_str()),
                Verdict::Adopt {
                    location: "/formation/frm_x?x=1".into(),
                },
            ),
            (req(h, None, None, None, ""), Verdict::Refuse(401, "")),
            (
                req(h, None, None, None, launch_query.as_str()),
                Verdict::Launch {
                    location: "/formation/frm_x".into(),
                },
            ),
            // The launch page is a file: its request is another site's, and still admitted.
            (
                req(h, None, Some("cross-site"), None, launch_query.as_str()),
                Verdict::Launch {
                    location: "/formation/frm_x".into(),
                },
            ),
            (
                req(Some("evil.example:8080"), None, None, None, launch_query.as_str()),
                Verdict::Refuse(421, ""),
            ),
            (req(h, None, None, None, "launch=ef"), Verdict::Refuse(403, "")),
            (
                req(h, None, Some("cross-site"), None, "launch=ef"),
                Verdict::Refuse(403, ""),
            ),
            (
                req(h, None, None, Some(wrong_port_cookie.as_str()), ""),
                Verdict::Refuse(401, ""),
            ),
            (req(h, None, None, None, bad_query.as_str()), Verdict::Refuse(403, "")),
            (
                req(Some("localhost:8080"), None, None, Some(cookie.as_str()), ""),
                Verdict::Refuse(421, ""),
            ),
            (
                req(Some("evil.example:8080"), None, None, Some(cookie.as_str()), ""),
                Verdict::Refuse(421, ""),
            ),
            (
                req(None, None, None, Some(cookie.as_str()), ""),
                Verdict::Refuse(421, ""),
            ),
            (
                req(h, Some("http://evil.example"), None, Some(cookie.as_str()), ""),
                Verdict::Refuse(403, ""),
            ),
            (
                req(h, None, Some("cross-site"), Some(cookie.as_str()), ""),
                Verdict::Refuse(403, ""),
            ),
        ];
        for (i, (r, want)) in table.iter().enumerate() {
            let got = decide(r, 8080, &token, Some(&launch));
            let same = match (&got, want) {
                (Verdict::Refuse(a, _), Verdict::Refuse(b, _)) => a == b,
                (a, b) => a == b,
            };
            assert!(same, "case {i}: {got:?}, want {want:?}");
        }
    }

    #[test]
    fn tokens_are_random_and_compared_whole() {
        let a = Token::random().unwrap();
        let b = Token::random().unwrap();
        assert_eq!(a.as_str().len(), 64);
        assert_ne!(a.as_str(), b.as_str());
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
