//! The `snapshot` command: asks a pipeline's owner to copy its namespace(s) again while it
//! keeps streaming.
//!
//! Invariants: the request is stored in the pipeline's offsets document (`snapshotRequest`),
//! never in the user's database, and without moving the epoch, so a running owner is not
//! fenced: it reads the request within 5 s (`checkpoint::REQUEST_POLL`) and answers it after
//! any snapshot still running. A request made while no owner runs waits there. Requests that
//! meet (two commands at once, or one while an initial or re-sync snapshot waits) are merged,
//! never replaced (`Request::merge`). A namespace outside the pipeline's scope is refused.

use std::io::Write;

use crate::config::{Config, PipelineConfig};
use crate::error::BridgeError;
use crate::offsets::operator::OffsetsAdmin;
use crate::snapshot::{Reason, Request};

/// Stores the request of a snapshot of pipeline `name` (only `namespace`, `db.coll`, when
/// given); prints what happens next. `Ok(false)` when it was refused (printed why).
///
/// A request already waiting is merged with this one (both are answered by one snapshot),
/// never replaced, unless the running snapshot answers it (this one then runs after). A
/// namespace MongoDB does not have is refused (a typo would otherwise publish markers to a new
/// topic).
///
/// Errors: [`BridgeError::Checkpoint`] when MongoDB refuses or cannot be reached;
/// [`BridgeError::OffsetsDocument`] when the waiting request cannot be read.
pub async fn run(
    config: &Config,
    name: &str,
    namespace: Option<&str>,
    out: &mut impl Write,
) -> Result<bool, BridgeError> {
    let Some(p) = config.pipelines.iter().find(|p| p.name == name) else {
        let _ = writeln!(out, "✘ pipeline {name:?} is not in the configuration");
        return Ok(false);
    };
    let namespace = match namespace.map(|ns| within_scope(p, ns)).transpose() {
        Ok(ns) => ns,
        Err(reason) => {
            let _ = writeln!(out, "✘ {reason}");
            return Ok(false);
        }
    };
    let client = crate::mongo::client_with(config, |o| {
        o.server_selection_timeout = Some(std::time::Duration::from_secs(10));
    })
    .await?;
    let outcome = ask(config, &client, p, namespace, out).await;
    client.shutdown().immediate(true).await;
    outcome
}

/// [`run`] once connected: refuses a collection MongoDB does not have, stores the request,
/// says when it will run.
async fn ask(
    config: &Config,
    client: &mongodb::Client,
    p: &PipelineConfig,
    namespace: Option<(String, String)>,
    out: &mut impl Write,
) -> Result<bool, BridgeError> {
    let name = p.name.as_str();
    let failed = |e| BridgeError::Checkpoint {
        pipeline: name.to_owned(),
        source: Box::new(e),
    };
    if let Some((db, coll)) = &namespace {
        let found = client
            .database(db)
            .list_collection_names()
            .filter(bson::doc! { "name": coll })
            .await
            .map_err(failed)?;
        if found.is_empty() {
            let _ = writeln!(
                out,
                "✘ --namespace {db}.{coll}: MongoDB has no such collection (names are \
                 case-sensitive); nothing requested"
            );
            return Ok(false);
        }
    }
    let request = Request {
        reason: Reason::Requested,
        namespaces: namespace.map(|ns| vec![ns]),
        requested_at: bson::DateTime::now(),
    };
    let by = format!("operator@{}", crate::offsets::hostname());
    let admin = OffsetsAdmin::new(client, &config.mongodb);
    let (stored, live) = admin.request_snapshot(name, &request, &by).await?;
    let when = if live {
        "its owner (the instance holding the lease) starts it within 5 s, after any snapshot \
         still running, streaming on; if that instance has stopped, its next owner does when it \
         takes the pipeline"
    } else {
        "no instance holds the pipeline's lease now (none runs, or one is still starting): \
         its next owner starts it when it takes the pipeline"
    };
    let what = scope_of(p, &request);
    let _ = writeln!(
        out,
        "✔ snapshot of {what} requested for pipeline {name:?}: {when}; `offsets show {name}` \
         follows it"
    );
    if stored != request {
        let _ = writeln!(
            out,
            "  merged with the request already waiting: one snapshot of {} ({})",
            scope_of(p, &stored),
            stored.reason.as_str()
        );
    }
    Ok(true)
}

/// What `request` copies of `p`'s scope, for people.
fn scope_of(p: &PipelineConfig, request: &Request) -> String {
    match &request.namespaces {
        None => p.scope(),
        Some(list) => list
            .iter()
            .map(|(db, coll)| format!("{db}.{coll}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// `ns` (`db.coll`) split, if it is inside `p`'s scope. Errors: why not.
fn within_scope(p: &PipelineConfig, ns: &str) -> Result<(String, String), String> {
    let Some((db, coll)) = crate::snapshot::split_namespace(ns) else {
        return Err(format!("--namespace {ns:?}: use db.collection"));
    };
    let inside = match (&p.database, &p.collection) {
        (Some(d), Some(c)) => *d == db && *c == coll,
        (Some(d), None) => *d == db,
        _ => true,
    };
    if !inside {
        return Err(format!(
            "--namespace {ns}: outside the scope of pipeline {:?} ({})",
            p.name,
            p.scope()
        ));
    }
    Ok((db, coll))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_must_be_inside_the_scope() {
        let db = PipelineConfig::for_test("database = \"shop\"\n");
        assert_eq!(
            within_scope(&db, "shop.orders"),
            Ok(("shop".into(), "orders".into()))
        );
        assert_eq!(
            within_scope(&db, "crm.people"),
            Err("--namespace crm.people: outside the scope of pipeline \"p\" (shop)".into())
        );
        assert_eq!(
            within_scope(&db, "orders"),
            Err("--namespace \"orders\": use db.collection".into())
        );
    }
}
