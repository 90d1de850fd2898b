//! Per-architecture marker evaluation lives in [`crate::marker`] (shared with
//! `builder::registry`, which must not import `lock`); re-exported here for
//! the lock-check modules.
pub use crate::marker::*;
