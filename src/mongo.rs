//! The MongoDB client: building it from `[mongodb]`, the deployment's cluster time, the
//! diagnosis of a URI whose `replicaSet` does not match the servers', and (`cluster.rs`) the
//! identity of the cluster it reaches.
//!
//! Invariants: no error message carries the URI's secrets (they go through
//! [`Config::redact`]); the diagnosis only reads (`hello`) and is bounded in time.

use std::time::Duration;

use bson::{Timestamp, doc};
use mongodb::Client;
use mongodb::options::ClientOptions;

use crate::config::Config;
use crate::error::BridgeError;

pub(crate) mod cluster;

/// Bound of each call of the replica-set diagnosis.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Connects a MongoDB client for `config` (no I/O beyond SRV lookups; servers are contacted
/// lazily). Errors: [`BridgeError::Config`] on `mongodb.uri` for a URI the driver rejects.
pub(crate) async fn client(config: &Config) -> Result<Client, BridgeError> {
    client_with(config, |_| ()).await
}

/// Like [`client`], letting `adjust` change the parsed options (e.g. shorter timeouts).
pub(crate) async fn client_with(
    config: &Config,
    adjust: impl FnOnce(&mut ClientOptions),
) -> Result<Client, BridgeError> {
    let mut options = options(config).await?;
    adjust(&mut options);
    Client::with_options(options).map_err(|e| BridgeError::Config {
        field: "mongodb.uri".into(),
        reason: config.redact(&e.kind.to_string()),
    })
}

async fn options(config: &Config) -> Result<ClientOptions, BridgeError> {
    let mut options = ClientOptions::parse(config.mongodb.uri.expose())
        .await
        .map_err(|e| BridgeError::Config {
            field: "mongodb.uri".into(),
            reason: config.redact(&crate::error::describe_mongo(&e)),
        })?;
    if options.app_name.is_none() {
        options.app_name = Some("mongo-kafka-bridge".to_owned());
    }
    Ok(options)
}

/// The deployment's current cluster time: `operationTime` (else `$clusterTime.clusterTime`) of
/// a `hello`. `Ok(None)` when the server reports neither (a standalone server).
///
/// Errors: the driver's, when the server cannot be reached.
pub(crate) async fn cluster_time(
    client: &Client,
) -> Result<Option<Timestamp>, mongodb::error::Error> {
    let reply = client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await?;
    Ok(reply.get_timestamp("operationTime").ok().or_else(|| {
        reply
            .get_document("$clusterTime")
            .ok()?
            .get_timestamp("clusterTime")
            .ok()
    }))
}

/// When `mongodb.uri` names a `replicaSet`, asks each host it lists directly for its set name;
/// the first host that answers with another name gives a [`BridgeError::ReplicaSetMismatch`].
/// `None` when the URI names no set, the names agree, or no host answers (an outage, not a
/// mismatch).
pub(crate) async fn replica_set_mismatch(config: &Config) -> Option<BridgeError> {
    let options = options(config).await.ok()?;
    let configured = options.repl_set_name.clone()?;
    for host in &options.hosts {
        let mut direct = options.clone();
        direct.hosts = vec![host.clone()];
        direct.repl_set_name = None;
        direct.direct_connection = Some(true);
        direct.server_selection_timeout = Some(PROBE_TIMEOUT);
        direct.connect_timeout = Some(PROBE_TIMEOUT);
        let Ok(client) = Client::with_options(direct) else {
            continue;
        };
        let hello = client
            .database("admin")
            .run_command(doc! { "hello": 1 })
            .await;
        client.shutdown().immediate(true).await;
        let Ok(hello) = hello else { continue };
        let reported = hello
            .get_str("setName")
            .unwrap_or("(none: not a replica set)");
        if reported != configured {
            return Some(BridgeError::ReplicaSetMismatch {
                configured,
                reported: reported.to_owned(),
                host: host.to_string(),
            });
        }
    }
    None
}

/// The shard keys (field names in the key pattern's order) of the sharded collections in
/// `db.coll`, `db`, or the whole deployment (`db` `None`), from `config.collections`; none when
/// that cannot be read (a replica set has no sharded collections).
pub(crate) async fn shard_keys(
    client: &Client,
    db: Option<&str>,
    coll: Option<&str>,
) -> Vec<(String, Vec<String>)> {
    use futures::TryStreamExt;
    let filter = match (db, coll) {
        (Some(db), Some(coll)) => doc! { "_id": format!("{db}.{coll}") },
        (Some(db), None) => doc! { "_id": { "$regex": format!("^{}\\.", regex::escape(db)) } },
        _ => doc! {},
    };
    let found = client
        .database("config")
        .collection::<bson::Document>("collections")
        .find(filter)
        .await;
    let Ok(cursor) = found else {
        return Vec::new();
    };
    let docs: Vec<bson::Document> = cursor.try_collect().await.unwrap_or_default();
    docs.into_iter()
        .filter(|d| !d.get_bool("dropped").unwrap_or(false))
        .filter_map(|d| {
            let ns = d.get_str("_id").ok()?.to_owned();
            Some((ns, d.get_document("key").ok()?.keys().cloned().collect()))
        })
        .collect()
}
