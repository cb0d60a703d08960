//! The snapshot's fields of the offsets document: the running snapshot's state, a request
//! waiting for the owner, and the last finished snapshot.
//!
//! Shape (README, "Offsets"):
//! `snapshot: {id, reason, startedAt, requestedAt?, filter?, namespaces: [{db, coll, started,
//! lastId?, copied, changes?, done}]}`,
//! `snapshotRequest: {reason, namespace: null | "db.coll" | ["db.a", "db.b", …], requestedAt, by}`
//! (null: the whole scope; an array when requests for several namespaces were merged),
//! `lastSnapshot: {id, reason, startedAt, finishedAt, copied, requestedAt?}`.
//!
//! Invariants: a request whose `requestedAt` equals `lastSnapshot.requestedAt` was answered
//! (the owner stopped between the commit of the finished snapshot and the request's removal)
//! and reads as none, so it never runs twice; `lastId` keeps the server's BSON value and type (any `_id` type but array,
//! regex and undefined); a stored state this version cannot read is an error naming the field,
//! never a fresh start.

use bson::{Bson, DateTime, Document, doc};

use super::fields;
use crate::snapshot::{NamespaceCopy, Reason, Request, SnapshotState};

/// `state` as stored.
pub(crate) fn state_doc(state: &SnapshotState) -> Document {
    let namespaces: Vec<Bson> = state
        .namespaces
        .iter()
        .map(|n| {
            let mut d = doc! {
                "db": &n.db, "coll": &n.coll, "started": n.started,
                "copied": n.copied as i64, "done": n.done,
            };
            if let Some(id) = &n.last_id {
                d.insert("lastId", id.clone());
            }
            if let Some(changes) = n.changes {
                d.insert("changes", i64::try_from(changes).unwrap_or(i64::MAX));
            }
            Bson::Document(d)
        })
        .collect();
    let mut d = doc! {
        "id": &state.id,
        "reason": state.reason.as_str(),
        "startedAt": state.started_at,
        "namespaces": namespaces,
    };
    if let Some(at) = state.requested_at {
        d.insert("requestedAt", at);
    }
    if let Some(filter) = &state.filter {
        d.insert("filter", filter);
    }
    d
}

/// The `lastSnapshot` summary of a finished `state`, with the `requestedAt` of the request
/// it answered.
pub(crate) fn finished_doc(state: &SnapshotState) -> Document {
    let mut d = doc! {
        "id": &state.id,
        "reason": state.reason.as_str(),
        "startedAt": state.started_at,
        "finishedAt": DateTime::now(),
        "copied": state.copied() as i64,
    };
    if let Some(at) = state.requested_at {
        d.insert("requestedAt", at);
    }
    d
}

/// The `requestedAt` of a stored request the last finished snapshot already answered.
pub(crate) fn answered_request(d: &Document) -> Option<DateTime> {
    let waiting = d.get_document(fields::SNAPSHOT_REQUEST).ok()?;
    let at = waiting.get_datetime("requestedAt").ok()?;
    let last = d.get_document(fields::LAST_SNAPSHOT).ok()?;
    (last.get_datetime("requestedAt").ok() == Some(at)).then_some(*at)
}

/// `request` as stored, by `by` (an owner string or `operator@host`).
pub(crate) fn request_doc(request: &Request, by: &str) -> Document {
    let name = |(db, coll): &(String, String)| Bson::String(format!("{db}.{coll}"));
    let namespace = match request.namespaces.as_deref() {
        None => Bson::Null,
        Some([one]) => name(one),
        Some(list) => Bson::Array(list.iter().map(name).collect()),
    };
    doc! {
        "reason": request.reason.as_str(),
        "namespace": namespace,
        "requestedAt": request.requested_at,
        "by": by,
    }
}

fn wrong(field: &str, what: &str) -> String {
    format!("{}.{field} {what}", fields::SNAPSHOT)
}

/// The running snapshot stored in `d`, if any. Errors: a sentence naming the wrong field.
pub(crate) fn state_from(d: &Document) -> Result<Option<SnapshotState>, String> {
    let s = match d.get(fields::SNAPSHOT) {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(s)) => s,
        Some(_) => return Err(format!("{} must be a document", fields::SNAPSHOT)),
    };
    let id = s
        .get_str("id")
        .map_err(|_| wrong("id", "must be a string"))?;
    let reason = s
        .get_str("reason")
        .ok()
        .and_then(Reason::parse)
        .ok_or_else(|| wrong("reason", "must be initial, requested or history_lost"))?;
    let started_at = s
        .get_datetime("startedAt")
        .copied()
        .unwrap_or_else(|_| DateTime::now());
    let list = s
        .get_array("namespaces")
        .map_err(|_| wrong("namespaces", "must be an array"))?;
    let mut namespaces = Vec::with_capacity(list.len());
    for item in list {
        let n = item
            .as_document()
            .ok_or_else(|| wrong("namespaces", "must hold documents"))?;
        let text = |k: &str| {
            n.get_str(k)
                .map(str::to_owned)
                .map_err(|_| wrong(&format!("namespaces.{k}"), "must be a string"))
        };
        let count = |k: &str| match n.get(k) {
            Some(Bson::Int64(v)) => Some(u64::try_from(*v).unwrap_or(0)),
            Some(Bson::Int32(v)) => Some(u64::try_from(*v).unwrap_or(0)),
            _ => None,
        };
        let copied = count("copied").unwrap_or(0);
        namespaces.push(NamespaceCopy {
            db: text("db")?,
            coll: text("coll")?,
            started: n.get_bool("started").unwrap_or(false),
            last_id: n.get("lastId").cloned(),
            copied,
            changes: count("changes"),
            done: n.get_bool("done").unwrap_or(false),
        });
    }
    Ok(Some(SnapshotState {
        id: id.to_owned(),
        reason,
        started_at,
        namespaces,
        requested_at: s.get_datetime("requestedAt").ok().copied(),
        filter: s.get_str("filter").ok().map(str::to_owned),
    }))
}

/// `ns` (`db.coll`) split. Errors: the sentence naming the field.
fn namespace_from(ns: &str) -> Result<(String, String), String> {
    crate::snapshot::split_namespace(ns).ok_or_else(|| {
        format!(
            "{}.namespace must be \"db.collection\"",
            fields::SNAPSHOT_REQUEST
        )
    })
}

fn not_a_namespace() -> String {
    format!(
        "{}.namespace must be null, a string or a non-empty array of strings",
        fields::SNAPSHOT_REQUEST
    )
}

/// The snapshot request stored in `d`, if any. Errors: a sentence naming the wrong field.
pub(crate) fn request_from(d: &Document) -> Result<Option<Request>, String> {
    let r = match d.get(fields::SNAPSHOT_REQUEST) {
        None | Some(Bson::Null) => return Ok(None),
        Some(Bson::Document(_)) if answered_request(d).is_some() => return Ok(None),
        Some(Bson::Document(r)) => r,
        Some(_) => return Err(format!("{} must be a document", fields::SNAPSHOT_REQUEST)),
    };
    let reason = r
        .get_str("reason")
        .ok()
        .and_then(Reason::parse)
        .unwrap_or(Reason::Requested);
    let namespaces = match r.get("namespace") {
        None | Some(Bson::Null) => None,
        Some(Bson::String(ns)) => Some(vec![namespace_from(ns)?]),
        Some(Bson::Array(list)) if !list.is_empty() => {
            let mut out = Vec::with_capacity(list.len());
            for item in list {
                match item {
                    Bson::String(ns) => out.push(namespace_from(ns)?),
                    _ => return Err(not_a_namespace()),
                }
            }
            out.sort();
            out.dedup();
            Some(out)
        }
        Some(_) => return Err(not_a_namespace()),
    };
    Ok(Some(Request {
        reason,
        namespaces,
        requested_at: r
            .get_datetime("requestedAt")
            .copied()
            .unwrap_or_else(|_| DateTime::now()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_reads_back_as_written_with_every_id_type() {
        let ids = [
            Bson::Int64(1 << 40),
            Bson::Double(2.5),
            Bson::String("k".into()),
            Bson::ObjectId(bson::oid::ObjectId::from_bytes([7; 12])),
            Bson::DateTime(DateTime::from_millis(-5)),
            Bson::Document(doc! { "a": 1 }),
            Bson::MinKey,
            Bson::Null,
        ];
        for id in ids {
            let state = SnapshotState {
                id: "s1".into(),
                reason: Reason::HistoryLost,
                started_at: DateTime::from_millis(1000),
                namespaces: vec![
                    NamespaceCopy {
                        last_id: Some(id.clone()),
                        copied: 7,
                        changes: Some(3),
                        started: true,
                        ..NamespaceCopy::new("shop", "orders")
                    },
                    NamespaceCopy::new("shop", "items"),
                ],
                requested_at: Some(DateTime::from_millis(900)),
                filter: Some(r#"{"x":{"$numberInt":"1"}}"#.into()),
            };
            let stored = doc! { fields::SNAPSHOT: state_doc(&state) };
            assert_eq!(state_from(&stored), Ok(Some(state)), "{id:?}");
        }
        assert_eq!(state_from(&doc! {}), Ok(None));
        assert_eq!(
            state_from(&doc! { "snapshot": { "id": "x", "reason": "whenever", "namespaces": [] } }),
            Err("snapshot.reason must be initial, requested or history_lost".to_owned())
        );
    }

    #[test]
    fn a_request_names_its_namespaces_or_none() {
        let at = DateTime::from_millis(5);
        let request = Request {
            reason: Reason::Requested,
            namespaces: Some(vec![("shop".into(), "orders.v2".into())]),
            requested_at: at,
        };
        let stored = doc! { fields::SNAPSHOT_REQUEST: request_doc(&request, "me") };
        assert_eq!(
            stored
                .get_document("snapshotRequest")
                .unwrap()
                .get_str("namespace"),
            Ok("shop.orders.v2")
        );
        assert_eq!(request_from(&stored), Ok(Some(request.clone())));
        let two = Request {
            reason: Reason::HistoryLost,
            namespaces: Some(vec![("a".into(), "x".into()), ("b".into(), "y".into())]),
            requested_at: at,
        };
        let stored = doc! { fields::SNAPSHOT_REQUEST: request_doc(&two, "me") };
        assert_eq!(request_from(&stored), Ok(Some(two)));
        let whole = Request {
            namespaces: None,
            ..request.clone()
        };
        let stored = doc! { fields::SNAPSHOT_REQUEST: request_doc(&whole, "me") };
        assert_eq!(request_from(&stored), Ok(Some(whole)));
        for bad in [bson::bson!([]), bson::bson!(["a.b", 3]), bson::bson!(7)] {
            let stored = doc! { fields::SNAPSHOT_REQUEST: { "namespace": bad } };
            assert_eq!(
                request_from(&stored),
                Err("snapshotRequest.namespace must be null, a string or a non-empty array of strings".to_owned())
            );
        }
        let bad = doc! { fields::SNAPSHOT_REQUEST: { "namespace": "orders" } };
        assert_eq!(
            request_from(&bad),
            Err("snapshotRequest.namespace must be \"db.collection\"".to_owned())
        );
    }

    #[test]
    fn a_request_the_last_snapshot_answered_reads_as_none() {
        let answered = DateTime::from_millis(900);
        let state = SnapshotState {
            id: "s1".into(),
            reason: Reason::Requested,
            started_at: DateTime::from_millis(1000),
            namespaces: vec![NamespaceCopy::new("shop", "orders")],
            requested_at: Some(answered),
            filter: None,
        };
        let request = |at| Request {
            reason: Reason::Requested,
            namespaces: None,
            requested_at: at,
        };
        let stored = doc! {
            fields::LAST_SNAPSHOT: finished_doc(&state),
            fields::SNAPSHOT_REQUEST: request_doc(&request(answered), "me"),
        };
        assert_eq!(request_from(&stored), Ok(None));
        assert_eq!(answered_request(&stored), Some(answered));
        let newer = DateTime::from_millis(901);
        let stored = doc! {
            fields::LAST_SNAPSHOT: finished_doc(&state),
            fields::SNAPSHOT_REQUEST: request_doc(&request(newer), "me"),
        };
        assert_eq!(request_from(&stored), Ok(Some(request(newer))));
        assert_eq!(answered_request(&stored), None);
    }
}
