//! Every metric name the bridge exports, and its labels: the public contract of `/metrics`
//! (alerts and dashboards may only use [`ALL`]).
//!
//! Invariants: names carry the `mongo_kafka_bridge_` prefix and base units, counters end in
//! `_total` (<https://prometheus.io/docs/practices/naming/>); every name is a `const` here and
//! nowhere else.

/// Changes of this member's group assignment, by `kind` (`assigned`, `revoked`, `lost`, `error`).
pub const GROUP_REBALANCES: &str = "mongo_kafka_bridge_group_rebalances_total";
/// Seconds from a revocation to the revoked pipelines' stop.
pub const GROUP_REVOKE_DURATION: &str = "mongo_kafka_bridge_group_revoke_duration_seconds";
/// Pipelines the group assigned to this member and that it runs.
pub const GROUP_OWNED: &str = "mongo_kafka_bridge_group_owned_pipelines";
/// Configured pipelines whose slot has no partition of the control topic (no member can run
/// them).
pub const GROUP_UNASSIGNABLE: &str = "mongo_kafka_bridge_group_unassignable_pipelines";
/// Configuration reloads (SIGHUP), by `outcome`: `applied`, `unchanged`, `rejected`.
pub const CONFIG_RELOADS: &str = "mongo_kafka_bridge_config_reloads_total";
/// Change events read, by `pipeline`, `operation_type`.
pub const SOURCE_EVENTS: &str = "mongo_kafka_bridge_source_events_total";
/// Raw change event bytes read, by `pipeline`.
pub const SOURCE_BYTES: &str = "mongo_kafka_bridge_source_bytes_total";
/// Change events encoded on the encode pool (`[bridge] encode_threads`), by `pipeline`.
pub const POOL_ENCODED: &str = "mongo_kafka_bridge_source_events_pool_encoded_total";
/// Post-batch resume tokens taken as positions, by `pipeline`.
pub const SOURCE_WATERMARKS: &str = "mongo_kafka_bridge_source_watermarks_total";
/// Records handed to librdkafka, by `pipeline`, `topic`.
pub const MESSAGES_ENQUEUED: &str = "mongo_kafka_bridge_kafka_messages_enqueued_total";
/// Records acknowledged by the broker, by `pipeline`, `topic`, `operation_type`.
pub const MESSAGES_DELIVERED: &str = "mongo_kafka_bridge_kafka_messages_delivered_total";
/// Records Kafka did not acknowledge, by `pipeline`, `topic`, `error_code` (librdkafka code
/// name, or `cancelled` / `dead_lettered`).
pub const DELIVERY_ERRORS: &str = "mongo_kafka_bridge_kafka_delivery_errors_total";
/// Events JSON cannot carry exactly that `on_ambiguous` diverted, by `pipeline`, `outcome`
/// (`dead_lettered`: a stub went to the dead-letter topic; `bson`: published as BSON).
pub const AMBIGUOUS_EVENTS: &str = "mongo_kafka_bridge_ambiguous_events_total";
/// Times librdkafka's queue was full and the relay waited, by `pipeline`.
pub const QUEUE_FULL: &str = "mongo_kafka_bridge_kafka_queue_full_total";
/// Seconds from enqueue to delivery of an event's records, by `pipeline`, `topic`.
pub const DELIVERY_DURATION: &str = "mongo_kafka_bridge_kafka_delivery_duration_seconds";
/// Seconds from an event's `wallTime` (else its `clusterTime`) to its delivery, by `pipeline`.
pub const END_TO_END_LATENCY: &str = "mongo_kafka_bridge_end_to_end_latency_seconds";
/// Events enqueued and not yet delivered, by `pipeline`.
pub const IN_FLIGHT_EVENTS: &str = "mongo_kafka_bridge_in_flight_events";
/// Bytes of records enqueued and not yet delivered, by `pipeline`.
pub const IN_FLIGHT_BYTES: &str = "mongo_kafka_bridge_in_flight_bytes";
/// Offsets writes, by `pipeline`, `outcome` (`ok`, `error`, `lease` = nothing new, lease renewed).
pub const CHECKPOINT_COMMITS: &str = "mongo_kafka_bridge_checkpoint_commits_total";
/// Seconds an offsets write took, by `pipeline`.
pub const CHECKPOINT_DURATION: &str = "mongo_kafka_bridge_checkpoint_commit_duration_seconds";
/// `clusterTime` of the last committed event (Unix seconds), by `pipeline`.
pub const CHECKPOINT_TIMESTAMP: &str = "mongo_kafka_bridge_checkpoint_timestamp_seconds";
/// Now minus the cluster time of the committed position (`positionTime`), seconds, by
/// `pipeline`; computed at scrape time, so it grows while commits stall.
pub const CHECKPOINT_LAG: &str = "mongo_kafka_bridge_checkpoint_lag_seconds";
/// Now minus the `clusterTime` of the last event read (seconds), when it was read, by
/// `pipeline`; 0 once an empty batch shows the stream read up to now.
pub const SOURCE_LAG: &str = "mongo_kafka_bridge_source_lag_seconds";
/// The committed position's cluster time minus the oldest oplog entry's (seconds), by
/// `pipeline`: the oplog window minus the committed position's age. Absent when the server
/// does not report its oldest entry.
pub const HISTORY_HEADROOM: &str = "mongo_kafka_bridge_history_headroom_seconds";
/// Newest minus oldest oplog entry time (seconds), as last sampled. Absent when unknown.
pub const HISTORY_WINDOW: &str = "mongo_kafka_bridge_history_window_seconds";
/// Errors, by `pipeline`, `stage`, `class`.
pub const ERRORS: &str = "mongo_kafka_bridge_errors_total";
/// Pipeline restarts, by `pipeline`, `reason`.
pub const RESTARTS: &str = "mongo_kafka_bridge_pipeline_restarts_total";
/// Escalations, by `pipeline`, `reason` (an error kind): the same failure ended
/// `ESCALATE_AFTER` runs in a row with nothing committed, and the pipeline rebuilt its MongoDB
/// and Kafka clients (`pipeline/recovery.rs`).
pub const CLIENT_REBUILDS: &str = "mongo_kafka_bridge_pipeline_client_rebuilds_total";
/// 1 while the pipeline's change stream is open, by `pipeline`.
pub const STREAM_OPEN: &str = "mongo_kafka_bridge_stream_open";
/// 1 while this instance owns the pipeline (holds its epoch), 0 while it stands by or after
/// it stopped, by `pipeline`.
pub const PIPELINE_OWNED: &str = "mongo_kafka_bridge_pipeline_owned";
/// 1 when the pipeline was refused because its configured stream, or the MongoDB cluster
/// `mongodb.uri` reaches, differs from the one its position was committed for, by `pipeline`.
pub const PIPELINE_REFUSED: &str = "mongo_kafka_bridge_pipeline_refused";
/// 1 when the MongoDB cluster's identity could not be read at the pipeline's last take (a
/// missing privilege), so its position was not checked against the cluster it was committed
/// on, by `pipeline`.
pub const PIPELINE_CLUSTER_UNCHECKED: &str = "mongo_kafka_bridge_pipeline_cluster_unchecked";
/// 1 while the pipeline stopped on a failure it cannot get past by itself (the other pipelines
/// run on; SIGHUP or a restart runs it again), by `pipeline`.
pub const PIPELINE_FAILED: &str = "mongo_kafka_bridge_pipeline_failed";
/// Times a pipeline found that a topic it writes does not exist (once per episode: until the
/// topic exists), by `pipeline`.
pub const TOPIC_MISSING: &str = "mongo_kafka_bridge_topic_missing_total";
/// librdkafka `msg_cnt`: records in the producer's queues, by `pipeline`.
pub const RDKAFKA_QUEUE_MESSAGES: &str = "mongo_kafka_bridge_rdkafka_queue_messages";
/// librdkafka `msg_size`: bytes of records in the producer's queues, by `pipeline`.
pub const RDKAFKA_QUEUE_BYTES: &str = "mongo_kafka_bridge_rdkafka_queue_bytes";
/// librdkafka `outbuf_msg_cnt` summed over brokers: records awaiting transmission.
pub const RDKAFKA_OUTBUF_MESSAGES: &str = "mongo_kafka_bridge_rdkafka_outbuf_messages";
/// librdkafka `waitresp_msg_cnt` summed over brokers: records sent, awaiting a response.
pub const RDKAFKA_WAITRESP_MESSAGES: &str = "mongo_kafka_bridge_rdkafka_waitresp_messages";
/// librdkafka `txretries` summed over brokers: produce request retries, by `pipeline`.
pub const RDKAFKA_RETRIES: &str = "mongo_kafka_bridge_rdkafka_retries_total";
/// Documents a snapshot copied, by `pipeline` and `namespace`.
pub const SNAPSHOT_DOCUMENTS: &str = "mongo_kafka_bridge_snapshot_documents_total";
/// Estimate of the documents a running copy has left, by `pipeline` and `namespace`.
pub const SNAPSHOT_REMAINING: &str = "mongo_kafka_bridge_snapshot_remaining_documents";
/// 1 while a namespace is being copied, by `pipeline` and `namespace`.
pub const SNAPSHOT_RUNNING: &str = "mongo_kafka_bridge_snapshot_running";
/// Copies whose count disagreed with `countDocuments` beyond the changes seen meanwhile, by
/// `pipeline` and `namespace` (failed, or warned with `snapshot_count_check = "warn"`).
pub const SNAPSHOT_COUNT_MISMATCH: &str = "mongo_kafka_bridge_snapshot_count_mismatch_total";
/// Constant 1 with `version` and `git_sha`.
pub const BUILD_INFO: &str = "mongo_kafka_bridge_build_info";

/// Kafka transactions ended, by `pipeline`, `outcome` (`committed`, `aborted`).
pub const TRANSACTIONS: &str = "mongo_kafka_bridge_transactions_total";
/// First record to end of a transaction, seconds, by `pipeline`.
pub const TRANSACTION_DURATION: &str = "mongo_kafka_bridge_transaction_duration_seconds";
/// The `commit_transaction` call (EndTxn, after the flush), seconds, by `pipeline`.
pub const TRANSACTION_COMMIT_DURATION: &str =
    "mongo_kafka_bridge_transaction_commit_duration_seconds";
/// Records per committed transaction (the progress record included), by `pipeline`.
pub const TRANSACTION_RECORDS: &str = "mongo_kafka_bridge_transaction_records";
/// Starts of an exactly-once pipeline whose offsets document was ahead of Kafka's newest
/// committed progress record (it resumed from the record and rewound the document), by
/// `pipeline`.
pub const DOCUMENT_AHEAD: &str = "mongo_kafka_bridge_offsets_ahead_of_kafka_total";

/// Heartbeat records delivered (exactly once: committed), by `pipeline`.
pub const HEARTBEATS: &str = "mongo_kafka_bridge_heartbeats_total";
/// When the last delivered heartbeat was written (Unix seconds; before the first, when the
/// pipeline first started in this process), by `pipeline`.
pub const HEARTBEAT_TIMESTAMP: &str = "mongo_kafka_bridge_heartbeat_timestamp_seconds";
/// The configured `heartbeat_interval_ms` in seconds, by `pipeline` (for the alert).
pub const HEARTBEAT_INTERVAL: &str = "mongo_kafka_bridge_heartbeat_interval_seconds";
/// Events routing could not place as configured, by `pipeline`, `kind` (`topic`: sent to
/// `default_topic` or the usual topic; `key`: keyed by `documentKey` for want of `key_field`).
pub const ROUTING_FALLBACKS: &str = "mongo_kafka_bridge_routing_fallbacks_total";

/// The git commit the binary was built from (`MKB_GIT_SHA` at build time, see `build.rs`), or
/// `unknown`.
pub const GIT_SHA: &str = match option_env!("MKB_GIT_SHA") {
    Some(sha) => sha,
    None => "unknown",
};

/// Every metric name this crate exports (alerts and dashboards may only use these).
pub const ALL: [&str; 47] = [
    SOURCE_EVENTS,
    SOURCE_BYTES,
    SOURCE_WATERMARKS,
    MESSAGES_ENQUEUED,
    MESSAGES_DELIVERED,
    DELIVERY_ERRORS,
    AMBIGUOUS_EVENTS,
    QUEUE_FULL,
    DELIVERY_DURATION,
    END_TO_END_LATENCY,
    IN_FLIGHT_EVENTS,
    IN_FLIGHT_BYTES,
    CHECKPOINT_COMMITS,
    CHECKPOINT_DURATION,
    CHECKPOINT_TIMESTAMP,
    CHECKPOINT_LAG,
    SOURCE_LAG,
    HISTORY_HEADROOM,
    HISTORY_WINDOW,
    ERRORS,
    RESTARTS,
    CLIENT_REBUILDS,
    STREAM_OPEN,
    PIPELINE_OWNED,
    PIPELINE_REFUSED,
    PIPELINE_CLUSTER_UNCHECKED,
    PIPELINE_FAILED,
    TOPIC_MISSING,
    RDKAFKA_QUEUE_MESSAGES,
    RDKAFKA_QUEUE_BYTES,
    RDKAFKA_OUTBUF_MESSAGES,
    RDKAFKA_WAITRESP_MESSAGES,
    RDKAFKA_RETRIES,
    SNAPSHOT_DOCUMENTS,
    SNAPSHOT_REMAINING,
    SNAPSHOT_RUNNING,
    SNAPSHOT_COUNT_MISMATCH,
    BUILD_INFO,
    TRANSACTIONS,
    TRANSACTION_DURATION,
    TRANSACTION_COMMIT_DURATION,
    TRANSACTION_RECORDS,
    DOCUMENT_AHEAD,
    HEARTBEATS,
    HEARTBEAT_TIMESTAMP,
    HEARTBEAT_INTERVAL,
    ROUTING_FALLBACKS,
];
