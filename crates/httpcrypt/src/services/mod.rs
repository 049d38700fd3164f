//! The services the listener usually runs behind the layer: static files
//! ([`files`]), a reverse proxy to an upstream ([`upstream`], the gateway),
//! and the untrusted caching proxy of split serving ([`split_proxy`]).

pub mod files;
pub mod split_proxy;
pub mod upstream;

use http::header;

pub use files::{static_files, StaticFiles};
pub use upstream::{Forwarded, Upstream, UpstreamOptions};

/// Fields a proxy must not forward (RFC 9110 §7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Removes the hop-by-hop fields of `h`: those of [`HOP_BY_HOP`] and those
/// its `Connection` field names.
pub(crate) fn strip_hop_by_hop(h: &mut http::HeaderMap) {
    let named: Vec<String> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| {
            v.split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    for n in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(named) {
        h.remove(n.as_str());
    }
}
