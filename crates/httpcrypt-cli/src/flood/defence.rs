//! The `serve` and `gateway` options of the load-aware defence (spec §14)
//! and the layer's setting they make.

use clap::{Args, ValueEnum};
use httpcrypt::proto::admission;

/// `serve`/`gateway` options of the load-aware defence (spec §14).
#[derive(Args, Clone, Debug)]
pub struct DefenceOpts {
    /// The defence in front of the key agreement: `auto` switches it on by
    /// itself when the demand for key agreements passes the threshold.
    #[arg(long, value_enum, default_value = "auto")]
    pub defence: DefenceMode,
    /// Key agreements asked for per second above which the defence switches on.
    #[arg(long, default_value_t = 2000)]
    pub defence_threshold: u32,
    /// Key agreements per second one source prefix may have under pressure.
    #[arg(long, default_value_t = 200)]
    pub prefix_rate: u32,
    /// Burst of a source prefix's budget.
    #[arg(long, default_value_t = 400)]
    pub prefix_burst: u32,
    /// IPv4 prefix length of a budget.
    #[arg(long, default_value_t = 24)]
    pub v4_prefix: u8,
    /// IPv6 prefix length of a budget.
    #[arg(long, default_value_t = 64)]
    pub v6_prefix: u8,
    /// Highest puzzle difficulty in bits (0: cookie only, no puzzle).
    #[arg(long, default_value_t = 16)]
    pub max_difficulty: u8,
}

/// Whether the defence runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DefenceMode {
    /// On under load, off while idle.
    Auto,
    /// Never.
    Off,
}

impl DefenceOpts {
    /// The layer's setting.
    pub fn config(&self) -> Option<admission::AdmissionConfig> {
        (self.defence == DefenceMode::Auto).then(|| admission::AdmissionConfig {
            threshold: self.defence_threshold.max(1),
            prefix_rate: self.prefix_rate.max(1),
            prefix_burst: self.prefix_burst.max(1),
            v4_prefix: self.v4_prefix.min(32),
            v6_prefix: self.v6_prefix.min(128),
            max_difficulty: self.max_difficulty.min(admission::MAX_DIFFICULTY),
            ..Default::default()
        })
    }
}
