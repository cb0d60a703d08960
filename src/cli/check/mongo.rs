//! The MongoDB half of `check`: deployment, privileges, change streams, images (`images.rs`),
//! oplog window, offsets documents and the largest documents of each watched collection.

use std::time::Duration;

use bson::{DateTime, Document, doc};
use mongodb::Client;
use mongodb::options::WriteConcern;

use super::{CHECK_TIMEOUT, CheckLine, CheckOptions, Largest, human, line, state, warning};
use crate::config::{Config, PipelineConfig};
use crate::error::{BridgeError, report};
use crate::mongo::cluster::ClusterRead;
use crate::observe::history::{OplogBounds, OplogUnknown, PRIVILEGE_HINT, oplog_bounds};
use crate::source::stream::{self, Start, StreamSpec};

/// Runs the MongoDB checks; also returns the largest document per watched collection.
pub(super) async fn check(
    config: &Config,
    options: &CheckOptions,
) -> Result<(Vec<CheckLine>, Vec<Largest>), BridgeError> {
    let secrets = config.secrets();
    let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
    let client = crate::mongo::client_with(config, |o| {
        o.server_selection_timeout = Some(CHECK_TIMEOUT);
        o.connect_timeout = Some(CHECK_TIMEOUT);
    })
    .await?;
    let hello = client
        .database("admin")
        .run_command(doc! { "hello": 1 })
        .await;
    let hello = match hello {
        Ok(h) => h,
        Err(e) => {
            let at = config.mongodb.uri.redacted();
            let at = at.split('?').next().unwrap_or("");
            if let Some(mismatch) = crate::mongo::replica_set_mismatch(config).await {
                return Ok((vec![line(false, mismatch.to_string())], Vec::new()));
            }
            let text = if crate::error::is_auth_failure(&e) {
                format!(
                    "MongoDB at {at}: {}. Remedy: check the user, password and authSource in \
                     mongodb.uri",
                    report(&e, &secrets)
                )
            } else {
                format!(
                    "MongoDB at {at} unreachable: {}. Remedy: check mongodb.uri (host, port, \
                     replicaSet / directConnection options), that the server runs and that this \
                     host may reach it",
                    report(&e, &secrets)
                )
            };
            return Ok((vec![line(false, text)], Vec::new()));
        }
    };
    let mut lines = Vec::new();
    if let Ok(set) = hello.get_str("setName") {
        lines.push(line(true, format!("MongoDB is a replica set ({set:?})")));
    } else if hello.get_str("msg") == Ok("isdbgrid") {
        lines.push(line(true, "MongoDB is a sharded cluster (mongos)"));
    } else {
        lines.push(line(
            false,
            "MongoDB is a standalone server: change streams need a replica set \
            or a sharded cluster. Remedy: start mongod with --replSet and run rs.initiate()",
        ));
        return Ok((lines, Vec::new()));
    }
    let (cluster_line, cluster) = cluster_line(&client).await;
    lines.push(cluster_line);
    lines.extend(check_privileges(&client, config).await);
    lines.push(check_offsets_write(&client, config, &secrets).await);
    let bounds = oplog_bounds(&client).await;
    lines.push(window_line(&bounds, options.min_oplog_window));
    let mut largest = Vec::new();
    for p in &config.pipelines {
        lines.push(check_stream(&client, config, p, &secrets).await);
        if p.may_drop_invalidate() {
            lines.push(warning(format!(
                "pipeline {}: its $match tests operationType without naming invalidate: unless \
                 it lets invalidate events through, a drop or rename of a watched collection \
                 makes the stream close again at the same place and reopen with backoff. \
                 Remedy: add \"invalidate\" to the operation types it keeps (README, Record format)",
                p.name
            )));
        }
        lines.extend(super::images::lines(&client, config, p, &secrets).await);
        lines.extend(super::fields::lines(&client, p).await);
        lines.extend(super::unwrap::lines(p));
        let bounds = bounds.as_ref().ok();
        lines.extend(state::offsets_lines(&client, config, p, bounds, cluster.as_ref()).await);
        largest.extend(state::largest_documents(&client, config, p).await);
    }
    client.shutdown().immediate(true).await;
    Ok((lines, largest))
}

/// The MongoDB cluster the URI reaches, as the server names it (`crate::mongo::cluster`): a
/// line naming it, or a warning that positions are then not checked against the cluster they
/// were committed on; and the read, to compare each pipeline's with (`None`: no answer).
async fn cluster_line(client: &Client) -> (CheckLine, Option<ClusterRead>) {
    let read = tokio::time::timeout(CHECK_TIMEOUT, crate::mongo::cluster::read(client)).await;
    let Ok(Ok(found)) = read else {
        let text = "MongoDB cluster: its identity was not read in time (not checked)";
        return (warning(text), None);
    };
    let checked = match &found {
        ClusterRead::Known(identity) => line(true, format!("MongoDB cluster: {identity}")),
        ClusterRead::Unknown(reason) => warning(format!(
            "MongoDB cluster cannot be named ({reason}): run starts every pipeline without \
             checking that its position was committed on this cluster"
        )),
    };
    (checked, Some(found))
}

async fn check_privileges(client: &Client, config: &Config) -> Vec<CheckLine> {
    let status = client
        .database("admin")
        .run_command(doc! { "connectionStatus": 1, "showPrivileges": true })
        .await;
    let Ok(status) = status else {
        return vec![line(
            false,
            "connectionStatus failed: cannot list the user's privileges",
        )];
    };
    let auth = status.get_document("authInfo").ok();
    let users = auth.and_then(|a| a.get_array("authenticatedUsers").ok());
    if users.is_none_or(|u| u.is_empty()) {
        return vec![line(
            true,
            "no authenticated user: the server does not enforce privileges",
        )];
    }
    let privileges: Vec<Document> = auth
        .and_then(|a| a.get_array("authenticatedUserPrivileges").ok())
        .map(|a| a.iter().filter_map(|p| p.as_document().cloned()).collect())
        .unwrap_or_default();
    let mut lines = Vec::new();
    for p in &config.pipelines {
        let (db, coll) = (p.database.as_deref(), p.collection.as_deref());
        let missing: Vec<&str> = ["changeStream", "find"]
            .into_iter()
            .filter(|a| !super::privileges::grants(&privileges, db, coll, a))
            .collect();
        lines.push(if missing.is_empty() {
            line(
                true,
                format!(
                    "pipeline {}: user may changeStream and find on {}",
                    p.name,
                    p.scope()
                ),
            )
        } else {
            line(
                false,
                format!(
                    "pipeline {}: user lacks {} on {}. Remedy: grant a role with these actions on \
                 the namespace (e.g. read on the database)",
                    p.name,
                    missing.join(" and "),
                    p.scope()
                ),
            )
        });
    }
    let m = &config.mongodb;
    let missing: Vec<&str> = ["find", "insert", "update", "remove"]
        .into_iter()
        .filter(|a| {
            !super::privileges::grants(
                &privileges,
                Some(&m.offsets_database),
                Some(&m.offsets_collection),
                a,
            )
        })
        .collect();
    if !missing.is_empty() {
        lines.push(line(
            false,
            format!(
                "user lacks {} on the offsets collection {}.{}. Remedy: grant readWrite on {}",
                missing.join(", "),
                m.offsets_database,
                m.offsets_collection,
                m.offsets_database
            ),
        ));
    }
    lines
}

/// An update with write concern `majority` that matches no document: proves the user may write
/// the offsets collection and that majority writes are acknowledged, without writing anything.
async fn check_offsets_write(client: &Client, config: &Config, secrets: &[&str]) -> CheckLine {
    let m = &config.mongodb;
    let mut wc = WriteConcern::majority();
    wc.w_timeout = Some(CHECK_TIMEOUT);
    let collection = client
        .database(&m.offsets_database)
        .collection::<Document>(&m.offsets_collection);
    let probe = collection
        .update_one(
            doc! { "_id": "__mongo_kafka_bridge_check__", "__never__": true },
            doc! { "$set": { "checkedAt": DateTime::now() } },
        )
        .write_concern(wc);
    match tokio::time::timeout(CHECK_TIMEOUT, probe.into_future()).await {
        Ok(Ok(_)) => line(
            true,
            format!(
                "offsets collection {}.{} writable with write concern majority",
                m.offsets_database, m.offsets_collection
            ),
        ),
        Ok(Err(e)) => line(
            false,
            format!(
                "offsets collection {}.{} not writable with majority: {}. Remedy: grant readWrite on \
             {} and check that a majority of the replica set is up",
                m.offsets_database,
                m.offsets_collection,
                report(&e, secrets),
                m.offsets_database
            ),
        ),
        Err(_) => line(
            false,
            "majority write on the offsets collection timed out: is a majority of the replica set up?",
        ),
    }
}

fn window_line(bounds: &Result<OplogBounds, OplogUnknown>, min: Duration) -> CheckLine {
    let remedy = "Remedy: grow the oplog (replSetResizeOplog) or set oplogMinRetentionHours";
    match bounds {
        Ok(b) => {
            let window = u64::from(b.window_secs());
            let young = if window < 60 {
                "; a new or little-written oplog's window grows with writes until it fills"
            } else {
                ""
            };
            let text = format!(
                "oplog window {} (oldest entry {}, newest {}{young})",
                human(window),
                crate::event::rfc3339_seconds(b.oldest.time.into()),
                crate::event::rfc3339_seconds(b.newest.time.into())
            );
            if min.is_zero() {
                line(
                    true,
                    format!("{text}; no minimum set (--min-oplog-window-hours)"),
                )
            } else if window >= min.as_secs() {
                line(true, format!("{text} ≥ minimum {}", human(min.as_secs())))
            } else {
                line(
                    false,
                    format!(
                        "{text} is below the minimum {}. {remedy}",
                        human(min.as_secs())
                    ),
                )
            }
        }
        Err(reason) if min.is_zero() => line(
            true,
            format!("oplog window unknown ({reason}); no minimum set"),
        ),
        Err(reason) => {
            let remedy = if reason.refused {
                format!(" Remedy: {PRIVILEGE_HINT}, or check on a replica set member")
            } else {
                String::new()
            };
            line(
                false,
                format!(
                    "oplog window unknown ({reason}), minimum {} not verifiable.{remedy}",
                    human(min.as_secs())
                ),
            )
        }
    }
}

async fn check_stream(
    client: &Client,
    config: &Config,
    p: &PipelineConfig,
    secrets: &[&str],
) -> CheckLine {
    let m = &config.mongodb;
    let spec = StreamSpec {
        pipeline: p,
        offsets: &m.offsets(),
        max_await: Duration::from_millis(100),
    };
    let opened =
        tokio::time::timeout(CHECK_TIMEOUT, stream::open(client, &spec, &Start::Now)).await;
    match opened {
        Ok(Ok(_stream)) => line(
            true,
            format!("pipeline {}: change stream opens on {}", p.name, p.scope()),
        ),
        Ok(Err(e)) => line(
            false,
            format!(
                "pipeline {}: change stream on {} fails: {}. Remedy: check the namespace, the \
             `pipeline` stages and the user's changeStream and find privileges",
                p.name,
                p.scope(),
                report(&e, secrets)
            ),
        ),
        Err(_) => line(
            false,
            format!(
                "pipeline {}: change stream on {} timed out",
                p.name,
                p.scope()
            ),
        ),
    }
}
