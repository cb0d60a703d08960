//! Stage 1, the source: a pipeline's change stream, read by one task into the relay, with a
//! snapshot's copies when one runs.
//!
//! - `stream`: the change stream's options and stages, opening it, resume tokens;
//! - `reader`: the source → relay channel (items and their byte budget) and the reader of
//!   `getMore` replies; `images`: its check of the pre-images `required` asks for at a
//!   database or deployment scope;
//! - [`split`]: reassembling `$changeStreamSplitLargeEvent` fragments;
//! - `snapshot`: the source task, which streams and, while a snapshot runs, copies
//!   (`copying.rs`: one running snapshot's copies) in the order `snapshot/sequence.rs` proves;
//!   `debezium.rs`: the Debezium form's look-ahead for a snapshot's last document.
//!
//! Invariant: one task reads the stream and issues every copy request; what it reads enters
//! one channel in read order (the relay's window keeps that order).

pub(crate) mod copying;
mod debezium;
mod images;
pub(crate) mod reader;
pub(crate) mod snapshot;
pub mod split;
pub(crate) mod stream;

pub use stream::{RawStream, current_token, to_resume_token};
