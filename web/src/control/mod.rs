//! The local control socket (`{data_dir}/control.sock`): how the CLI reads
//! and changes the state of a running daemon, which holds the store's lock.
//!
//! * [`protocol`] — the typed, versioned, newline-delimited JSON frames.
//! * [`server`] — binding (stale sockets, permissions) and serving, with
//!   owner authentication on every connection.
//! * [`client`] — the CLI's connection.

pub mod client;
pub mod protocol;
pub mod server;

pub use client::{ClientError, ControlClient};
pub use protocol::{OwnerToken, Request, Response};
pub use server::{ControlBackend, ControlError, ControlListener, bind};
