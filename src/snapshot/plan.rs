//! Which namespaces a snapshot copies, and how their copied documents are keyed.
//!
//! Invariants: a collection scope copies its collection; a database or deployment scope copies
//! every collection it would stream, skipping (with a log line) what MongoDB cannot copy as
//! documents or the bridge must not: views, time-series collections and their buckets, system
//! collections, the `admin`, `config` and `local` databases, and the bridge's own offsets
//! collection. A collection created after the plan reaches the topic through the stream.

use bson::{Document, doc};
use futures::TryStreamExt;
use mongodb::Client;
use mongodb::results::CollectionType;

use super::order::Strings;
use crate::config::PipelineConfig;
use crate::config::names::OffsetsLocation;

/// Databases a deployment-scope snapshot never copies.
pub(crate) const INTERNAL_DATABASES: [&str; 3] = ["admin", "config", "local"];

/// The namespaces `p` copies, in name order; `only`: just these (a request naming them).
/// `offsets`: where the bridge's own collections are.
///
/// Errors: the driver's (listing databases or collections).
pub(crate) async fn namespaces(
    client: &Client,
    p: &PipelineConfig,
    offsets: &OffsetsLocation,
    only: Option<&[(String, String)]>,
) -> Result<Vec<(String, String)>, mongodb::error::Error> {
    if let Some(list) = only {
        return Ok(list.to_vec());
    }
    let databases = match (&p.database, &p.collection) {
        (Some(db), Some(coll)) => return Ok(vec![(db.clone(), coll.clone())]),
        (Some(db), None) => vec![db.clone()],
        _ => {
            let mut names = client.list_database_names().await?;
            names.retain(|d| !INTERNAL_DATABASES.contains(&d.as_str()));
            names.sort();
            names
        }
    };
    let mut out = Vec::new();
    for db in databases {
        for coll in collections(client, &db).await? {
            if db == offsets.database && offsets.own_collections().contains(&coll) {
                continue;
            }
            out.push((db.clone(), coll));
        }
    }
    Ok(out)
}

/// The plain collections of `db`, in name order; skipped ones are logged.
async fn collections(client: &Client, db: &str) -> Result<Vec<String>, mongodb::error::Error> {
    let mut specs = client.database(db).list_collections().await?;
    let mut names = Vec::new();
    while let Some(spec) = specs.try_next().await? {
        let plain = matches!(spec.collection_type, CollectionType::Collection)
            && spec.options.timeseries.is_none();
        let kind = format!("{:?}", spec.collection_type).to_lowercase();
        let name = spec.name;
        if name.starts_with("system.") || !plain {
            tracing::info!(namespace = %format!("{db}.{name}"), kind = %kind,
                "snapshot skips it: not a plain collection (views, time-series collections and \
                 system collections are not copied)");
            continue;
        }
        names.push(name);
    }
    names.sort();
    Ok(names)
}

/// The shard key's field names of `db.coll`, in the key pattern's order, when it is sharded
/// (`config.collections`); `None` when it is not, or when `config` cannot be read (a replica
/// set has no sharded collections).
pub(crate) async fn shard_key(client: &Client, db: &str, coll: &str) -> Option<Vec<String>> {
    let found = client
        .database("config")
        .collection::<Document>("collections")
        .find_one(doc! { "_id": format!("{db}.{coll}") })
        .await
        .ok()??;
    if found.get_bool("dropped").unwrap_or(false) {
        return None;
    }
    let pattern = found.get_document("key").ok()?;
    Some(pattern.keys().cloned().collect())
}

/// How the `_id` order check compares strings in `db.coll`: binary, unless the collection has
/// a non-simple default collation (logged: its string order is not checked).
///
/// Errors: the driver's (listing the collection).
pub(crate) async fn strings(
    client: &Client,
    db: &str,
    coll: &str,
) -> Result<Strings, mongodb::error::Error> {
    let mut specs = client
        .database(db)
        .list_collections()
        .filter(doc! { "name": coll })
        .await?;
    let collation = match specs.try_next().await? {
        Some(spec) => spec.options.collation,
        None => None,
    };
    match collation {
        Some(c) if c.locale != "simple" => {
            tracing::warn!(namespace = %format!("{db}.{coll}"), locale = %c.locale,
                "the copy's _id order check does not compare strings in this collection: its \
                 collation orders them (only the simple binary order is checked)");
            Ok(Strings::Unchecked)
        }
        _ => Ok(Strings::Binary),
    }
}
