//! Server keys: the key directory on disk ([`store`]), the keys a running
//! server holds ([`live`]), the tasks that rotate or re-read them
//! ([`rotation`]), and fleets that derive them from a shared ratchet
//! ([`fleet`]).

mod epoch;
mod files;
pub mod fleet;
pub mod live;
pub mod rotation;
pub mod store;

pub use live::LiveKeys;
pub use rotation::{follow, reload, start};
pub use store::{
    check_permissions, Epoch, KeyStore, DEFAULT_KEM_EVERY, DEFAULT_PERIOD, DEFAULT_SKEW, KEM_DIR,
};
