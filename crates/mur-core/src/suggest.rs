//! "Did you mean": the known spellings close to a misspelt one, for messages about unknown keys
//! and capsules that are not installed.

/// The candidates close to `word`, closest first (ties in the candidates' order): at most a
/// couple of edits apart (a transposition counts as one), or one a prefix of the other (a key
/// missing its `_secs`).
pub fn similar<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let word_lower = word.to_lowercase();
    let mut found: Vec<(usize, usize, &str)> = candidates
        .into_iter()
        .enumerate()
        .filter(|(_, c)| *c != word)
        .filter_map(|(i, c)| {
            let c_lower = c.to_lowercase();
            let distance = edits(&word_lower, &c_lower);
            let shorter = word_lower.chars().count().min(c_lower.chars().count());
            let near = distance <= 1 + shorter / 6;
            let prefix = shorter >= 4 && (c_lower.starts_with(&word_lower) || word_lower.starts_with(&c_lower));
            (near || prefix).then_some((distance, i, c))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, _, c)| c).collect()
}

/// The closest candidate to `word`, if any is close.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    similar(word, candidates).into_iter().next()
}

/// Edits between `a` and `b`: insertions, deletions, substitutions and adjacent transpositions
/// (optimal string alignment).
fn edits(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in rows[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = d;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspellings_find_their_key() {
        let keys = ["name", "version", "inference", "lifecycle", "tools"];
        assert_eq!(closest("inferance", keys), Some("inference"));
        assert_eq!(closest("lifecylce", keys), Some("lifecycle"));
        assert_eq!(closest("Version", keys), Some("version"));
        assert_eq!(closest("flavour", keys), None);
        assert_eq!(closest("name", keys), None, "a known key is no suggestion");
    }

    #[test]
    fn a_key_missing_its_suffix_finds_it() {
        let keys = ["task_acceptance", "input_timeout_secs", "queue_depth"];
        assert_eq!(closest("input_timeout", keys), Some("input_timeout_secs"));
        assert_eq!(closest("task_acceptence", keys), Some("task_acceptance"));
        assert_eq!(closest("in", keys), None, "too short to be a prefix");
    }

    #[test]
    fn capsule_names_that_differ_in_more_than_a_slip_are_not_similar() {
        let installed = ["local/crew-lead", "local/crew-worker"];
        assert_eq!(similar("local/crew-laed", installed), ["local/crew-lead"]);
        assert_eq!(similar("local/crewlead", installed), ["local/crew-lead"]);
        assert!(similar("local/scout", installed).is_empty());
        assert_eq!(similar("local/crew-worker", ["local/crew-lead"]), Vec::<&str>::new());
    }
}
