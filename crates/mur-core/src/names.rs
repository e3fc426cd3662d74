//! Member names and artifact names (docs/reference/formation.md#identifiers). Pure.

/// Why a name part is refused; rendered after the name in messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("is empty")]
    Empty,
    #[error("is longer than {0} characters")]
    TooLong(usize),
    #[error("must start with a lowercase letter")]
    Start,
    #[error("may hold only lowercase letters, digits and '-'")]
    Chars,
    #[error("must not start or end with '-'")]
    Dash,
}

/// A member name matches `^[a-z][a-z0-9-]{0,31}$`.
pub fn check_member(name: &str) -> Result<(), NameError> {
    let first = name.bytes().next().ok_or(NameError::Empty)?;
    if !first.is_ascii_lowercase() {
        return Err(NameError::Start);
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(NameError::Chars);
    }
    if name.len() > 32 {
        return Err(NameError::TooLong(32));
    }
    Ok(())
}

pub fn is_member(name: &str) -> bool {
    check_member(name).is_ok()
}

/// An artifact name part: 1–100 of `[a-z0-9-]`, not starting or ending in `-`.
pub fn check_part(part: &str) -> Result<(), NameError> {
    if part.is_empty() {
        return Err(NameError::Empty);
    }
    if !part
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(NameError::Chars);
    }
    if part.len() > 100 {
        return Err(NameError::TooLong(100));
    }
    if part.starts_with('-') || part.ends_with('-') {
        return Err(NameError::Dash);
    }
    Ok(())
}

/// A full artifact name `<scope>/<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArtifactName {
    pub scope: String,
    pub name: String,
}

impl std::fmt::Display for ArtifactName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.scope, self.name)
    }
}

/// Why a full artifact name is refused (the text follows `is not a full artifact name: `).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactNameError {
    #[error("expected exactly one '/', between the scope and the name")]
    Slashes,
    #[error("the scope {0}")]
    Scope(NameError),
    #[error("the name {0}")]
    Name(NameError),
}

impl ArtifactName {
    pub fn parse(full: &str) -> Result<ArtifactName, ArtifactNameError> {
        let mut it = full.split('/');
        let (scope, name) = match (it.next(), it.next(), it.next()) {
            (Some(s), Some(n), None) => (s, n),
            _ => return Err(ArtifactNameError::Slashes),
        };
        check_part(scope).map_err(ArtifactNameError::Scope)?;
        check_part(name).map_err(ArtifactNameError::Name)?;
        Ok(ArtifactName {
            scope: scope.into(),
            name: name.into(),
        })
    }

    /// `local/<name>`: what `mur install` files a `.mur.zip` as.
    pub fn local(name: &str) -> ArtifactName {
        ArtifactName {
            scope: "local".into(),
            name: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_names() {
        let table: &[(&str, Result<(), NameError>)] = &[
            ("a", Ok(())),
            ("planner", Ok(())),
            ("a-1", Ok(())),
            (&"a".repeat(32), Ok(())),
            (&"a".repeat(33), Err(NameError::TooLong(32))),
            ("", Err(NameError::Empty)),
            ("1a", Err(NameError::Start)),
            ("-a", Err(NameError::Start)),
            ("Planner", Err(NameError::Start)),
            ("a_b", Err(NameError::Chars)),
            ("aé", Err(NameError::Chars)),
        ];
        for (n, want) in table {
            assert_eq!(&check_member(n), want, "{n:?}");
        }
    }

    #[test]
    fn artifact_names() {
        assert_eq!(ArtifactName::parse("local/coder").unwrap().to_string(), "local/coder");
        let table: &[(&str, ArtifactNameError)] = &[
            ("coder", ArtifactNameError::Slashes),
            ("a/b/c", ArtifactNameError::Slashes),
            ("/coder", ArtifactNameError::Scope(NameError::Empty)),
            ("Local/coder", ArtifactNameError::Scope(NameError::Chars)),
            ("local/-coder", ArtifactNameError::Name(NameError::Dash)),
            ("local/coder-", ArtifactNameError::Name(NameError::Dash)),
        ];
        for (n, want) in table {
            assert_eq!(ArtifactName::parse(n).as_ref(), Err(want), "{n:?}");
        }
    }
}
