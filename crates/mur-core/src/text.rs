//! Bounding text a peer, a provider or a child process controls. Every place that quotes such
//! text cuts it here, so "peer text is bounded in bytes and stays valid UTF-8" holds in one place.

/// The longest prefix of `s` of at most `max` bytes that ends at a character boundary.
pub fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The longest suffix of `s` of at most `max` bytes that starts at a character boundary.
pub fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// `s` as HTML text or a quoted attribute value: the one escaping of everything `mur ui` renders
/// (record text comes from peers and providers). Control characters but tab and newline become
/// U+FFFD so nothing a record holds can change how the page parses.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\t' | '\n' => out.push(c),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escape_leaves_no_markup() {
        let cases: &[(&str, &str)] = &[
            ("", ""),
            ("plain é", "plain é"),
            ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
            ("a&b", "a&amp;b"),
            ("\"x\" 'y'", "&quot;x&quot; &#39;y&#39;"),
            ("a\u{0}b\rc\nd", "a\u{fffd}b\u{fffd}c\nd"),
        ];
        for (raw, want) in cases {
            assert_eq!(html_escape(raw), *want, "{raw:?}");
        }
    }

    #[test]
    fn cuts_land_on_character_boundaries() {
        // "é" is two bytes, "😀" four: every cut point inside one must move outwards of it.
        let cases: &[(&str, usize, &str, &str)] = &[
            ("", 0, "", ""),
            ("abc", 0, "", ""),
            ("abc", 2, "ab", "bc"),
            ("abc", 9, "abc", "abc"),
            ("éé", 1, "", ""),
            ("éé", 3, "é", "é"),
            ("a😀b", 4, "a", "b"),
            ("a😀b", 5, "a😀", "😀b"),
        ];
        for &(s, max, first, last) in cases {
            assert_eq!(head(s, max), first, "head({s:?}, {max})");
            assert_eq!(tail(s, max), last, "tail({s:?}, {max})");
            assert!(head(s, max).len() <= max && tail(s, max).len() <= max);
        }
    }
}
