//! Spec §3 models (being written).
