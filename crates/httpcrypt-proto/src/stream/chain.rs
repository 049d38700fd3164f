//! The record chain both ends keep (spec §3.3): the AEAD, the nonce of
//! record `i`, the previous tag, and each record's associated data, with
//! record 0 bound to the direction ([`Direction`]).

use crate::error::{Error, Result};
use crate::keys::SessionKey;
use crate::limits::RECORD_CEILING;
use crate::profile::Profile;
use crate::suite::{nonce_add, XChaCha, NONCE_LEN, TAG_LEN};

use super::{RecordHeader, HEADER_LEN, MAX_RECORDS, RECORD_OVERHEAD};

const REQ_LABEL: &[u8] = b"hc1-req";
const RSP_LABEL: &[u8] = b"hc1-rsp";
const REQ_LABEL_2: &[u8] = b"hc2-req";
const RSP_LABEL_2: &[u8] = b"hc2-rsp";

/// Which way a stream flows, and what record 0 is bound to (spec §3.3,
/// §4.5): responses to their request's nonce, profile-2 requests to the
/// outer `Host`.
#[derive(Clone, Copy)]
pub(super) enum Direction<'a> {
    Request,
    /// A profile-2 request; the bound `Host` as `u16(len) || host`.
    RequestBound(&'a [u8]),
    Response {
        request_n0: [u8; NONCE_LEN],
        profile: Profile,
    },
}

impl Direction<'_> {
    fn is_request(&self) -> bool {
        matches!(self, Direction::Request | Direction::RequestBound(_))
    }
}

/// The record chain state shared by both ends: nonce, index, previous tag.
pub(super) struct Chain {
    pub(super) aead: XChaCha,
    pub(super) n0: [u8; NONCE_LEN],
    pub(super) index: u64,
    pub(super) prev_tag: [u8; TAG_LEN],
    pub(super) request: bool,
    /// Holds the prefix of `AD_0` (label, bound `Host` or request nonce)
    /// until record 0 is done, then each record's `AD_i`.
    pub(super) ad: smallvec::SmallVec<[u8; 96]>,
    ad0_len: usize,
}

impl Chain {
    pub(super) fn new(key: &SessionKey, n0: [u8; NONCE_LEN], direction: Direction<'_>) -> Self {
        let mut ad = smallvec::SmallVec::new();
        match direction {
            Direction::Request => ad.extend_from_slice(REQ_LABEL),
            Direction::RequestBound(host) => {
                ad.reserve(host.len());
                ad.extend_from_slice(REQ_LABEL_2);
                ad.extend_from_slice(host);
            }
            Direction::Response {
                request_n0,
                profile,
            } => {
                ad.extend_from_slice(match profile {
                    Profile::V1 => RSP_LABEL,
                    Profile::Compact => RSP_LABEL_2,
                });
                ad.extend_from_slice(&request_n0);
            }
        }
        Chain {
            aead: XChaCha::new(key.as_bytes()),
            n0,
            index: 0,
            prev_tag: [0; TAG_LEN],
            request: direction.is_request(),
            ad0_len: ad.len(),
            ad,
        }
    }

    /// Builds `AD_i` for the current record into `self.ad`.
    pub(super) fn build_ad(&mut self, header: &[u8; HEADER_LEN]) {
        if self.index == 0 {
            self.ad.truncate(self.ad0_len);
        } else {
            self.ad.clear();
            self.ad.extend_from_slice(&self.prev_tag);
        }
        self.ad.extend_from_slice(header);
    }

    pub(super) fn nonce(&self) -> [u8; NONCE_LEN] {
        nonce_add(&self.n0, self.index)
    }

    /// Seals one record laid out as `header || tag || payload` in place.
    pub(super) fn seal(&mut self, record: &mut [u8], last: bool, clear: bool) -> Result<()> {
        let len = record.len() - RECORD_OVERHEAD;
        if len > RECORD_CEILING {
            return Err(Error::RecordTooLarge);
        }
        if clear && self.request {
            return Err(Error::ClearInRequest);
        }
        if self.index >= MAX_RECORDS {
            return Err(Error::TooManyRecords);
        }
        let header = RecordHeader { last, clear, len }.encode();
        record[..HEADER_LEN].copy_from_slice(&header);
        self.build_ad(&header);
        let nonce = self.nonce();
        let (head, payload) = record.split_at_mut(RECORD_OVERHEAD);
        let tag = if clear {
            self.ad.extend_from_slice(payload);
            self.aead.seal_in_place(&nonce, &self.ad, &mut [])
        } else {
            self.aead.seal_in_place(&nonce, &self.ad, payload)
        };
        head[HEADER_LEN..].copy_from_slice(&tag);
        self.prev_tag = tag;
        self.index += 1;
        Ok(())
    }
}

impl Chain {
    /// Seals a CLEAR record whose payload stays where it is: returns the
    /// record's `header || tag` (split serving, spec/split-serving.md §S4).
    pub(super) fn seal_clear_detached(
        &mut self,
        payload: &[u8],
        last: bool,
    ) -> Result<[u8; RECORD_OVERHEAD]> {
        if payload.len() > RECORD_CEILING {
            return Err(Error::RecordTooLarge);
        }
        if self.request {
            return Err(Error::ClearInRequest);
        }
        if self.index >= MAX_RECORDS {
            return Err(Error::TooManyRecords);
        }
        let header = RecordHeader {
            last,
            clear: true,
            len: payload.len(),
        }
        .encode();
        self.build_ad(&header);
        self.ad.extend_from_slice(payload);
        let nonce = self.nonce();
        let tag = self.aead.seal_in_place(&nonce, &self.ad, &mut []);
        self.prev_tag = tag;
        self.index += 1;
        let mut head = [0u8; RECORD_OVERHEAD];
        head[..HEADER_LEN].copy_from_slice(&header);
        head[HEADER_LEN..].copy_from_slice(&tag);
        Ok(head)
    }
}
