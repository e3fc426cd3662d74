//! The inputs of the targets that check a credential (`mft1_verify`, `grant_open`): a genuine
//! `<tag>.<B64(payload)>.<B64(seal)>` string of the target's, changed the way the first input
//! byte says, so the fuzzer's mutations stay close to real credentials instead of being random
//! text.

/// The candidate for `data`: its first byte picks the genuine string (high nibble, modulo) and
/// the change (low nibble); the rest is the change's material. `None` for empty input.
pub fn candidate(genuine: &[&str], tag: &str, data: &[u8]) -> Option<String> {
    let (&mode, rest) = data.split_first()?;
    let base = *genuine.get(usize::from(mode >> 4) % genuine.len().max(1))?;
    let text = String::from_utf8_lossy(rest);
    let head = base.rsplit_once('.').map_or(base, |(h, _)| h);
    let seal = |s: &'_ str| s.rsplit_once('.').map_or("", |(_, seal)| seal).to_string();
    Some(match mode & 0x0f {
        // The bytes as they are.
        0 => text.into_owned(),
        // Spliced into the genuine string at a position the first of them picks.
        1 => {
            let at = rest.first().map_or(0, |b| usize::from(*b)) % (base.len() + 1);
            let at = (0..=at).rev().find(|i| base.is_char_boundary(*i)).unwrap_or(0);
            format!("{}{}{}", &base[..at], text, &base[at..])
        }
        // One byte of the genuine string overwritten.
        2 => {
            let mut b = base.as_bytes().to_vec();
            if let [pos, val, ..] = rest
                && !b.is_empty()
            {
                let i = usize::from(*pos) % b.len();
                b[i] = *val;
            }
            String::from_utf8_lossy(&b).into_owned()
        }
        // The genuine payload under another seal.
        3 => format!("{head}.{text}"),
        // The genuine seal over another payload.
        4 => format!("{tag}.{text}.{}", seal(base)),
        // One genuine string's seal on another's payload.
        _ => {
            let other = genuine[usize::from(mode) % genuine.len()];
            format!("{head}.{}{text}", seal(other))
        }
    })
}
