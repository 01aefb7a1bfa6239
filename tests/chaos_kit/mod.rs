//! The chaos run of `tests/chaos.rs` (issue #19 item 6): the fake model
//! ([`model`]), the kill loop ([`run`]), what is observed from outside
//! ([`observe`]) and the pure checker over it ([`checker`]).

pub mod checker;
pub mod model;
pub mod observe;
pub mod run;
