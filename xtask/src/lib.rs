//! Project tasks as a library, so tests can call the vector generator.
// A generator fails loudly: a panic names the case that broke.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::too_many_arguments,
    clippy::vec_init_then_push
)]

pub mod vectors;
