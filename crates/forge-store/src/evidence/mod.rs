//! Evidence: what has been proven about a wheel, signed and kept. `probe
//! --record` ([`record`]) keeps each verdict as an in-toto statement in a DSSE
//! envelope ([`statement`]) in an evidence folder ([`store`]); `evidence add`
//! keeps a result reported from outside; `evidence show` ([`show`], [`cmd`])
//! prints the validation boundary of pins.toml's wheels. Only statements
//! signed by trusted keys count anywhere. Evidence never changes a wheel, its
//! cache key or its label. Must not probe, build or publish anything itself.
pub mod cmd;
pub mod record;
pub mod show;
pub mod statement;
pub mod store;

pub use cmd::{AddRequest, ShowFormat, ShowRequest};
