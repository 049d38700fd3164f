//! The outer checks of a request, all synchronous: the outer HTTP limits
//! (spec §11.6), the route, the credential, the key agreement or the
//! resumption, and the defence (spec §14). A request is answered at once
//! or handed on as [`Admitted`].

use std::sync::Arc;

use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use httpcrypt_proto::server::{self as core, Accept, Accepted, OuterRequest};
use httpcrypt_proto::split;
use httpcrypt_proto::Limits;

use super::answer::{cert_list_response, outer_problem};
use super::config::{Outside, Pq};
use super::hybrid::{self, HybridStep};
use super::sessions::{Held, LayerAgreement};
use super::shared::Shared;
use crate::body::{plain, HcBody};
use crate::clock::unix_now;
use crate::conn::ConnState;
use crate::split::ContentStore;

/// The outer HTTP limits of spec §11.6 that hyper leaves to us: request
/// line (414), header section (431), transfer codings other than chunked
/// (501). hyper itself refuses heads beyond the listener's hard limit.
pub(super) fn outer_http_limits(
    parts: &http::request::Parts,
    limits: &Limits,
) -> Option<Response<HcBody>> {
    let uri = &parts.uri;
    let target = uri.path_and_query().map_or(1, |p| p.as_str().len())
        + uri.scheme_str().map_or(0, |s| s.len() + "://".len())
        + uri.authority().map_or(0, |a| a.as_str().len());
    // method SP target SP "HTTP/1.1"
    let line = parts.method.as_str().len() + 1 + target + 9;
    let refusal = if line > limits.max_request_line {
        Some((StatusCode::URI_TOO_LONG, "request line too long\n"))
    } else if parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum::<usize>()
        > limits.max_header_section
    {
        Some((
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "header section too large\n",
        ))
    } else {
        let mut codings = parts.headers.get_all(header::TRANSFER_ENCODING).iter();
        match (codings.next(), codings.next()) {
            (None, _) => None,
            (Some(te), None) if te.as_bytes().trim_ascii().eq_ignore_ascii_case(b"chunked") => None,
            _ => Some((
                StatusCode::NOT_IMPLEMENTED,
                "transfer coding not implemented\n",
            )),
        }
    };
    refusal.map(|(status, text)| {
        crate::metrics::refused(match status {
            StatusCode::URI_TOO_LONG => "request_line_too_long",
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => "header_section_too_large",
            _ => "transfer_coding_not_implemented",
        });
        // The body was not read: the connection cannot carry another request.
        let mut r = plain(status, text);
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    })
}

/// What the layer does with a request, decided before anything is awaited.
// Returned once and taken apart at once, on the stack; the large variant is
// the common one, and boxing it would cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub(super) enum Admission<B> {
    /// Answered at once: a refusal, a problem, OPTIONS, 404, 405.
    Answer(Response<HcBody>),
    /// Outside the mount, for the service as it is.
    PassThrough(Request<B>),
    /// The split-serving content endpoint (spec/split-serving.md §S5).
    Content {
        store: Arc<ContentStore>,
        method: Method,
        rest: String,
        body: B,
    },
    /// A sealed request, admitted: it is opened, served and sealed by
    /// [`serve_sealed`].
    Sealed(Admitted<B>),
    /// A hybrid fresh-key POST (spec/hybrid.md H3): its agreement needs the
    /// ciphertext at the start of the body, read by
    /// [`super::hybrid_post::serve_post`] before it is judged.
    HybridPost {
        parts: http::request::Parts,
        body: B,
        now: u64,
    },
}

/// A sealed request that passed the outer checks, with what it was
/// admitted with.
pub(super) struct Admitted<B> {
    pub(super) parts: http::request::Parts,
    pub(super) body: B,
    pub(super) accepted: Accepted,
    /// The ticket key of the last ticket this session got, on a cache hit.
    pub(super) held: Held,
    pub(super) now: u64,
}

/// The outer checks of a request within the outer HTTP limits (route,
/// credential, key agreement or resumption, admission), all synchronous: a
/// request is answered at once or handed on with what it was admitted
/// with, so only a request that really awaits something costs a boxed
/// future.
pub(super) fn admit<B>(shared: &Shared, parts: http::request::Parts, body: B) -> Admission<B> {
    let cfg = &shared.config;
    let now = unix_now();
    // The dot keeps the content endpoint's paths apart from nonce paths.
    if let Some(store) = &shared.store {
        if let Some(rest) = parts
            .uri
            .path()
            .strip_prefix(cfg.mount.as_str())
            .and_then(|p| p.strip_prefix(split::CONTENT_DIR))
        {
            crate::metrics::request(crate::metrics::Outcome::Content);
            return Admission::Content {
                store: store.clone(),
                rest: rest.to_string(),
                method: parts.method,
                body,
            };
        }
    }
    let outer_req = outer_request(&parts);
    if cfg.pq != Pq::Off && hybrid::is_options_pq(cfg, &parts) {
        return Admission::Answer(hybrid::options_pq(shared, now));
    }
    let mut agreement = LayerAgreement {
        shared,
        ext: &parts.extensions,
        held: Held::default(),
        refused: None,
    };
    // Suite 1 first unless the server takes suite 2 only; a key ID it does
    // not know may be a suite-2 one (spec/hybrid.md H3), and so may the
    // ticket-key ID of a short ticket, whose cookie suite 1 does not count
    // as shaped (`no_cookie`, spec §7.3).
    let decision = match cfg.pq {
        Pq::Only => Err(httpcrypt_proto::Error::UnknownKey),
        _ => shared.keys.with(|keys| {
            core::accept(
                keys,
                &cfg.mount,
                &outer_req,
                &cfg.limits,
                now,
                &mut agreement,
            )
        }),
    };
    let decision = match decision {
        Err(httpcrypt_proto::Error::UnknownKey | httpcrypt_proto::Error::NoCookie)
            if cfg.pq != Pq::Off =>
        {
            match hybrid::judge(shared, &outer_req, now, &mut agreement) {
                HybridStep::ReadCiphertext => {
                    drop(outer_req);
                    return Admission::HybridPost { parts, body, now };
                }
                HybridStep::Decided(d) => d,
            }
        }
        d => d,
    };
    drop(outer_req);
    let LayerAgreement { held, refused, .. } = agreement;
    decided(shared, parts, body, decision, held, refused, now)
}

/// The view of the outer head that proto judges, borrowed: nothing is
/// copied before the cheap checks, and nothing allocated (one pass over the
/// fields; the cookies inline).
pub(super) fn outer_request(parts: &http::request::Parts) -> OuterRequest<'_> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let (mut host, mut length, mut chunked) = (None, None, false);
    let mut cookies = httpcrypt_proto::server::CookieFields::new();
    // `HeaderMap::iter` gives every value of a name in order, names in the
    // order they first came: the first `Host` and `Content-Length` are those
    // `HeaderMap::get` returns.
    for (name, value) in parts.headers.iter() {
        if *name == header::COOKIE {
            cookies.push(value.as_bytes());
        } else if *name == header::HOST {
            host = host.or(Some(value.as_bytes()));
        } else if *name == header::CONTENT_LENGTH {
            length = length.or(Some(value));
        } else if *name == header::TRANSFER_ENCODING {
            chunked = true;
        }
    }
    let host = host.or_else(|| parts.uri.authority().map(|a| a.as_str().as_bytes()));
    let content_length = length.and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    OuterRequest {
        method: parts.method.as_str(),
        target,
        host,
        cookies,
        content_length,
        has_body: chunked || content_length.is_some_and(|l| l > 0),
    }
}

/// What becomes of a request once its outer checks are decided: an answer
/// at once, or [`Admission::Sealed`].
pub(super) fn decided<B>(
    shared: &Shared,
    parts: http::request::Parts,
    body: B,
    decision: httpcrypt_proto::Result<Accept>,
    held: Held,
    refused: Option<httpcrypt_proto::admission::Verdict>,
    now: u64,
) -> Admission<B> {
    let cfg = &shared.config;
    shared.purge_cache(now);
    let accepted = match decision {
        Err(_) if refused.is_some() => {
            crate::metrics::request(crate::metrics::Outcome::Refused);
            return Admission::Answer(crate::defence::refusal_response(
                &refused.expect("checked just above"),
            ));
        }
        Err(e) => {
            tracing::debug!(code = e.code(), "refused outer request");
            crate::metrics::request(crate::metrics::Outcome::Refused);
            if cfg.pq != Pq::Off {
                return Admission::Answer(hybrid::outer_problem(shared, &e, now));
            }
            let certs = shared.keys.with(|k| k.cert_lines(now));
            return Admission::Answer(outer_problem(&e, &certs));
        }
        // `call` passes requests outside the mount on before this, by
        // the same test of the path.
        Ok(Accept::Outside) => {
            return match cfg.outside {
                Outside::Refuse => {
                    crate::metrics::refused("not_found");
                    Admission::Answer(plain(StatusCode::NOT_FOUND, "not found\n"))
                }
                Outside::PassThrough => {
                    crate::metrics::request(crate::metrics::Outcome::Plaintext);
                    Admission::PassThrough(Request::from_parts(parts, body))
                }
            };
        }
        Ok(Accept::Options) => {
            crate::metrics::request(crate::metrics::Outcome::Certificates);
            // Also in `--pq only` mode: a v1 client then sends a request and
            // is refused with `hybrid_required`, which names the cause
            // (spec/hybrid.md H4).
            let certs = shared.keys.with(|k| {
                httpcrypt_proto::cert::format_cert_list(
                    &k.certs(now).into_iter().cloned().collect::<Vec<_>>(),
                )
            });
            return Admission::Answer(cert_list_response(shared, certs, now));
        }
        Ok(Accept::MethodNotAllowed) => {
            crate::metrics::refused("method_not_allowed");
            let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
            r.headers_mut().insert(
                header::ALLOW,
                HeaderValue::from_static("GET, POST, OPTIONS"),
            );
            return Admission::Answer(r);
        }
        Ok(Accept::NotFound) => {
            crate::metrics::refused("not_found");
            return Admission::Answer(plain(StatusCode::NOT_FOUND, "not found\n"));
        }
        Ok(Accept::Request(a)) => a,
    };
    // The strike register's check comes once the stream has opened and the
    // inner `Date` passed (§8); its memory is fetched now, meanwhile.
    if cfg.freshness.is_some() {
        shared.strikes.prefetch(&accepted.kid, &accepted.n0);
    }
    if accepted.credential.is_ticket() {
        crate::metrics::request(crate::metrics::Outcome::Ticket);
    }
    if let Some(conn) = parts.extensions.get::<ConnState>() {
        if let Some(not_after) = shared.key_not_after(&accepted.kid, now) {
            conn.note(u64::from(not_after));
        }
    }
    Admission::Sealed(Admitted {
        parts,
        body,
        accepted,
        held,
        now,
    })
}

#[cfg(test)]
mod tests {
    use super::outer_request;

    fn parts(req: http::request::Builder) -> http::request::Parts {
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn the_outer_view_takes_the_fields_header_map_lookups_would() {
        // Repeated fields, the protocol's among others, in the order a
        // client sent them.
        let p = parts(
            http::Request::post("/hc/n?q")
                .header("cookie", "a=1")
                .header("host", "first.example")
                .header("x-other", "z")
                .header("content-length", "12")
                .header("cookie", "b=2")
                .header("host", "second.example")
                .header("content-length", "99")
                .header("cookie", "c=3"),
        );
        let v = outer_request(&p);
        assert_eq!(v.method, "POST");
        assert_eq!(v.target, "/hc/n?q");
        assert_eq!(v.host, p.headers.get("host").map(|h| h.as_bytes()));
        assert_eq!(v.host, Some(b"first.example".as_slice()));
        let cookies: Vec<&[u8]> = p
            .headers
            .get_all("cookie")
            .iter()
            .map(|c| c.as_bytes())
            .collect();
        assert_eq!(v.cookies.as_slice(), cookies.as_slice());
        assert_eq!(v.cookies.len(), 3);
        assert_eq!(v.content_length, Some(12));
        assert!(v.has_body);

        // No Host field: the authority of an absolute target; chunked.
        let p = parts(
            http::Request::post("http://authority.example/hc/n")
                .header("transfer-encoding", "chunked"),
        );
        let v = outer_request(&p);
        assert_eq!(v.host, Some(b"authority.example".as_slice()));
        assert!(v.cookies.is_empty());
        assert_eq!(v.content_length, None);
        assert!(v.has_body);

        // A declared empty body is none; a length that is not a number is
        // no length.
        let empty = parts(http::Request::get("/").header("content-length", "0"));
        assert!(!outer_request(&empty).has_body);
        let garbled = parts(http::Request::get("/").header("content-length", "x"));
        let v = outer_request(&garbled);
        assert_eq!(v.content_length, None);
        assert!(!v.has_body);
    }
}
