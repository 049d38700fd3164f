//! Project tasks as a library, so tests can call the vector generator.

pub mod vectors;
