//! `groupsnap`: a revocation in the middle of a snapshot: the next owner resumes after the
//! committed progress and the topic holds every document.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bson::{Document, doc};

use crate::common::collect::collect_from;
use crate::group::{World, ready_says};
use crate::say;
use crate::suite::{Ctx, Row};

/// `copied_in_this_run` of the "namespace copied" line in `log`, if it has one.
fn copied_in_this_run(log: &str) -> Option<u64> {
    log.lines()
        .filter(|l| l.contains("\"namespace copied\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["copied_in_this_run"].as_u64())
}

const DOCS: i64 = 8_000;

/// Seeds the collection with [`DOCS`] documents and writes the configuration (pipeline `p0`
/// with an initial snapshot in batches of 200); its path.
async fn seeded(ctx: &Ctx, world: &World) -> PathBuf {
    let (cfg, client) = (&world.cfg, &world.client);
    let coll = client.database(&cfg.db).collection::<Document>("t0");
    for chunk in (0..DOCS).collect::<Vec<_>>().chunks(5000) {
        let docs: Vec<Document> = chunk
            .iter()
            .map(|i| doc! { "_id": *i, "pad": "x".repeat(200) })
            .collect();
        coll.insert_many(docs).await.expect("seed");
    }
    let snapshot = "snapshot = \"initial\"\nfull_document = \"update_lookup\"\n\
                    snapshot_batch_size = 200\njson = \"relaxed\"\n";
    let text = cfg.toml().replace(
        &cfg.entry(0, "json = \"relaxed\"\n"),
        &cfg.entry(0, snapshot),
    );
    let path = ctx.dir.join("groupsnap.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

/// The documents of the snapshot the offsets document of `p0` says are copied, once there
/// are some (waited for 90 s; 0 without).
async fn committed_copy(world: &World) -> i64 {
    let offsets = world
        .client
        .database(&world.cfg.offsets_db())
        .collection::<Document>("offsets");
    let copied = |d: &Document| -> i64 {
        d.get_document("snapshot")
            .ok()
            .and_then(|s| s.get_array("namespaces").ok())
            .map_or(0, |ns| {
                ns.iter()
                    .filter_map(|n| n.as_document()?.get_i64("copied").ok())
                    .sum()
            })
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut progress = 0;
    while Instant::now() < deadline {
        let doc = offsets.find_one(doc! { "_id": "p0" }).await.ok().flatten();
        progress = doc.as_ref().map_or(0, copied);
        if progress > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    progress
}

pub async fn revoked_mid_snapshot(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let world = World::servers(ctx, "groupsnap", "groupsnap", 1, 1).await;
    let (inst, cfg) = (&world.inst, &world.cfg);
    let path = seeded(ctx, &world).await;
    let mut row = Row::new("group: revoked in the middle of a snapshot");
    // GIVEN member A copying the collection
    let mut a = world.member(&path, "groupsnap-a.log");
    let progress = committed_copy(&world).await;
    row.check(progress > 0 && progress < DOCS, || {
        format!("A's committed copy progress was {progress}")
    });
    // WHEN B joins and A leaves (SIGTERM: its slot is revoked, it drains and commits)
    let b = world.member(&path, "groupsnap-b.log");
    // (B joins first, as in a rolling update: a tansu group whose every member left is slow,
    // sometimes minutes, to assign again; a stand-in quirk the bench also met)
    let joined = ready_says(&b, 200, "member").await;
    row.check(joined.is_some(), || "B never joined the group".into());
    let status = a.proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("A's graceful stop: {status}"));
    // THEN B resumes after A's committed progress, and the topic holds every document
    let b_log = || b.proc.log_text();
    let deadline = Instant::now() + Duration::from_secs(300);
    while copied_in_this_run(&b_log()).is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let resumed = b_log().contains("resuming the snapshot after its committed progress");
    let b_copied = copied_in_this_run(&b_log());
    let a_copied = a.proc.log_text().contains("\"snapshot\"");
    say!(
        "group: snapshot revoked after {progress} committed of {DOCS}; B resumed: {resumed}, copied {b_copied:?} in its run (A logged snapshot lines: {a_copied})"
    );
    row.check(resumed, || "B did not resume the snapshot".into());
    row.check(
        b_copied.is_some_and(|n| (n as i64) <= DOCS - progress),
        || {
            format!(
                "B copied {b_copied:?} documents, more than the {} left after A's commit",
                DOCS - progress
            )
        },
    );
    let records = collect_from(
        &inst.kafka,
        &cfg.topic(0),
        DOCS as usize,
        Duration::from_secs(2),
        Duration::from_secs(120),
    )
    .await;
    // The copied documents' keys (the snapshot's start and end markers have keys of their own).
    let keys: std::collections::HashSet<&str> = records
        .iter()
        .filter(|r| r.header("mongo.operation_type") == Some("snapshot"))
        .filter_map(|r| r.key.as_deref())
        .collect();
    row.check(keys.len() == DOCS as usize, || {
        format!(
            "{} distinct keys in the topic, {DOCS} documents",
            keys.len()
        )
    });
    row.writes = Some(DOCS as usize);
    row.delivered = Some(keys.len());
    row.missing = Some((DOCS as usize).saturating_sub(keys.len()));
    row.duplicates = Some(records.len().saturating_sub(keys.len()));
    drop(b);
    row.runs = format!("revoked after {progress} of {DOCS} copied");
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}
