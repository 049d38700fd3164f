//! The server's counters, through the `metrics` facade: free when the
//! program installs no recorder, exported in the Prometheus text format by
//! `httpcrypt serve --metrics` (names below, described by [`describe`]).

/// Key agreements (X25519) made for fresh-key requests.
pub const KEY_AGREEMENTS: &str = "httpcrypt_key_agreements_total";
/// Fresh-key requests whose session key came from the session cache.
pub const CACHE_HITS: &str = "httpcrypt_session_cache_hits_total";
/// Requests resumed with a ticket.
pub const TICKET_RESUMPTIONS: &str = "httpcrypt_ticket_resumptions_total";
/// Requests refused by the protocol, by `reason` (the error code, spec §12).
pub const REJECTIONS: &str = "httpcrypt_rejections_total";
/// Key rotations done, by `result` (`ok`, `failed`).
pub const ROTATIONS: &str = "httpcrypt_key_rotations_total";
/// Seconds until the newest kex key expires.
pub const KEY_EXPIRY: &str = "httpcrypt_key_expiry_seconds";
/// Seconds until the next rotation.
pub const NEXT_ROTATION: &str = "httpcrypt_next_rotation_seconds";
/// Connections open on the listener.
pub const OPEN_CONNECTIONS: &str = "httpcrypt_open_connections";

/// Describes every counter of this crate to the installed recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, Unit};
    describe_counter!(
        KEY_AGREEMENTS,
        "Key agreements (X25519) for fresh-key requests"
    );
    describe_counter!(
        CACHE_HITS,
        "Fresh-key requests served from the session cache"
    );
    describe_counter!(TICKET_RESUMPTIONS, "Requests resumed with a ticket");
    describe_counter!(REJECTIONS, "Requests refused, by reason (spec error code)");
    describe_counter!(ROTATIONS, "Key rotations, by result");
    describe_gauge!(
        KEY_EXPIRY,
        Unit::Seconds,
        "Seconds until the newest kex key expires"
    );
    describe_gauge!(
        NEXT_ROTATION,
        Unit::Seconds,
        "Seconds until the next key rotation"
    );
    describe_gauge!(OPEN_CONNECTIONS, "Connections open on the listener");
}

/// Counts a refusal with its error code.
pub(crate) fn rejected(reason: &'static str) {
    metrics::counter!(REJECTIONS, "reason" => reason).increment(1);
}

/// Sets the key gauges from the running keys at `now` (before each scrape).
pub fn keys(live: &crate::keystore::LiveKeys, now: u64) {
    let newest = live
        .certs()
        .iter()
        .map(|c| u64::from(c.not_after))
        .max()
        .unwrap_or(now);
    metrics::gauge!(KEY_EXPIRY).set(newest.saturating_sub(now) as f64);
    metrics::gauge!(NEXT_ROTATION).set(live.seconds_to_rotation(now) as f64);
}
