//! The split proxy's payload cache on disk: content-addressed files, an
//! index in memory, least recently used entries evicted past a bound on
//! entries and bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use httpcrypt_proto::split::ContentId;

/// Counters of a proxy's cache, for logs, tests and benchmarks.
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Stubs served from the cache.
    pub hits: AtomicU64,
    /// Stubs whose payload was fetched from the origin.
    pub misses: AtomicU64,
    /// Payload bytes fetched from the origin.
    pub fetched_bytes: AtomicU64,
    /// Entries evicted.
    pub evicted: AtomicU64,
}

/// Filesystem block every entry is counted at least as (and rounded up to).
pub const BLOCK: u64 = 4096;
/// Bytes counted per entry on top of its blocks: its inode, directory entry
/// and index entry.
pub const ENTRY_OVERHEAD: u64 = 512;
/// Default most entries in the cache.
pub const DEFAULT_MAX_ENTRIES: usize = 100_000;
/// Default smallest payload cached: below it a record costs the origin
/// little to send again, and the proxy a whole block and a file to keep.
pub const DEFAULT_MIN_PAYLOAD: usize = 512;

/// The bounds of a [`DiskCache`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Most bytes of disk, each entry counted as [`DiskCache::charge`]
    /// says and each of the 256 subdirectories as one block.
    pub max_bytes: u64,
    /// Most entries.
    pub max_entries: usize,
    /// Payloads shorter than this are not cached (they are fetched again).
    pub min_payload: usize,
}

impl CacheLimits {
    /// `max_bytes` with the default entry cap and threshold.
    pub fn bytes(max_bytes: u64) -> Self {
        CacheLimits {
            max_bytes,
            max_entries: DEFAULT_MAX_ENTRIES,
            min_payload: DEFAULT_MIN_PAYLOAD,
        }
    }
}

/// A bounded, content-addressed cache on disk: one file per content ID
/// (`{dir}/{hex[0..2]}/{hex}`), least recently used evicted first (§S6).
/// The bound counts what the disk really spends: every entry at least one
/// block plus [`ENTRY_OVERHEAD`], every subdirectory one block, and a cap
/// on the number of entries; tiny payloads are not cached at all.
#[derive(Debug)]
pub struct DiskCache {
    dir: PathBuf,
    limits: CacheLimits,
    index: Mutex<Index>,
    /// Counters.
    pub stats: CacheStats,
}

#[derive(Debug)]
struct Index {
    /// Payload length and LRU tick per entry.
    entries: HashMap<ContentId, (u64, u64)>,
    order: BTreeMap<u64, ContentId>,
    tick: u64,
    /// Bytes charged: entries and subdirectories.
    bytes: u64,
    /// Entries per subdirectory (the ID's first byte).
    dirs: [u32; 256],
}

impl Default for Index {
    fn default() -> Self {
        Index {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            bytes: 0,
            dirs: [0; 256],
        }
    }
}

impl Index {
    fn touch(&mut self, id: &ContentId) -> bool {
        self.tick += 1;
        let tick = self.tick;
        let Some(e) = self.entries.get_mut(id) else {
            return false;
        };
        let old = e.1;
        e.1 = tick;
        self.order.remove(&old);
        self.order.insert(tick, *id);
        true
    }

    fn insert(&mut self, id: ContentId, len: u64) {
        if self.entries.contains_key(&id) {
            return;
        }
        self.tick += 1;
        let t = self.tick;
        self.entries.insert(id, (len, t));
        self.order.insert(t, id);
        self.bytes += DiskCache::charge(len);
        let d = &mut self.dirs[usize::from(id.0[0])];
        if *d == 0 {
            self.bytes += BLOCK;
        }
        *d += 1;
    }

    /// Removes an entry; `Some(true)` when its subdirectory is now empty.
    fn remove(&mut self, id: &ContentId) -> Option<bool> {
        let (size, tick) = self.entries.remove(id)?;
        self.order.remove(&tick);
        self.bytes -= DiskCache::charge(size);
        let d = &mut self.dirs[usize::from(id.0[0])];
        *d -= 1;
        if *d == 0 {
            self.bytes -= BLOCK;
        }
        Some(*d == 0)
    }
}

impl DiskCache {
    /// Opens (creating) `dir`, indexing the entries already there, oldest
    /// first, and evicting down to `max_bytes` (default entry cap and
    /// threshold, [`CacheLimits::bytes`]).
    pub fn open(dir: &Path, max_bytes: u64) -> std::io::Result<Self> {
        Self::open_with(dir, CacheLimits::bytes(max_bytes))
    }

    /// Bytes an entry of `len` payload bytes is counted as: whole blocks,
    /// at least one, plus [`ENTRY_OVERHEAD`].
    pub fn charge(len: u64) -> u64 {
        len.div_ceil(BLOCK).max(1) * BLOCK + ENTRY_OVERHEAD
    }

    /// As [`DiskCache::open`], with all of `limits`.
    pub fn open_with(dir: &Path, limits: CacheLimits) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut found = Vec::new();
        for sub in std::fs::read_dir(dir)? {
            let sub = sub?;
            if !sub.file_type()?.is_dir() {
                continue;
            }
            for f in std::fs::read_dir(sub.path())? {
                let f = f?;
                let name = f.file_name().to_string_lossy().to_string();
                let meta = f.metadata()?;
                match ContentId::from_hex(&name) {
                    Some(id) if meta.is_file() => {
                        let when = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                        found.push((when, id, meta.len()));
                    }
                    // Leftover temporary files of an interrupted write.
                    _ if name.ends_with(".tmp") => {
                        let _ = std::fs::remove_file(f.path());
                    }
                    _ => {}
                }
            }
        }
        found.sort();
        let cache = DiskCache {
            dir: dir.to_path_buf(),
            limits,
            index: Mutex::new(Index::default()),
            stats: CacheStats::default(),
        };
        {
            let mut ix = cache.lock();
            for (_, id, len) in found {
                ix.insert(id, len);
            }
        }
        cache.evict();
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, id: &ContentId) -> PathBuf {
        let hex = id.to_hex();
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Whether `id` is cached (refreshing its LRU place).
    pub fn contains(&self, id: &ContentId) -> bool {
        self.lock().touch(id)
    }

    /// (entries, bytes charged) in the cache.
    pub fn usage(&self) -> (usize, u64) {
        let ix = self.lock();
        (ix.entries.len(), ix.bytes)
    }

    /// The cached payload, if present and readable.
    pub fn read(&self, id: &ContentId) -> Option<Vec<u8>> {
        if !self.contains(id) {
            return None;
        }
        match std::fs::read(self.path(id)) {
            Ok(b) => Some(b),
            Err(_) => {
                self.forget(id);
                None
            }
        }
    }

    /// Drops an entry (unreadable, or not matching its ID).
    pub fn forget(&self, id: &ContentId) {
        if let Some(empty) = self.lock().remove(id) {
            self.unlink(id, empty);
        }
    }

    /// Removes an entry's file, and its subdirectory once empty.
    fn unlink(&self, id: &ContentId, dir_empty: bool) {
        let path = self.path(id);
        let _ = std::fs::remove_file(&path);
        if dir_empty {
            if let Some(parent) = path.parent() {
                // Fails harmlessly if a concurrent put already refilled it.
                let _ = std::fs::remove_dir(parent);
            }
        }
    }

    /// Stores a payload that was already checked against its ID.
    pub fn put(&self, id: &ContentId, payload: &[u8]) -> std::io::Result<()> {
        let len = payload.len() as u64;
        let l = &self.limits;
        if payload.len() < l.min_payload
            || l.max_entries == 0
            || Self::charge(len) + BLOCK > l.max_bytes
            || self.lock().touch(id)
        {
            return Ok(());
        }
        let path = self.path(id);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Write aside and rename: an entry is whole or absent.
        let tmp = path.with_extension(format!("{}.tmp", rand_suffix()));
        std::fs::write(&tmp, payload)?;
        std::fs::rename(&tmp, &path)?;
        self.lock().insert(*id, len);
        self.evict();
        Ok(())
    }

    fn evict(&self) {
        loop {
            let victim = {
                let mut ix = self.lock();
                if ix.bytes <= self.limits.max_bytes && ix.entries.len() <= self.limits.max_entries
                {
                    return;
                }
                let Some((_, id)) = ix.order.first_key_value().map(|(t, i)| (*t, *i)) else {
                    return;
                };
                let empty = ix.remove(&id).unwrap_or(false);
                (id, empty)
            };
            self.stats.evicted.fetch_add(1, Relaxed);
            self.unlink(&victim.0, victim.1);
        }
    }
}

fn rand_suffix() -> u64 {
    use rand_core::RngCore;
    rand_core::OsRng.next_u64()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Limits holding `n` entries of 4 bytes (each in its own
    /// subdirectory at worst), caching tiny payloads.
    fn room_for(n: u64) -> CacheLimits {
        CacheLimits {
            max_bytes: n * (DiskCache::charge(4) + BLOCK),
            max_entries: DEFAULT_MAX_ENTRIES,
            min_payload: 0,
        }
    }

    #[test]
    fn disk_cache_lru_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open_with(dir.path(), room_for(2)).unwrap();
        let (a, b, d) = (
            ContentId::of(b"a"),
            ContentId::of(b"b"),
            ContentId::of(b"d"),
        );
        c.put(&a, b"aaaa").unwrap();
        c.put(&b, b"bbbb").unwrap();
        assert!(c.contains(&a));
        c.put(&d, b"dddd").unwrap();
        assert!(!c.contains(&b), "b was least recently used");
        assert_eq!(c.read(&a).unwrap(), b"aaaa");
        assert_eq!(c.usage().0, 2);
        assert!(c.usage().1 <= room_for(2).max_bytes);
        assert_eq!(c.stats.evicted.load(Relaxed), 1);
        drop(c);
        let c = DiskCache::open_with(dir.path(), room_for(2)).unwrap();
        assert_eq!(c.usage().0, 2);
        assert_eq!(c.read(&d).unwrap(), b"dddd");
        let c = DiskCache::open_with(dir.path(), room_for(1)).unwrap();
        assert_eq!(c.usage().0, 1, "reopening with a smaller bound evicts");
    }

    /// Bytes the cache directory really takes on disk (files and
    /// subdirectories, as `du` counts them, without the top directory).
    fn disk_use(dir: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt;
        let mut total = 0;
        for sub in std::fs::read_dir(dir).unwrap() {
            let sub = sub.unwrap();
            total += sub.metadata().unwrap().blocks() * 512;
            if sub.file_type().unwrap().is_dir() {
                for f in std::fs::read_dir(sub.path()).unwrap() {
                    total += f.unwrap().metadata().unwrap().blocks() * 512;
                }
            }
        }
        total
    }

    #[test]
    fn tiny_entries_stay_within_the_bound() {
        const LIMIT: u64 = 64 * 1024;
        let payload = |i: u32| format!("tiny public record {i:05}").into_bytes();
        // By default tiny payloads are not cached at all.
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open(dir.path(), LIMIT).unwrap();
        for i in 0..1500 {
            let p = payload(i);
            c.put(&ContentId::of(&p), &p).unwrap();
        }
        assert_eq!(c.usage().0, 0);
        assert_eq!(disk_use(dir.path()), 0);
        // Cached anyway, each is counted as a block plus overhead, and
        // each subdirectory as a block: the disk holds what the bound says.
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open_with(
            dir.path(),
            CacheLimits {
                min_payload: 0,
                ..CacheLimits::bytes(LIMIT)
            },
        )
        .unwrap();
        for i in 0..1500 {
            let p = payload(i);
            c.put(&ContentId::of(&p), &p).unwrap();
        }
        let (entries, bytes) = c.usage();
        assert!(bytes <= LIMIT, "{bytes} bytes charged");
        assert!(
            entries as u64 <= LIMIT / (DiskCache::charge(1) + BLOCK) + 1,
            "{entries} entries"
        );
        let used = disk_use(dir.path());
        assert!(used <= LIMIT, "{used} bytes on disk");
        // The entry cap holds whatever the byte bound.
        let dir = tempfile::tempdir().unwrap();
        let c = DiskCache::open_with(
            dir.path(),
            CacheLimits {
                max_bytes: 1 << 30,
                max_entries: 50,
                min_payload: 0,
            },
        )
        .unwrap();
        for i in 0..1500 {
            let p = payload(i);
            c.put(&ContentId::of(&p), &p).unwrap();
        }
        assert_eq!(c.usage().0, 50);
        let files: usize = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|d| std::fs::read_dir(d.unwrap().path()).unwrap().count())
            .sum();
        assert_eq!(files, 50);
    }
}
