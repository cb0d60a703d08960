//! The names of the bridge's own things in Kafka and in MongoDB, and the rule that keeps them
//! apart from the pipelines' data.
//!
//! - Internal topics: names starting with `__` belong to Kafka (`__consumer_offsets`,
//!   `__transaction_state`) and to the bridge, whose own topics are named
//!   `__mongo_kafka_bridge.<offsets_database>.<kind>` (`internal`): the progress topic of
//!   `delivery = "exactly_once"` (`progress_topic`, one per pipeline) and each group's control topic
//!   ([`control`]), whose name, like the consumer group's ([`consumer_group`]), carries the
//!   deployment's identity.
//! - The bridge's own collections ([`OffsetsLocation`]): the offsets collection and, beside it,
//!   the group slots.
//!
//! Invariants: no pipeline writes an internal topic (configuration refuses a `topic`,
//! `dead_letter_topic` or `topic_prefix` starting with `__`, and gap markers skip them); the
//! offsets database in a topic's name keeps two deployments on one cluster apart; no stream
//! publishes and no snapshot copies the bridge's own collections.

/// The prefix of every internal topic, Kafka's and the bridge's.
pub(crate) const INTERNAL_PREFIX: &str = "__";

/// Whether `topic` is internal (Kafka's or the bridge's own): never a data topic.
pub(crate) fn is_internal(topic: &str) -> bool {
    topic.starts_with(INTERNAL_PREFIX)
}

/// Whether `topic` is a name a pipeline may write to: 1–249 of `[A-Za-z0-9._-]`, not internal.
pub(crate) fn is_data_topic(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 249
        && topic
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !is_internal(topic)
}

/// The name of the bridge's own topic of `kind` for the deployment whose offsets live in
/// `offsets_database`.
pub(crate) fn internal(offsets_database: &str, kind: &str) -> String {
    format!("{INTERNAL_PREFIX}mongo_kafka_bridge.{offsets_database}.{kind}")
}

/// The control topic of `[bridge] group_id` in the deployment whose identity is `deployment`
/// (`crate::offsets::deployment`): one partition per pipeline slot, no records.
pub fn control(offsets_database: &str, group_id: &str, deployment: &str) -> String {
    internal(offsets_database, &format!("group.{group_id}.{deployment}"))
}

/// The Kafka consumer group of `[bridge] group_id` in the deployment whose identity is
/// `deployment`: `<group_id>.<deployment>`, so two deployments with the same `group_id` on
/// one cluster never share a group.
pub fn consumer_group(group_id: &str, deployment: &str) -> String {
    format!("{group_id}.{deployment}")
}

/// A deployment identity's length (`crate::offsets::deployment`), for the name-length rules.
pub(crate) const DEPLOYMENT_ID_LEN: usize = 12;

/// The progress topic of an exactly-once pipeline whose offsets document's `streamUid` is
/// `stream_uid`, in the deployment whose offsets live in `offsets_database`: one per pipeline,
/// so a pipeline's start-up read never waits on another pipeline's open transaction.
pub(crate) fn progress_topic(offsets_database: &str, stream_uid: &str) -> String {
    internal(offsets_database, &format!("progress.{stream_uid}"))
}

/// The progress topic that versions before per-pipeline progress topics shared between every
/// exactly-once pipeline of a deployment: read once at start-up by a pipeline that has no
/// record of its own yet, so an upgrade keeps a position committed only there.
pub(crate) fn shared_progress_topic(offsets_database: &str) -> String {
    internal(offsets_database, "progress")
}

/// Where the offsets live: `[mongodb] offsets_database` and `offsets_collection`
/// ([`MongoConfig::offsets`](super::MongoConfig::offsets)). A `(database, collection)` pair
/// converts into one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetsLocation {
    /// The offsets database.
    pub database: String,
    /// The offsets collection.
    pub collection: String,
}

impl<D: AsRef<str>, C: AsRef<str>> From<(D, C)> for OffsetsLocation {
    fn from((database, collection): (D, C)) -> Self {
        Self {
            database: database.as_ref().to_owned(),
            collection: collection.as_ref().to_owned(),
        }
    }
}

impl OffsetsLocation {
    /// The collection of group slots, beside the offsets collection: `<offsets_collection>.slots`.
    pub(crate) fn slots_collection(&self) -> String {
        slots_collection(&self.collection)
    }

    /// The bridge's own collections in the offsets database: the offsets and, beside them, the
    /// group slots. No stream publishes them and no snapshot copies them.
    pub(crate) fn own_collections(&self) -> [String; 2] {
        [self.collection.clone(), self.slots_collection()]
    }
}

/// The collection of slots beside `offsets_collection`.
fn slots_collection(offsets_collection: &str) -> String {
    format!("{offsets_collection}.slots")
}
