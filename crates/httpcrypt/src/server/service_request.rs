//! The request the wrapped service sees, built from the inner request
//! alone (spec §4.3, erratum E1).

use http::header::{self, HeaderName, HeaderValue};
use http::{Method, Request, Uri};
use httpcrypt_proto::inner::{self, PackedRequestHead};
use httpcrypt_proto::split;

use super::config::{OuterFields, ServerConfig};
use crate::body::HcBody;

/// What the outer request's `Httpcrypt-Split` field asked for (§S3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SplitAsked {
    /// No field: an ordinary sealed answer in every case.
    No,
    /// A split answer with the full outer head (`Httpcrypt-Content`,
    /// `Cache-Control`).
    Full,
    /// A split answer with the short outer head (value `2`).
    Short,
}

impl SplitAsked {
    fn from_value(v: &[u8]) -> Self {
        if v == split::SPLIT_SHORT.as_bytes() {
            SplitAsked::Short
        } else {
            SplitAsked::Full
        }
    }
}

/// Builds the request the wrapped service sees from the inner request alone
/// (spec §4.3, erratum E1; the rule is `inner::service_fields`): the inner
/// method, target, fields but the protocol's own, and body; `Host` per
/// `inner::service_host` with `bound` (the outer `Host` the associated data
/// covers) and the configured name. Allow-listed outer fields go apart, as
/// [`OuterFields`]. Says what the outer request's `Httpcrypt-Split` asked
/// for (the field is for this layer only).
/// `Httpcrypt-Split` as a field name, checked once at compile time: a
/// lookup by a `&str` parses and lowercases the name on every request.
static SPLIT_NAME: HeaderName = HeaderName::from_static(split::SPLIT_FIELD);

pub(super) fn build_inner_request(
    parts: &mut http::request::Parts,
    head: PackedRequestHead,
    body: HcBody,
    bound: Option<&[u8]>,
    cfg: &ServerConfig,
) -> Result<(Request<HcBody>, SplitAsked), httpcrypt_proto::Error> {
    use httpcrypt_proto::Error::MalformedInner;
    let method = Method::from_bytes(head.method().as_bytes()).map_err(|_| MalformedInner)?;
    // Target and field values are views of the inner head's bytes, not copies.
    let uri = Uri::from_maybe_shared(head.target_bytes()).map_err(|_| MalformedInner)?;
    // §S3: whether a split answer was asked for, and with the short head.
    let split_asked = parts
        .headers
        .get(&SPLIT_NAME)
        .map(|v| SplitAsked::from_value(v.as_bytes()))
        .unwrap_or(SplitAsked::No);
    let outer_passed =
        (!cfg.pass_outer.is_empty()).then(|| OuterFields::select(&parts.headers, &cfg.pass_outer));
    let host = if head.has_field("host") {
        None
    } else {
        inner::service_host(None, bound, cfg.authority.as_ref().map(|v| v.as_bytes()))
            .map(|h| HeaderValue::from_bytes(h).map_err(|_| MalformedInner))
            .transpose()?
    };
    // The outer map is reused for its room only: cleared, then filled with
    // the inner fields.
    let mut headers = std::mem::take(&mut parts.headers);
    headers.clear();
    headers.reserve(head.field_count() + 1);
    if let Some(h) = host {
        headers.append(header::HOST, h);
    }
    for (name, value) in head.shared_fields() {
        if !inner::is_service_field_name(name) {
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|_| MalformedInner)?;
        let value = HeaderValue::from_maybe_shared(value).map_err(|_| MalformedInner)?;
        headers.append(name, value);
    }
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.headers_mut() = headers;
    // The service sees the outer request's extensions (the connection
    // state, say).
    *req.extensions_mut() = std::mem::take(&mut parts.extensions);
    if let Some(passed) = outer_passed {
        req.extensions_mut().insert(passed);
    }
    Ok((req, split_asked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use httpcrypt_proto::inner::{Field, Head};
    use httpcrypt_proto::Limits;

    use crate::body::full;

    /// The request the wrapped service sees is built from the inner head
    /// alone, as `inner::service_fields` says (erratum E1): no outer field
    /// reaches it, whatever its name; allow-listed outer fields arrive
    /// apart, as [`OuterFields`]; `Host` comes from the inner head, else
    /// the bound outer one, else the configured name, else nowhere.
    #[test]
    fn the_inner_request_is_the_inner_head_alone() {
        let outer = || {
            let outer = Request::get("/hc/x")
                .header("Host", "evil.test")
                .header("Cookie", "hc1=abc")
                .header("Authorization", "Basic ZXZpbA==")
                .header("X-HTTP-Method-Override", "DELETE")
                .header("X-Forwarded-For", "6.6.6.6")
                .header("X-Forwarded-For", "7.7.7.7")
                .header("Content-Encoding", "gzip")
                .header("Accept-Language", "en")
                .header(split::SPLIT_FIELD, "1")
                .body(())
                .unwrap();
            outer.into_parts().0
        };
        let build = |fields: &[(&str, &str)], bound: Option<&[u8]>, cfg: &ServerConfig| {
            let mut head = httpcrypt_proto::inner::RequestHead::new("POST", "/api?q=1");
            for (n, v) in fields {
                head.fields.push(Field::new(*n, *v));
            }
            let mut encoded = Vec::new();
            head.encode(&mut encoded);
            let packed = PackedRequestHead::parse(&encoded, &Limits::default()).unwrap();
            let mut parts = outer();
            let (req, split_asked) =
                build_inner_request(&mut parts, packed, full(Vec::new()), bound, cfg).unwrap();
            assert_eq!(
                split_asked,
                SplitAsked::Full,
                "the outer request asked for a split answer"
            );
            assert_eq!(req.method(), Method::POST);
            assert_eq!(req.uri(), "/api?q=1");
            let got: Vec<Field> = req
                .headers()
                .iter()
                .map(|(n, v)| Field::new(n.as_str(), v.as_bytes()))
                .collect();
            let want: Vec<Field> = inner::service_fields(
                &head.fields,
                bound,
                cfg.authority.as_ref().map(|v| v.as_bytes()),
            )
            .into_iter()
            .map(|f| Field::new(f.name.to_ascii_lowercase(), f.value))
            .collect();
            assert_eq!(got, want);
            req
        };
        let plain = ServerConfig::default();
        let fields = [
            ("Host", "app.test"),
            ("Accept", "text/plain"),
            ("Date", "Tue, 24 Nov 2026 20:00:00 GMT"),
            ("Client-Random", "x"),
            ("X-Custom", "1"),
        ];
        let req = build(&fields, Some(b"bound.test"), &plain);
        let names: Vec<&str> = req.headers().keys().map(|n| n.as_str()).collect();
        assert_eq!(names, ["host", "accept", "x-custom"]);
        assert_eq!(req.headers()["host"], "app.test");
        assert!(req.extensions().get::<OuterFields>().is_none());
        // No inner Host: the bound outer one, else the configured name,
        // else none at all.
        let named = ServerConfig {
            authority: Some(HeaderValue::from_static("conf.test")),
            pass_outer: vec![
                HeaderName::from_static("x-forwarded-for"),
                HeaderName::from_static("x-absent"),
            ],
            ..ServerConfig::default()
        };
        let req = build(&fields[1..], Some(b"bound.test"), &named);
        assert_eq!(req.headers()["host"], "bound.test");
        let req = build(&fields[1..], None, &named);
        assert_eq!(req.headers()["host"], "conf.test");
        let passed = &req.extensions().get::<OuterFields>().unwrap().0;
        let xff: Vec<&[u8]> = passed
            .get_all("x-forwarded-for")
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(xff, [b"6.6.6.6".as_slice(), b"7.7.7.7"]);
        assert_eq!(passed.len(), 2, "{passed:?}");
        let req = build(&fields[1..], None, &plain);
        assert!(!req.headers().contains_key("host"));
    }
}
