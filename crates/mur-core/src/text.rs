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

#[cfg(test)]
mod tests {
    use super::*;

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
