//! One Kafka record, as the encoder builds it and the producer enqueues it.

use std::sync::Arc;

/// One Kafka record, ready to enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Target topic.
    pub topic: Arc<str>,
    /// Key bytes (UTF-8 canonical Extended JSON).
    pub key: Vec<u8>,
    /// Value bytes (UTF-8 Extended JSON), `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Header names and UTF-8 values.
    pub headers: Vec<(&'static str, Vec<u8>)>,
    /// An explicit partition (markers go to every partition); `None`: the key decides.
    pub partition: Option<i32>,
}

impl Record {
    /// Bytes this record holds in the producer queue (key + value + headers), for the in-flight
    /// byte budget.
    pub fn size(&self) -> usize {
        self.key.len()
            + self.value.as_ref().map_or(0, Vec::len)
            + self
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>()
    }
}
