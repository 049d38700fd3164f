//! One fingerprint map of the strike register (spec §8.2): an
//! open-addressed array of 64-bit words with linear probing.
//!
//! A word holds what a fingerprint has beyond the 8 top bits that picked
//! its map (its low 56 bits, shifted up) and, in its low byte, the low byte
//! of its bucket's index. One check thus reads one run of neighbouring
//! words, usually within one cache line, where a general hash map reads a
//! control byte and an entry in two places. At 8 bytes a word and a load
//! of 0.35–0.7, an entry takes 11–23 bytes (22 at 3 M entries in the micro
//! benchmark, where the general maps took 21: the gain is the one line).
//!
//! A bucket's index is known here by its low byte only. Live indices lie
//! at most `2W / g + 2 ≤ 34` buckets after the oldest live one (the cut,
//! `super::StrikeRegister`), so a word whose byte lies within 128 after
//! the cut's is live and one before it is stale. A stale word left unswept
//! for 128 buckets or more would read as live again; it can then only
//! refuse a request with the same 64-bit fingerprint, which §8.1 has
//! already refused unless it is a collision (about 2^-64), and it leaves
//! at the next sweep that finds it stale. The register keeps that from
//! happening: a map remembers the cut of its last sweep, every word in it
//! lies at or after that cut (unless the clock went back), and a map whose
//! last sweep lies [`SWEEP_LAG`] buckets back is swept when the next bucket
//! expires.

/// A word whose entry's bucket expired and was swept: it keeps probe runs
/// unbroken and is taken by the next entry that passes it. Real words are
/// at least `1 << TAG_BITS` ([`word`]), so it is never one.
const SWEPT: u64 = 1;

/// Bits of a word that carry the bucket index's low byte.
const TAG_BITS: u32 = 8;
/// The fewest words of a map that holds anything.
const MIN_WORDS: usize = 16;
/// Buckets a map's last sweep may lie behind the cut before the next
/// expiry sweeps it: well below the 128 after which a stale word's byte
/// would read as live. Only a quiet server's maps fall this far behind
/// (a busy one sweeps every map within 256 checks of each expiry), and
/// they hold little.
const SWEEP_LAG: u32 = 64;

/// The word of fingerprint `fp` in bucket `tag` (never 0, the empty word:
/// the one fingerprint whose low 56 bits are all zero shares its word with
/// the one whose low 56 bits are 1, a 2^-56 event that can only refuse).
pub(super) fn word(fp: u64, tag: u8) -> u64 {
    (fp << TAG_BITS).max(1 << TAG_BITS) | u64::from(tag)
}

/// Whether a word's bucket byte `tag` is at or after the cut's byte `cut`.
fn is_live(tag: u8, cut: u8) -> bool {
    tag.wrapping_sub(cut) < 128
}

fn tag_of(w: u64) -> u8 {
    w as u8
}

/// The first slot to look at for word `w`: the fingerprint's low bits.
fn home(w: u64, mask: usize) -> usize {
    (w >> TAG_BITS) as usize & mask
}

fn same_key(a: u64, b: u64) -> bool {
    a >> TAG_BITS == b >> TAG_BITS
}

/// Where a check found its fingerprint.
pub(super) enum Probe {
    /// Held and live: a replay.
    Live,
    /// Not held (or held stale): the slot the new word goes to, and
    /// whether that slot was empty until now.
    Vacant(usize, bool),
}

/// One map: `words.len()` is 0 or a power of two; at most 7/10 of the
/// words are in use (live or stale), so a probe that finds nothing stops
/// at an empty word after a few steps.
#[derive(Default)]
pub(super) struct Map {
    words: Vec<u64>,
    used: usize,
    /// The cut (a whole bucket index) of the last sweep or rebuild.
    swept_cut: u32,
}

impl Map {
    /// Entries held, live or stale but not yet swept.
    #[cfg(test)]
    pub(super) fn used(&self) -> usize {
        self.words.iter().filter(|&&v| v > SWEPT).count()
    }

    /// Whether `at` points into this map at the word of fingerprint `fp`.
    #[cfg(test)]
    pub(super) fn holds_at(&self, at: *const u64, fp: u64) -> bool {
        self.words
            .iter()
            .any(|v| core::ptr::eq(v, at) && same_key(*v, word(fp, 0)))
    }

    /// Bytes of the map's array.
    pub(super) fn memory_bytes(&self) -> usize {
        self.words.capacity() * core::mem::size_of::<u64>()
    }

    /// The first word a probe for fingerprint `fp` reads, for a caller
    /// that prefetches it (an address only: nothing is read here).
    pub(super) fn start(&self, fp: u64) -> Option<*const u64> {
        let mask = self.words.len().checked_sub(1)?;
        Some(&self.words[home(word(fp, 0), mask)] as *const u64)
    }

    /// Looks `w`'s fingerprint up, making room for one more word first.
    pub(super) fn probe(&mut self, w: u64, cut: u32) -> Probe {
        if (self.used + 1) * 10 > self.words.len() * 7 {
            self.rebuild(cut);
        }
        let cut = cut as u8;
        let mask = self.words.len() - 1;
        let mut i = home(w, mask);
        let mut stale_slot = None;
        loop {
            let v = self.words[i];
            if v == 0 {
                return match stale_slot {
                    Some(s) => Probe::Vacant(s, false),
                    None => Probe::Vacant(i, true),
                };
            }
            if v == SWEPT {
                stale_slot = stale_slot.or(Some(i));
                i = (i + 1) & mask;
                continue;
            }
            let live = is_live(tag_of(v), cut);
            if same_key(v, w) {
                // The same fingerprint, held: a replay if live, else its
                // slot is taken over.
                return if live {
                    Probe::Live
                } else {
                    Probe::Vacant(i, false)
                };
            }
            if !live && stale_slot.is_none() {
                stale_slot = Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Puts `w` into the slot `probe` returned.
    pub(super) fn fill(&mut self, slot: usize, was_empty: bool, w: u64) {
        self.words[slot] = w;
        if was_empty {
            self.used += 1;
        }
    }

    /// Marks the stale words [`SWEPT`] in one sequential pass (in place:
    /// no check waits for a map to be built again); a map whose live words
    /// need less than a quarter of it is built again smaller, so memory
    /// follows the load.
    pub(super) fn sweep(&mut self, cut: u32) {
        self.swept_cut = cut;
        if self.used == 0 {
            return;
        }
        let c = cut as u8;
        let mut live = 0;
        for v in &mut self.words {
            if *v > SWEPT {
                if is_live(tag_of(*v), c) {
                    live += 1;
                } else {
                    *v = SWEPT;
                }
            }
        }
        if self.words.len() > MIN_WORDS && live * 4 < self.words.len() {
            self.rebuild(cut);
        }
    }

    /// Whether the last sweep lies [`SWEEP_LAG`] buckets or more before
    /// `cut` (not when the clock went back and the cut with it).
    pub(super) fn lags(&self, cut: u32) -> bool {
        let behind = cut.wrapping_sub(self.swept_cut);
        (SWEEP_LAG..1 << 31).contains(&behind)
    }

    /// Forgets everything and gives the array back.
    pub(super) fn clear(&mut self) {
        *self = Map::default();
    }

    /// A new array for the live words and room for as many again (at most
    /// half full after it, 0.35 full after growing), at least [`MIN_WORDS`].
    fn rebuild(&mut self, whole_cut: u32) {
        self.swept_cut = whole_cut;
        let cut = whole_cut as u8;
        let live = self
            .words
            .iter()
            .filter(|&&v| v > SWEPT && is_live(tag_of(v), cut))
            .count();
        let len = ((live + 1) * 2).next_power_of_two().max(MIN_WORDS);
        let old = core::mem::replace(&mut self.words, vec![0; len]);
        self.used = 0;
        let mask = len - 1;
        for v in old {
            if v <= SWEPT || !is_live(tag_of(v), cut) {
                continue;
            }
            let mut i = home(v, mask);
            while self.words[i] != 0 {
                i = (i + 1) & mask;
            }
            self.words[i] = v;
            self.used += 1;
        }
    }
}
