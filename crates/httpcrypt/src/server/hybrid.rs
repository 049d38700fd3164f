//! The hybrid suite at the layer (spec/hybrid.md H3–H4): `OPTIONS
//! {mount}/pq`, requests naming a suite-2 key ID, and the problems of a
//! server that takes suite 2. A fresh-key POST reads the 1,088-byte ML-KEM
//! ciphertext at the start of its body before its agreement, in a future of
//! its own (`hybrid_post.rs`); every other hybrid request is judged here at
//! once, as v1's are. The wire rules are `httpcrypt_proto::hybrid`'s.

use http::{Method, Response};
use httpcrypt_proto::hybrid::{self as proto_hybrid};
use httpcrypt_proto::outer::{self, Credential, Route};
use httpcrypt_proto::server::{Accept, OuterRequest};

use super::answer::{cert_list_response, problem_document};
use super::config::ServerConfig;
use super::sessions::LayerAgreement;
use super::shared::Shared;
use crate::body::HcBody;
use crate::metrics::{self, Suite};

/// Whether `parts` asks `OPTIONS {mount}/pq`.
pub(super) fn is_options_pq(cfg: &ServerConfig, parts: &http::request::Parts) -> bool {
    parts.method == Method::OPTIONS && cfg.mount.strip(parts.uri.path()) == Some("pq")
}

/// The answer to `OPTIONS {mount}/pq`: the suite-2 certificates and their
/// key texts, cacheable as `OPTIONS {mount}/` is.
pub(super) fn options_pq(shared: &Shared, now: u64) -> Response<HcBody> {
    metrics::request(metrics::Outcome::Certificates);
    let list = shared.keys.with_hybrid(|h| h.cert_list(now));
    cert_list_response(shared, list, now)
}

/// An outer problem from a server that takes suite 2: an `unknown_key`
/// one lists the suite-2 certificates in `hybrid_certs` beside the v1 ones.
/// The v1 ones are listed in `--pq only` mode too, so that a v1 client's
/// next request is refused with `hybrid_required`, which names the cause.
pub(super) fn outer_problem(
    shared: &Shared,
    err: &httpcrypt_proto::Error,
    now: u64,
) -> Response<HcBody> {
    metrics::rejected(err.code());
    let certs = shared.keys.with(|k| k.cert_lines(now));
    let hybrid_certs: Vec<String> = shared
        .keys
        .with_hybrid(|h| h.certs(now).into_iter().map(|c| c.to_text()).collect());
    let (status, doc) = proto_hybrid::exchange::format_problem(err, &certs, &hybrid_certs)
        .unwrap_or((400, String::from("{}")));
    problem_document(status, doc)
}

/// What a request v1 did not accept becomes under suite 2.
// Returned once and matched at once, as proto's `Accept` is.
#[allow(clippy::large_enum_variant)]
pub(super) enum HybridStep {
    /// A fresh-key POST naming a suite-2 key: read its ciphertext first.
    ReadCiphertext,
    /// Judged at once (a GET, a ticket, or a refusal).
    Decided(httpcrypt_proto::Result<Accept>),
}

/// Judges `req` as a suite-2 request: a fresh-key POST naming a suite-2
/// key ID waits for its ciphertext; anything else is decided at once by
/// proto's hybrid accept (its GET form carries the ciphertext in the query).
pub(super) fn judge(
    shared: &Shared,
    req: &OuterRequest<'_>,
    now: u64,
    agreement: &mut LayerAgreement<'_>,
) -> HybridStep {
    let cfg = &shared.config;
    shared.keys.with_hybrid(|h| {
        let fresh = matches!(
            outer::scan_cookies(req.cookies.iter().copied(), |id| h.lookup(id, now)),
            Ok(Credential::Key { .. })
        );
        if fresh
            && matches!(
                outer::route(req.method, req.target, &cfg.mount),
                Ok(Route::Post { .. })
            )
        {
            return HybridStep::ReadCiphertext;
        }
        let decision = proto_hybrid::exchange::accept_with(
            h,
            &cfg.mount,
            req,
            &[],
            &cfg.limits,
            now,
            agreement,
        );
        count(&decision);
        HybridStep::Decided(decision)
    })
}

/// Counts a hybrid agreement that ran and succeeded.
pub(super) fn count(decision: &httpcrypt_proto::Result<Accept>) {
    if let Ok(Accept::Request(a)) = decision {
        if matches!(a.credential, Credential::Key { .. }) {
            metrics::key_agreement(Suite::Hybrid);
        }
    }
}
