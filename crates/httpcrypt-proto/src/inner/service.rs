//! What the service sees (spec §4.3, erratum E1): the protocol's own fields
//! that a server consumes, the `Host` and fields of the service's request,
//! and the fields a service may put in its answer.

use super::{field, Field};

/// Inner request fields that belong to the protocol, not to the service
/// (spec §4.3, erratum E1): the freshness `Date` (§8.1), the token fields
/// `Client-Random` and `Random` (§8.4) and `Ticket` (§7.2). A server
/// consumes them; they never reach the service.
pub const PROTOCOL_FIELDS: &[&str] = &["date", "client-random", "random", "ticket"];

/// Whether the inner request field `name` is handed to the service (spec
/// §4.3): every inner field but the protocol's own ([`PROTOCOL_FIELDS`]).
pub fn is_service_field(name: &str) -> bool {
    is_service_field_name(name.as_bytes())
}

/// [`is_service_field`] for a name as bytes (a parsed head's token), with
/// no UTF-8 check first.
pub fn is_service_field_name(name: &[u8]) -> bool {
    !PROTOCOL_FIELDS
        .iter()
        .any(|p| p.as_bytes().eq_ignore_ascii_case(name))
}

/// Inner response fields that only the server itself writes (spec §7.2,
/// §8.4): a service's own field of one of these names is dropped, so that
/// the client never takes it for the server's ticket or token.
pub const PROTOCOL_RESPONSE_FIELDS: &[&str] = &["ticket", "random"];

/// Whether a service's response field `name` goes into the inner response:
/// every field but [`PROTOCOL_RESPONSE_FIELDS`].
pub fn is_service_response_field(name: &str) -> bool {
    !PROTOCOL_RESPONSE_FIELDS
        .iter()
        .any(|p| p.eq_ignore_ascii_case(name))
}

/// The `Host` the service sees (spec §4.3, erratum E1): the inner `Host`
/// if the inner head has one; else the outer `Host` where the stream's
/// associated data binds it (`bound`, profile 2, §4.5); else the name the
/// server is configured with for the mount; else none. An outer `Host`
/// that nothing authenticated never reaches the service.
pub fn service_host<'a>(
    inner: Option<&'a [u8]>,
    bound: Option<&'a [u8]>,
    configured: Option<&'a [u8]>,
) -> Option<&'a [u8]> {
    inner.or(bound).or(configured)
}

/// The fields of the request the service sees (spec §4.3, erratum E1),
/// built from authenticated data alone: the `Host` of [`service_host`]
/// first when the inner head has none, then the inner fields in their
/// order, minus the protocol's own. No outer field takes part; an
/// operator's allow-listed outer fields travel apart from these.
pub fn service_fields(
    inner: &[Field],
    bound: Option<&[u8]>,
    configured: Option<&[u8]>,
) -> Vec<Field> {
    let mut out = Vec::with_capacity(inner.len() + 1);
    if field(inner, "host").is_none() {
        if let Some(h) = service_host(None, bound, configured) {
            out.push(Field::new("Host", h));
        }
    }
    out.extend(inner.iter().filter(|f| is_service_field(&f.name)).cloned());
    out
}

/// The prefix under which a gateway hands allow-listed outer fields to its
/// upstream by default (erratum E1: never under their own names). A
/// gateway also drops inner fields that start with its prefix, so a client
/// cannot pose as the proxy in front of the server.
pub const DEFAULT_OUTER_PREFIX: &str = "Httpcrypt-Outer-";

/// The tokens of `Connection` values (comma-separated, whitespace trimmed,
/// case kept), without allocating.
pub fn connection_token_iter<'a>(
    values: impl Iterator<Item = &'a [u8]>,
) -> impl Iterator<Item = &'a [u8]> {
    values
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
}
