//! The op registry (filled in below).
