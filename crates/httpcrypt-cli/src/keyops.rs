//! Key directory operations for operators: `httpcrypt keys show`, and the
//! lock that keeps two servers from rotating one directory at once (the
//! second one follows the first's rotations instead).

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result};

/// The lock file in a key directory.
pub const LOCK_FILE: &str = "lock";

/// A UTC date for people: `2026-11-27 12:00:00 UTC`.
pub fn utc(unix: u64) -> String {
    // httpdate's IMF-fixdate, rearranged to sort and read well in a list.
    let t = UNIX_EPOCH + Duration::from_secs(unix.min(253_402_300_799));
    let text = httpdate::fmt_http_date(t); // "Fri, 27 Nov 2026 12:00:00 GMT"
    let parts: Vec<&str> = text.split_whitespace().collect();
    let month = match parts.get(2).copied().unwrap_or("") {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        _ => 12,
    };
    format!(
        "{}-{month:02}-{} {} UTC",
        parts.get(3).copied().unwrap_or("?"),
        parts.get(1).copied().unwrap_or("?"),
        parts.get(4).copied().unwrap_or("?")
    )
}

/// A duration for people: `1h 59m`, `3d 4h`, `42s`.
pub fn span(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m {}s", secs / 60, secs % 60),
        3600..=86_399 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

/// The keys of a directory another process rotates: waits (up to ten
/// seconds) for a valid key, then re-reads the directory every quarter
/// period (at most every 30 s) for the keys it adds.
pub async fn follow(
    dir: &Path,
    store: httpcrypt::keys::KeyStore,
    rotation: u64,
) -> Result<httpcrypt::keys::LiveKeys> {
    tracing::warn!(
        dir = %dir.display(),
        "another process rotates this key directory ({LOCK_FILE} is locked): following its keys \
         instead of rotating them; give each server its own directory, or use `httpcrypt fleet init`"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = httpcrypt::clock::unix_now();
        let valid = store.load(now)?.iter().any(|e| e.cert.is_valid_at(now));
        if valid {
            break;
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "key directory {} is locked by another process, which has not created a key",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let every = Duration::from_secs((rotation / 4).clamp(1, 30));
    Ok(httpcrypt::keys::follow(store, every)?)
}

/// `httpcrypt keys show`.
pub fn show(dir: &Path, rotation: u64) -> Result<i32> {
    let store = httpcrypt::keys::KeyStore::open(dir).with_context(|| {
        format!(
            "opening key directory {} (create it with `httpcrypt keygen --dir`)",
            dir.display()
        )
    })?;
    let now = httpcrypt::clock::unix_now();
    println!("key directory {}", dir.display());
    println!("identity      {}", store.identity().to_b64());
    let fleet = dir.join(httpcrypt::keys::fleet::FLEET_FILE).exists();
    let mode = if store.is_static() {
        "static (one kex key, no rotation, no forward secrecy)"
    } else if fleet {
        "fleet (keys derived from the shared ratchet; the files below are not used)"
    } else {
        "rotating"
    };
    println!("mode          {mode}");
    println!("now           {}", utc(now));
    // Read-only: `load` would delete expired files, so list them by hand.
    let mut epochs = Vec::new();
    let kex = dir.join("kex");
    for entry in std::fs::read_dir(&kex).with_context(|| format!("reading {}", kex.display()))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "key") {
            continue;
        }
        match store.load_file(&path) {
            Ok(e) => epochs.push(e),
            Err(e) => println!("  {}: unreadable: {e}", path.display()),
        }
    }
    epochs.sort_by_key(|e| e.cert.serial);
    if epochs.is_empty() {
        println!("no kex keys (a server creates one when it starts)");
    }
    for e in &epochs {
        let c = &e.cert;
        let (nb, na) = (u64::from(c.not_before), u64::from(c.not_after));
        let state = if now > na {
            "expired".to_string()
        } else if now < nb {
            format!("not yet valid, in {}", span(nb - now))
        } else {
            format!("valid, {} left", span(na - now))
        };
        println!(
            "kex serial {:>4}  kid {}  {} .. {}  ({state})",
            c.serial,
            c.kid().to_b64(),
            utc(nb),
            if c.not_after == u32::MAX {
                "never".to_string()
            } else {
                utc(na)
            },
        );
        println!(
            "  ticket key      tid {}  (expires with its kex key)",
            e.ticket.tid().to_b64()
        );
        if let Some(h) = &e.hybrid {
            println!(
                "  suite 2         kid {}  kem {}",
                h.kid().to_b64(),
                httpcrypt::proto::b64::encode(&h.kem_hash.0)
            );
        }
    }
    if !store.is_static() && !fleet {
        if let Some(newest) = epochs.last() {
            // A server rotates every R from its start; the newest key was
            // made at not_before + skew.
            let made = u64::from(newest.cert.not_before) + httpcrypt::keys::DEFAULT_SKEW;
            let next = made + rotation;
            println!(
                "next rotation {} (R = {rotation} s after the newest key{})",
                utc(next),
                if next < now {
                    "; overdue: is a server running?"
                } else {
                    ""
                }
            );
        }
    }
    Ok(0)
}

/// Takes the key directory's lock for this process's lifetime: true when
/// this process may rotate the directory (or nothing rotates: fleets derive
/// their keys, static directories have one), false when another process
/// holds the lock and rotates it.
pub fn lock(dir: &Path) -> Result<bool> {
    if dir.join(httpcrypt::keys::fleet::FLEET_FILE).exists() || dir.join("static").exists() {
        return Ok(true);
    }
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(held) => {
            // Held until the process exits (the kernel drops it then).
            std::mem::forget(held);
            Ok(true)
        }
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(false),
        Err((_, e)) => Err(anyhow::anyhow!("cannot lock {}: {e}", path.display())),
    }
}
