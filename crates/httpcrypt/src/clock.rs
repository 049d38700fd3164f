//! The wall clock, read in one place: every protocol decision in
//! `httpcrypt-proto` takes the time as a parameter, and the IO side passes
//! this.

/// Seconds since the unix epoch (0 if the system clock is before it).
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
