//! Pre-/post-images in `check`: for a pipeline that asks for them, every collection it captures
//! whose images are disabled (`listCollections`, `options.changeStreamPreAndPostImages.enabled`),
//! ✘ where an image is `required` (the pipeline would stop there), ⚠ where it is
//! `when_available` (the images would be absent).
//!
//! A collection scope captures its collection; a database or deployment scope the collections
//! its filter lets through ([`PipelineConfig::captured`]), which exist now. When that cannot be
//! told (a filter on `ns` that cannot be mapped, `listCollections` or `listDatabases` refused),
//! the line says so plainly (⚠), never ✔.
//!
//! Invariants: every call is bounded by [`CHECK_TIMEOUT`]; nothing is written; errors are
//! reported through [`report`] with the configuration's secrets redacted.

use std::collections::BTreeSet;

use bson::doc;
use futures::TryStreamExt;
use mongodb::Client;
use mongodb::results::CollectionType;

use super::{CHECK_TIMEOUT, CheckLine, line, warning};
use crate::config::captured::Namespace;
use crate::config::{Config, FullDocument, PipelineConfig, PreImages};
use crate::error::images::enable_command;
use crate::error::report;
use crate::snapshot::plan::INTERNAL_DATABASES;

/// Collections without images named one line each, at most; the rest are counted.
const MAX_LISTED: usize = 20;

/// A collection a pipeline captures, and whether it records pre- and post-images.
struct Captured {
    db: String,
    coll: String,
    enabled: bool,
}

/// The images lines of `p`: none when it asks for no image.
pub(super) async fn lines(
    client: &Client,
    config: &Config,
    p: &PipelineConfig,
    secrets: &[&str],
) -> Vec<CheckLine> {
    let post = matches!(
        p.full_document,
        FullDocument::WhenAvailable | FullDocument::Required
    );
    if !post && p.pre_images() == PreImages::Off {
        return Vec::new();
    }
    if let (Some(db), Some(coll)) = (&p.database, &p.collection) {
        return vec![collection_line(client, p, db, coll).await];
    }
    let mut lines = Vec::new();
    if p.full_document == FullDocument::Required {
        lines.push(warning(format!(
            "pipeline {}: full_document = \"required\" at scope {} is checked by the server, which \
             may apply it to every collection of the scope before the filter runs (SecantusDB \
             does): an update in any collection of the scope without post-images, captured or \
             not, can stop the stream. Remedy: enable them on every collection of the scope, or \
             use full_document = \"when_available\"",
            p.name,
            p.scope()
        )));
    }
    let patterns = match p.captured() {
        Ok(patterns) => patterns,
        Err(why) => {
            lines.push(cannot_tell(
                p,
                &format!("its filter cannot be mapped ({why})"),
            ));
            return lines;
        }
    };
    match resolve(client, config, &patterns, secrets).await {
        Ok((found, missing)) => lines.extend(scope_lines(p, &found, &missing)),
        Err(why) => lines.push(cannot_tell(p, &why)),
    }
    lines
}

/// The ⚠ of a pipeline whose captured collections cannot be told.
fn cannot_tell(p: &PipelineConfig, why: &str) -> CheckLine {
    warning(format!(
        "pipeline {}: cannot tell which collections it captures: {why}; pre-/post-images not \
         checked. Every collection it captures needs changeStreamPreAndPostImages enabled \
         (with a required image, a captured change without one stops the pipeline)",
        p.name
    ))
}

/// The line of one collection-scope pipeline's collection.
async fn collection_line(client: &Client, p: &PipelineConfig, db: &str, coll: &str) -> CheckLine {
    let database = client.database(db);
    let listing = database.list_collections().filter(doc! { "name": coll });
    let spec = match tokio::time::timeout(CHECK_TIMEOUT, listing.into_future()).await {
        Ok(Ok(mut cursor)) => cursor.try_next().await.ok().flatten(),
        _ => None,
    };
    let enabled = spec
        .and_then(|s| s.options.change_stream_pre_and_post_images)
        .is_some_and(|o| o.enabled);
    if enabled {
        return line(
            true,
            format!(
                "pipeline {}: pre-/post-images enabled on {db}.{coll}",
                p.name
            ),
        );
    }
    disabled_line(p, db, coll, "")
}

/// The line of a captured collection `db.coll` without images: ✘ when an image is required or
/// a snapshot's mirror depends on post-images, ⚠ otherwise. `which` qualifies the namespace.
fn disabled_line(p: &PipelineConfig, db: &str, coll: &str, which: &str) -> CheckLine {
    let remedy = format!("Remedy: {}", enable_command(db, coll));
    let name = &p.name;
    let pre_required = matches!(p.pre_images(), PreImages::Required | PreImages::Enforced);
    if pre_required || p.full_document == FullDocument::Required {
        let (option, changes) = if pre_required {
            ("full_document_before_change", "update, replace or delete")
        } else {
            ("full_document", "update")
        };
        return line(
            false,
            format!(
                "pipeline {name}: images are `required` ({option}) but not enabled on \
                 {db}.{coll}{which}: the pipeline stops at its first {changes} there. {remedy}"
            ),
        );
    }
    if p.snapshots() && p.full_document == FullDocument::WhenAvailable {
        return line(
            false,
            format!(
                "pipeline {name}: full_document = \"when_available\" but post-images are not \
                 enabled on {db}.{coll}{which}: updates would carry no document, and the \
                 snapshot's mirror would keep older copies as the last record of updated keys. \
                 {remedy} (or use full_document = \"update_lookup\")"
            ),
        );
    }
    warning(format!(
        "pipeline {name}: images are `when_available` but not enabled on {db}.{coll}{which}: \
         they will be absent. {remedy}"
    ))
}

/// The lines of a database or deployment scope: each captured collection without images (at
/// most [`MAX_LISTED`], then a count), each one its filter names that does not exist, or one ✔.
fn scope_lines(
    p: &PipelineConfig,
    found: &[Captured],
    missing: &[(String, String)],
) -> Vec<CheckLine> {
    let disabled: Vec<&Captured> = found.iter().filter(|c| !c.enabled).collect();
    let mut lines: Vec<CheckLine> = disabled
        .iter()
        .take(MAX_LISTED)
        .map(|c| disabled_line(p, &c.db, &c.coll, ", which it captures"))
        .collect();
    if disabled.len() > MAX_LISTED {
        // At the level of the lines it continues.
        let mut more = disabled_line(p, "…", "…", "");
        more.text = format!(
            "pipeline {}: and {} more captured collections without pre-/post-images",
            p.name,
            disabled.len() - MAX_LISTED
        );
        lines.push(more);
    }
    for (db, coll) in missing {
        lines.push(warning(format!(
            "pipeline {}: {db}.{coll}, which its filter names, does not exist yet: create it with \
             images, db.getSiblingDB({db:?}).createCollection({coll:?}, \
             {{changeStreamPreAndPostImages: {{enabled: true}}}})",
            p.name
        )));
    }
    if lines.is_empty() {
        let names: Vec<String> = found
            .iter()
            .map(|c| format!("{}.{}", c.db, c.coll))
            .collect();
        let shown = names
            .iter()
            .take(MAX_LISTED)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        let text = if names.is_empty() {
            "no collection it captures exists yet: create each with \
             changeStreamPreAndPostImages: {enabled: true}"
                .to_owned()
        } else {
            format!(
                "pre-/post-images enabled on the {} collections it captures ({shown}{})",
                names.len(),
                if names.len() > MAX_LISTED {
                    ", …"
                } else {
                    ""
                }
            )
        };
        lines.push(line(true, format!("pipeline {}: {text}", p.name)));
    }
    lines
}

/// The existing collections the `patterns` name (the bridge's own left out), and the named
/// ones that do not exist.
///
/// Errors: why the collections cannot be listed (the server's refusal, a timeout).
async fn resolve(
    client: &Client,
    config: &Config,
    patterns: &[Namespace],
    secrets: &[&str],
) -> Result<(Vec<Captured>, Vec<(String, String)>), String> {
    let offsets = config.mongodb.offsets();
    let mut databases: BTreeSet<String> = patterns.iter().filter_map(|(d, _)| d.clone()).collect();
    if patterns.iter().any(|(db, _)| db.is_none()) {
        let names = tokio::time::timeout(CHECK_TIMEOUT, client.list_database_names().into_future());
        match names.await {
            Ok(Ok(names)) => databases.extend(names),
            Ok(Err(e)) => return Err(format!("listDatabases failed: {}", report(&e, secrets))),
            Err(_) => return Err("listDatabases timed out".to_owned()),
        }
        databases.retain(|d| !INTERNAL_DATABASES.contains(&d.as_str()));
    }
    let (mut found, mut missing) = (Vec::new(), Vec::new());
    for db in databases {
        let listed = collections(client, &db, secrets).await?;
        for (pattern_db, coll) in patterns {
            if pattern_db.as_ref().is_some_and(|d| *d != db) {
                continue;
            }
            let own = |c: &str| {
                db == offsets.database && offsets.own_collections().iter().any(|o| o == c)
            };
            let matching = listed
                .iter()
                .filter(|(name, _)| coll.as_ref().is_none_or(|c| c == name) && !own(name));
            let before = found.len();
            found.extend(matching.map(|(name, enabled)| Captured {
                db: db.clone(),
                coll: name.clone(),
                enabled: *enabled,
            }));
            // Only a collection named with its database can be missing (`ns.coll` alone names
            // one in every database of a deployment).
            if let (Some(_), Some(c)) = (pattern_db, coll)
                && found.len() == before
                && !own(c)
            {
                missing.push((db.clone(), c.clone()));
            }
        }
    }
    found.sort_by(|a, b| (&a.db, &a.coll).cmp(&(&b.db, &b.coll)));
    found.dedup_by(|a, b| (&a.db, &a.coll) == (&b.db, &b.coll));
    missing.sort();
    missing.dedup();
    Ok((found, missing))
}

/// The plain collections of `db` (no views, time-series or system collections, which record no
/// images), with whether each records pre- and post-images.
async fn collections(
    client: &Client,
    db: &str,
    secrets: &[&str],
) -> Result<Vec<(String, bool)>, String> {
    let refused = |e: &mongodb::error::Error| {
        format!(
            "listCollections on {db} failed: {}. Remedy: grant listCollections on {db} (the read \
             role has it)",
            report(e, secrets)
        )
    };
    let read = async {
        let mut cursor = client.database(db).list_collections().await?;
        let mut out = Vec::new();
        while let Some(spec) = cursor.try_next().await? {
            let plain = matches!(spec.collection_type, CollectionType::Collection)
                && spec.options.timeseries.is_none()
                && !spec.name.starts_with("system.");
            let enabled = spec
                .options
                .change_stream_pre_and_post_images
                .is_some_and(|o| o.enabled);
            if plain {
                out.push((spec.name, enabled));
            }
        }
        Ok::<_, mongodb::error::Error>(out)
    };
    match tokio::time::timeout(CHECK_TIMEOUT, read).await {
        Ok(Ok(out)) => Ok(out),
        Ok(Err(e)) => Err(refused(&e)),
        Err(_) => Err(format!("listCollections on {db} timed out")),
    }
}
