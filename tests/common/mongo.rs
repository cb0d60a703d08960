//! MongoDB from the tests' side: a client of the shared server, the offsets document (read and
//! waited for), fail points (`configureFailPoint failCommand`), filling the oplog, and the first
//! change event after a committed resume token.

use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use mongodb::Client;
use mongodb::change_stream::event::ResumeToken;

use crate::common::servers::mongo_uri;

/// The bridge's MongoDB `appName` (its default), which fail points name: they then match its
/// commands only, so the test's own commands pass.
pub const APP_NAME: &str = "mongo-kafka-bridge";

/// A MongoDB client for the test servers, for the tests' own reads and writes.
///
/// Its writes are not retryable writes (`retryWrites=false`): they are not what is under test
/// (the bridges keep the driver's default), and SecantusDB keeps a record of every retryable
/// write for 30 minutes, at most 10 000 of them, sorting them all on every later retryable write
/// once past the cap: ~35 ms more per write, measured, where one takes ~2 ms. With the tests'
/// own single-document writes (well over 10 000) counted too, the shared server went past the
/// cap during the run and every later retryable write, each commit of a bridge included, paid it.
pub async fn mongo() -> Client {
    let mut options = mongodb::options::ClientOptions::parse(mongo_uri())
        .await
        .expect("valid MONGODB_URI");
    options.retry_writes = Some(false);
    Client::with_options(options).expect("valid MONGODB_URI")
}

/// Reads the offsets document of `pipeline`.
pub async fn offsets_doc(client: &Client, db: &str, pipeline: &str) -> Option<Document> {
    client
        .database(&format!("{db}_offsets"))
        .collection::<Document>("offsets")
        .find_one(doc! { "_id": pipeline })
        .await
        .expect("read offsets")
}

/// Waits until `check` holds on the offsets document, or panics after `timeout`.
pub async fn wait_offsets(
    client: &Client,
    db: &str,
    pipeline: &str,
    timeout: Duration,
    check: impl Fn(&Document) -> bool,
) -> Document {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(doc) = offsets_doc(client, db, pipeline).await
            && check(&doc)
        {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "offsets of {pipeline} did not reach the expected state"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The committed `clusterTime` of an offsets document as (seconds, increment); (0, 0) without.
pub fn committed_time(offsets: &Document) -> (u32, u32) {
    offsets
        .get_timestamp("clusterTime")
        .map(|t| (t.time, t.increment))
        .unwrap_or((0, 0))
}

/// The offsets document's `eventsCommitted`.
pub fn events_committed(offsets: &Document) -> i64 {
    offsets.get_i64("eventsCommitted").unwrap()
}

/// Sets fail point `failCommand` on the server of `client` in `mode` (`"alwaysOn"`,
/// `{times: n}`) with `data`.
pub async fn fail_point(client: &Client, mode: impl Into<Bson>, data: Document) {
    client
        .database("admin")
        .run_command(
            doc! { "configureFailPoint": "failCommand", "mode": mode.into(), "data": data },
        )
        .await
        .unwrap();
}

/// Makes the bridge's next `times` `commands` fail with `code` (and `labels`).
pub async fn fail_command(
    client: &Client,
    times: i32,
    commands: &[&str],
    code: i32,
    labels: &[&str],
) {
    let mut data = doc! { "failCommands": commands, "errorCode": code, "appName": APP_NAME };
    if !labels.is_empty() {
        data.insert("errorLabels", labels);
    }
    fail_point(client, doc! { "times": times }, data).await;
}

/// Turns fail point `failCommand` off.
pub async fn fail_point_off(client: &Client) {
    client
        .database("admin")
        .run_command(doc! { "configureFailPoint": "failCommand", "mode": "off" })
        .await
        .unwrap();
}

/// Writes `count` filler documents (one oplog entry each) into `db.filler`.
pub async fn fill_oplog(client: &Client, db: &str, count: i32) {
    let filler = client.database(db).collection::<Document>("filler");
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        filler
            .insert_many(chunk.iter().map(|i| doc! { "i": *i }))
            .await
            .unwrap();
    }
}

#[derive(serde::Deserialize)]
struct Token {
    t: ResumeToken,
}

/// The committed resume token of an offsets document.
pub fn resume_token(offsets: &Document) -> ResumeToken {
    let token = offsets.get_document("resumeToken").unwrap().clone();
    bson::from_bson::<Token>(Bson::Document(doc! { "t": token }))
        .unwrap()
        .t
}

/// The first event after `offsets`' committed token on `db.coll` (fragments kept as they are
/// when `split`), as a plain document.
pub async fn first_event_after(
    client: &Client,
    db: &str,
    coll: &str,
    offsets: &Document,
    split: bool,
) -> Document {
    let stages = if split {
        vec![doc! { "$changeStreamSplitLargeEvent": {} }]
    } else {
        vec![]
    };
    let mut stream = client
        .database(db)
        .collection::<Document>(coll)
        .watch()
        .pipeline(stages)
        .start_after(resume_token(offsets))
        .max_await_time(Duration::from_millis(200))
        .await
        .unwrap()
        .with_type::<Document>();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(event) = stream.next_if_any().await.unwrap() {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "no event after the committed token"
        );
    }
}
