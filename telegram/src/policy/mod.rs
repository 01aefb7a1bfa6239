//! Pure policies of the Telegram channel: no I/O, exhaustively unit-tested.

pub mod callback;
pub mod identity;
pub mod secrets;
pub mod text;
pub mod throttle;
