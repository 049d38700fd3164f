//! Which answers are public (spec/split-serving.md §S1): the one rule the
//! origin applies before it lets a body travel as CLEAR records.
//!
//! A glob is matched against the inner request path *after* normalisation
//! (RFC 3986 §6.2.2), and a path that a server behind the origin could
//! resolve to something other than what it spells is never public: an
//! encoded `.`, `/` or `\`, a dot segment, an empty segment (`//`), a `\`.
//! An answer that may be personal is never public either: one to a request
//! carrying `Cookie` or `Authorization`, one that sets a cookie, one marked
//! `Cache-Control: private` or `no-store`.

use super::PublicPaths;

/// What the origin knows of one exchange when it decides (§S1).
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    /// The inner request method.
    pub method: &'a str,
    /// The inner request target as the client sent it (query included).
    pub target: &'a str,
    /// The request the application saw carried `Cookie` or `Authorization`.
    pub credentials: bool,
    /// The application's status.
    pub status: u16,
    /// The application's `HC-Public` value, if any.
    pub opt: Option<&'a [u8]>,
    /// The answer carries `Set-Cookie`.
    pub sets_cookie: bool,
    /// The answer's `Cache-Control` says `private` or `no-store`
    /// ([`forbids_sharing`]).
    pub private: bool,
}

impl Exchange<'_> {
    /// Whether the answer is public under `globs`: GET, 200, nothing
    /// personal about it, a path that means what it spells, and a glob
    /// matching that path or `HC-Public: 1`; `HC-Public: 0` wins.
    pub fn is_public(&self, globs: &PublicPaths) -> bool {
        if self.method != "GET" || self.status != 200 {
            return false;
        }
        if self.credentials || self.sets_cookie || self.private {
            return false;
        }
        let Some(path) = normalize_path(self.target) else {
            return false;
        };
        match self.opt.map(<[u8]>::trim_ascii) {
            Some(b"0") => false,
            Some(b"1") => true,
            _ => globs.matches(&path),
        }
    }
}

/// Whether `Cache-Control` values forbid a shared cache to keep the answer:
/// a `private` or `no-store` directive (any case, with or without an
/// argument).
pub fn forbids_sharing<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> bool {
    values
        .into_iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(|d| {
            let name = d.split(|&b| b == b'=').next().unwrap_or_default();
            name.trim_ascii()
        })
        .any(|d| d.eq_ignore_ascii_case(b"private") || d.eq_ignore_ascii_case(b"no-store"))
}

/// The path of an origin-form request target, normalised for matching
/// (RFC 3986 §6.2.2: percent-encoded unreserved characters decoded, the
/// hex digits of the rest upper-cased), or `None` when the path must never
/// be public: not origin-form, a bad or encoded `.`, `/` or `\`, a `\`, a
/// dot segment (`.`, `..`, also before a `;` parameter), or an empty
/// segment other than a trailing one.
pub fn normalize_path(target: &str) -> Option<String> {
    let path = target.split('?').next().unwrap_or_default();
    if !path.starts_with('/') || path.contains('#') {
        return None;
    }
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(path.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                let decoded = u8::from_str_radix(hex, 16).ok()?;
                if matches!(decoded, b'.' | b'/' | b'\\') {
                    return None;
                }
                if decoded.is_ascii_alphanumeric() || matches!(decoded, b'-' | b'_' | b'~') {
                    out.push(char::from(decoded));
                } else {
                    out.push('%');
                    out.push_str(&hex.to_ascii_uppercase());
                }
                i += 3;
            }
            b'\\' => return None,
            _ => {
                out.push(char::from(b));
                i += 1;
            }
        }
    }
    let segments: Vec<&str> = out[1..].split('/').collect();
    let last = segments.len() - 1;
    for (n, seg) in segments.iter().enumerate() {
        let name = seg.split(';').next().unwrap_or_default();
        if name == "." || name == ".." || (seg.is_empty() && n != last) {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs() -> PublicPaths {
        PublicPaths::new(["/static/**".to_string(), "/logo.png".to_string()]).unwrap()
    }

    fn get(target: &str) -> Exchange<'_> {
        Exchange {
            method: "GET",
            target,
            credentials: false,
            status: 200,
            opt: None,
            sets_cookie: false,
            private: false,
        }
    }

    #[test]
    fn paths_are_normalised_before_matching() {
        assert_eq!(
            normalize_path("/static/a.css?v=1").as_deref(),
            Some("/static/a.css")
        );
        assert_eq!(
            normalize_path("/%73tatic/%7euser").as_deref(),
            Some("/static/~user")
        );
        assert_eq!(
            normalize_path("/static/a%20b%3f").as_deref(),
            Some("/static/a%20b%3F")
        );
        assert_eq!(normalize_path("/static/").as_deref(), Some("/static/"));
        assert_eq!(normalize_path("/").as_deref(), Some("/"));
        assert!(get("/%73tatic/a.css").is_public(&globs()));
        assert!(get("/static/a.css?x=../y").is_public(&globs()));
    }

    /// `/static/%2e%2e/private` must not match `/static/**` raw: the server
    /// behind resolves it to `/private`.
    #[test]
    fn paths_that_may_resolve_elsewhere_are_never_public() {
        let refused = [
            "/static/%2e%2e/private",
            "/static/%2E%2E/private",
            "/static/%2e./private",
            "/static/.%2E/private",
            "/static/%2e/a",
            "/static/..%2fprivate",
            "/static/..%2Fprivate",
            "/static/a%2fb",
            "/static/..%5cprivate",
            "/static/..%5Cprivate",
            "/static/..\\private",
            "/static/../private",
            "/static/./a",
            "/static/..",
            "/static/.",
            "/static/..;/private",
            "/static//a",
            "//static/a",
            "/static/%zz",
            "/static/%2",
            "static/a",
            "*",
            "http://origin/static/a",
            "/static/a#frag",
        ];
        for t in refused {
            assert_eq!(normalize_path(t), None, "{t}");
            let mut e = get(t);
            assert!(!e.is_public(&globs()), "{t}");
            // Not by the application's opt-in either.
            e.opt = Some(b"1");
            assert!(!e.is_public(&globs()), "{t}");
        }
        // A dot inside a name is not a dot segment.
        assert!(get("/static/a..b/.well").is_public(&globs()));
    }

    #[test]
    fn personal_answers_are_never_public() {
        let base = get("/static/a.css");
        assert!(base.is_public(&globs()));
        for e in [
            Exchange {
                credentials: true,
                ..base
            },
            Exchange {
                sets_cookie: true,
                ..base
            },
            Exchange {
                private: true,
                ..base
            },
            Exchange {
                credentials: true,
                opt: Some(b"1"),
                ..base
            },
            Exchange {
                method: "POST",
                ..base
            },
            Exchange {
                method: "HEAD",
                ..base
            },
            Exchange {
                status: 206,
                ..base
            },
            Exchange {
                opt: Some(b" 0 "),
                ..base
            },
        ] {
            assert!(!e.is_public(&globs()), "{e:?}");
        }
        assert!(Exchange {
            opt: Some(b"1"),
            ..get("/api/x")
        }
        .is_public(&globs()));
        assert!(!get("/api/x").is_public(&globs()));
    }

    #[test]
    fn cache_control_private_or_no_store_forbids_sharing() {
        for v in [
            &b"private"[..],
            b"max-age=60, Private",
            b"no-store",
            b"public,NO-STORE",
            b"private=\"set-cookie\"",
        ] {
            assert!(forbids_sharing([v]), "{v:?}");
        }
        for v in [&b"public, max-age=60"[..], b"no-cache", b"s-maxage=5", b""] {
            assert!(!forbids_sharing([v]), "{v:?}");
        }
        assert!(forbids_sharing([&b"max-age=5"[..], b"no-store"]));
        assert!(!forbids_sharing(std::iter::empty()));
    }
}
