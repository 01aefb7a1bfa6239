//! The domain model of spec §3 (and the connection record of §2.5): serde types
//! whose JSON uses the spec's field names and snake_case enum values exactly.
//!
//! Types carry no business logic beyond the validators the spec names. Every
//! validator runs at deserialisation (via `#[serde(try_from = ...)]` on a raw
//! twin where needed) and is also callable as `validate()`, returning a typed
//! [`ModelError`]. Optional fields serialise as `null` rather than being
//! skipped, mirroring Pydantic's `model_dump(mode="json")` — the shape the
//! hash projections in [`crate::projections`] are defined over.

pub mod agents;
pub mod approval;
pub mod connections;
pub mod context;
pub mod error;
pub mod execution;
pub mod gates;
pub mod memory;
pub mod messages;
pub mod personality;
pub mod review;
pub mod sessions;
pub mod work;

pub use error::ModelError;

/// A free-form JSON object (the spec's `dict`). Backed by serde_json's map;
/// canonical ordering is imposed by [`crate::canonical`], never relied on here.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;
