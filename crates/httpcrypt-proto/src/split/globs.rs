//! The origin's public path globs (§S1) and their matcher.

use crate::error::{Error, Result};

/// The origin's public path globs (§S1): `*` matches within a path
/// segment, `**` across segments, `?` one character other than `/`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublicPaths {
    globs: Vec<String>,
}

impl PublicPaths {
    /// Globs, each starting with `/`.
    pub fn new(globs: impl IntoIterator<Item = String>) -> Result<Self> {
        let globs: Vec<String> = globs.into_iter().collect();
        if globs.iter().any(|g| !g.starts_with('/')) {
            return Err(Error::BadNoncePath);
        }
        Ok(PublicPaths { globs })
    }

    /// Whether no glob is configured.
    pub fn is_empty(&self) -> bool {
        self.globs.is_empty()
    }

    /// Whether `path` (without query) matches one of the globs.
    pub fn matches(&self, path: &str) -> bool {
        self.globs
            .iter()
            .any(|g| glob_match(g.as_bytes(), path.as_bytes()))
    }
}

/// Glob matching by dynamic programming over (pattern, text) positions:
/// linear memory, no backtracking blow-up on hostile paths.
fn glob_match(pat: &[u8], text: &[u8]) -> bool {
    // Tokens: Literal(b), One, Star (no '/'), DoubleStar (anything).
    #[derive(Clone, Copy)]
    enum T {
        Lit(u8),
        One,
        Star,
        Any,
    }
    let mut toks = Vec::with_capacity(pat.len());
    let mut i = 0;
    while i < pat.len() {
        match pat[i] {
            b'*' if pat.get(i + 1) == Some(&b'*') => {
                toks.push(T::Any);
                i += 2;
            }
            b'*' => {
                toks.push(T::Star);
                i += 1;
            }
            b'?' => {
                toks.push(T::One);
                i += 1;
            }
            c => {
                toks.push(T::Lit(c));
                i += 1;
            }
        }
    }
    // reach[j]: the first k tokens can match text[..j].
    let mut reach = vec![false; text.len() + 1];
    reach[0] = true;
    for t in toks {
        let mut next = vec![false; text.len() + 1];
        match t {
            T::Lit(c) => {
                for j in 0..text.len() {
                    next[j + 1] = reach[j] && text[j] == c;
                }
            }
            T::One => {
                for j in 0..text.len() {
                    next[j + 1] = reach[j] && text[j] != b'/';
                }
            }
            T::Star | T::Any => {
                let mut on = false;
                for j in 0..=text.len() {
                    on = reach[j] || (on && j > 0 && (matches!(t, T::Any) || text[j - 1] != b'/'));
                    next[j] = on;
                }
            }
        }
        reach = next;
    }
    reach[text.len()]
}
