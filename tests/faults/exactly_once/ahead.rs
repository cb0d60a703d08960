//! `eosahead`: an offsets document ahead of Kafka is never trusted. With the bridge stopped
//! after Kafka committed the events of `_id` 1–300, 10 more are written and the document is
//! set to the resume token of `_id` 305's event with its `commitSequence` raised by one —
//! what a commit reported OK that never became visible would leave (issue 37). The next
//! start resumes from Kafka's newest committed progress record: a fresh `read_committed` read
//! has every event once (none of 301–305 skipped), the log names both positions and
//! `mongo_kafka_bridge_offsets_ahead_of_kafka_total` is 1.

use std::time::Duration;

use bson::{Document, doc};
use futures::StreamExt;
use mongodb::options::ChangeStreamOptions;

use crate::common::kafka::Isolation;
use crate::common::load::Truth;
use crate::common::observe::{fetch, metric_sum};
use crate::common::records::read;
use crate::exactly_once::checks::{check_exactly_once, wait_committed};
use crate::say;
use crate::suite::{Ctx, Row};

const AHEAD: &str = "mongo_kafka_bridge_offsets_ahead_of_kafka_total";

pub async fn document_ahead(ctx: &Ctx) -> Vec<Row> {
    let mut row = Row::new("exactly once: offsets document ahead of Kafka");
    let stage = super::stage(ctx, "eosahead", "eosahead", 0, "", "").await;
    let (inst, cfg, client, coll) = stage.parts();
    let topic = cfg.topic();
    // GIVEN Kafka committed the events of _id 1–300, and the bridge stopped
    let (mut proc, _) = stage.start("eosahead-1.log").await;
    insert(coll, 1..=300).await;
    let first = Truth::read(coll).await;
    wait_committed(&inst.kafka, &topic, &first, Duration::from_secs(120)).await;
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    // AND 10 more writes, and a document that claims the events up to _id 305
    let committed = cfg.offsets(client).await.expect("an offsets document");
    insert(coll, 301..=310).await;
    let token = token_of(coll, &committed, 305).await;
    let offsets = client
        .database(&cfg.offsets_db())
        .collection::<Document>("offsets");
    offsets
        .update_one(
            doc! { "_id": &cfg.pipeline },
            doc! { "$set": { "resumeToken": token }, "$inc": { "commitSequence": 1_i64 } },
        )
        .await
        .expect("edit the offsets document");
    // WHEN the bridge starts again
    let (mut proc, addr) = stage.start("eosahead-2.log").await;
    let truth = Truth::read(coll).await;
    wait_committed(&inst.kafka, &topic, &truth, Duration::from_secs(120)).await;
    // THEN it resumed from Kafka's record: said, counted, and every event once
    let counted = fetch(&addr, "/metrics").map_or(0.0, |(_, m)| metric_sum(&m, AHEAD, &[]));
    let log = proc.log_text();
    let warned = log.contains("the offsets document is ahead of the newest transaction Kafka");
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    row.check(warned, || {
        "no warning naming the document ahead of Kafka".to_owned()
    });
    row.check(counted == 1.0, || format!("{AHEAD} is {counted}, not 1"));
    let records = read(&inst.kafka, &topic, Isolation::Committed).await;
    let v = check_exactly_once(&mut row, &truth, &records);
    say!(
        "eosahead: {} events, {} delivered, {} missing, {} duplicates; warned {warned}, \
         {AHEAD} {counted}",
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    let mut row = row.with_verdict(&v);
    row.finish("1 start", None, stage.started);
    vec![row]
}

async fn insert(coll: &mongodb::Collection<Document>, ids: std::ops::RangeInclusive<i64>) {
    for id in ids {
        coll.insert_one(doc! { "_id": id }).await.expect("insert");
    }
}

/// The resume token of the insert of `_id` `id`, read after the document's position.
async fn token_of(coll: &mongodb::Collection<Document>, committed: &Document, id: i64) -> Document {
    let after = committed
        .get_document("resumeToken")
        .expect("a committed resume token");
    let options = ChangeStreamOptions::builder()
        .resume_after(Some(
            bson::from_document(after.clone()).expect("a resume token"),
        ))
        .build();
    let mut stream = coll
        .watch()
        .with_options(options)
        .await
        .expect("open a change stream");
    while let Some(event) = stream.next().await {
        let event = event.expect("a change event");
        let key = event
            .document_key
            .as_ref()
            .and_then(|k| k.get_i64("_id").ok());
        if key == Some(id) {
            return bson::to_document(&event.id).expect("a token");
        }
    }
    panic!("no event for _id {id} after the committed position");
}
