//! The sealing end of a stream: [`Sealer`], the one-use [`ResponseKey`] a
//! server seals its response with, and whole-stream sealing ([`seal_all`]).

use crate::error::{Error, Result};
use crate::keys::SessionKey;
use crate::profile::{self, Profile, RESPONSE_RANDOM_LEN};
use crate::suite::NONCE_LEN;

use super::chain::{Chain, Direction};
use super::RECORD_OVERHEAD;

/// Produces the records of one stream.
///
/// `seal*` appends a non-final record; `finish*` appends the FINAL record and
/// consumes the sealer, so a stream cannot continue after its end.
pub struct Sealer {
    chain: Chain,
}

impl core::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sealer")
            .field("records", &self.chain.index)
            .finish_non_exhaustive()
    }
}

/// The key a server may use to seal exactly one response: the session key
/// bound to the request's nonce. Not `Clone`: consumed by [`Sealer::response`].
pub struct ResponseKey {
    key: SessionKey,
    request_n0: [u8; NONCE_LEN],
    profile: Profile,
}

impl ResponseKey {
    /// Binds `key` to the v1 request whose nonce is `request_n0`.
    pub fn new(key: SessionKey, request_n0: [u8; NONCE_LEN]) -> Self {
        Self::for_profile(key, request_n0, Profile::V1)
    }

    /// Binds `key` to the request whose nonce is `request_n0`, answered in
    /// that request's profile.
    pub fn for_profile(key: SessionKey, request_n0: [u8; NONCE_LEN], profile: Profile) -> Self {
        ResponseKey {
            key,
            request_n0,
            profile,
        }
    }

    /// The profile the response is sealed in.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The request nonce this key answers.
    pub fn request_n0(&self) -> &[u8; NONCE_LEN] {
        &self.request_n0
    }

    /// The session key (for tickets and tokens issued in the response).
    pub fn session_key(&self) -> &SessionKey {
        &self.key
    }
}

impl core::fmt::Debug for ResponseKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ResponseKey(..)")
    }
}

impl Sealer {
    /// A request stream starting at nonce `n0` (which the client puts in the path).
    pub fn request(key: &SessionKey, n0: [u8; NONCE_LEN]) -> Self {
        Sealer {
            chain: Chain::new(key, n0, Direction::Request),
        }
    }

    /// A profile-2 request stream (spec §4.5): record 0 binds the outer
    /// `Host` value `host`. `bad_host` above 65535 bytes.
    pub fn request_bound(key: &SessionKey, n0: [u8; NONCE_LEN], host: &[u8]) -> Result<Self> {
        let bound = profile::bound_host(host)?;
        Ok(Self::request_prebound(key, n0, &bound))
    }

    /// [`Sealer::request_bound`] with the `Host` already in its bound form.
    pub(crate) fn request_prebound(key: &SessionKey, n0: [u8; NONCE_LEN], bound: &[u8]) -> Self {
        Sealer {
            chain: Chain::new(key, n0, Direction::RequestBound(bound)),
        }
    }

    /// A response stream. `fresh` is 24 bytes from a CSPRNG: a v1 response
    /// appends them to `out` as its nonce (spec §4.2); a profile-2 response
    /// appends the first 16 as its response random and starts the stream
    /// at `ff × 8 || random` (spec §4.5).
    pub fn response(key: ResponseKey, fresh: [u8; NONCE_LEN], out: &mut Vec<u8>) -> Self {
        let n0 = match key.profile {
            Profile::V1 => {
                out.extend_from_slice(&fresh);
                fresh
            }
            Profile::Compact => {
                let mut r = [0u8; RESPONSE_RANDOM_LEN];
                r.copy_from_slice(&fresh[..RESPONSE_RANDOM_LEN]);
                out.extend_from_slice(&r);
                profile::response_n0(&r)
            }
        };
        Sealer {
            chain: Chain::new(
                &key.key,
                n0,
                Direction::Response {
                    request_n0: key.request_n0,
                    profile: key.profile,
                },
            ),
        }
    }

    /// Number of records sealed so far.
    pub fn records(&self) -> u64 {
        self.chain.index
    }

    fn append(
        &mut self,
        plaintext: &[u8],
        out: &mut Vec<u8>,
        last: bool,
        clear: bool,
    ) -> Result<()> {
        let start = out.len();
        out.resize(start + RECORD_OVERHEAD, 0);
        out.extend_from_slice(plaintext);
        let r = self.chain.seal(&mut out[start..], last, clear);
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Appends a non-final encrypted record holding `plaintext`.
    pub fn seal(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, false, false)
    }

    /// Appends a non-final CLEAR record (responses only, spec §9).
    pub fn seal_clear(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, false, true)
    }

    /// Appends the FINAL encrypted record (possibly empty) and ends the stream.
    pub fn finish(mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, true, false)
    }

    /// Appends the FINAL record as a CLEAR record (responses only).
    pub fn finish_clear(mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<()> {
        self.append(plaintext, out, true, true)
    }

    /// Seals a non-final CLEAR record without copying its payload and
    /// returns `header || tag`; the record is that followed by `payload`
    /// (split serving: the origin sends a stub in the payload's place).
    pub fn seal_clear_detached(&mut self, payload: &[u8]) -> Result<[u8; RECORD_OVERHEAD]> {
        self.chain.seal_clear_detached(payload, false)
    }

    /// Seals a non-final record in place: `record` is `RECORD_OVERHEAD`
    /// bytes of space followed by the plaintext, and becomes the record.
    pub fn seal_in_place(&mut self, record: &mut [u8]) -> Result<()> {
        check_room(record)?;
        self.chain.seal(record, false, false)
    }

    /// Seals the FINAL record in place (see [`Sealer::seal_in_place`]).
    pub fn finish_in_place(mut self, record: &mut [u8]) -> Result<()> {
        check_room(record)?;
        self.chain.seal(record, true, false)
    }
}

fn check_room(record: &[u8]) -> Result<()> {
    if record.len() < RECORD_OVERHEAD {
        return Err(Error::Truncated);
    }
    Ok(())
}

/// Bytes of the stream [`seal_all`] makes of `plain` plaintext bytes in
/// records of at most `record_size` bytes (at least one record, the FINAL one).
pub fn sealed_len(plain: u64, record_size: usize) -> u64 {
    let records = plain.div_ceil(record_size.max(1) as u64).max(1);
    plain + records * RECORD_OVERHEAD as u64
}

/// Seals `plaintext` as a stream of records of at most `record_size` bytes
/// (the last record is FINAL; an empty plaintext gives one empty FINAL record).
pub fn seal_all(
    mut sealer: Sealer,
    plaintext: &[u8],
    record_size: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    let record_size = record_size.max(1);
    let mut rest = plaintext;
    while rest.len() > record_size {
        let (chunk, tail) = rest.split_at(record_size);
        sealer.seal(chunk, out)?;
        rest = tail;
    }
    sealer.finish(rest, out)
}
