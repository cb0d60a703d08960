//! `groupstop`: a member paused (SIGSTOP) past the session timeout loses its pipelines; after
//! SIGCONT it enqueues nothing more for them, then rejoins; a pipeline a SIGHUP adds gets a
//! slot, the member adds the control topic's partition for it (CreatePartitions), and one member
//! runs it.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bson::Document;

use crate::common::bridge::signal;
use crate::common::kafka::{create_topic_at, partitions_of};
use crate::common::load::{Truth, start_load};
use crate::common::observe::metric_sum;
use crate::common::records::Consumer;
use crate::group::{Member, RATE, World, owned_by, ready_says, settled};
use crate::say;
use crate::suite::{Ctx, Row};

pub async fn paused_member(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let world = World::up(ctx, "groupstop", "groupstop", 4).await;
    let path = world.write("groupstop.toml");
    let mut row = Row::new("group: a member paused past its session");
    let mut members: Vec<Member> = (0..2)
        .map(|n| world.member(&path, &format!("groupstop-{n}.log")))
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    let pipelines = world.cfg.pipelines;
    let Some(owners) = settled(&refs, pipelines, Duration::from_secs(90)).await else {
        row.check(false, || "the pipelines never had one owner each".into());
        return vec![row];
    };
    let loads = world.start_loads();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lost: Vec<usize> = (0..pipelines).filter(|p| owners[*p] == 0).collect();
    let took_over = pause_past_session(&members, pipelines, &lost, &mut row).await;
    add_by_sighup(&world, &path, &members, &mut row).await;
    for load in loads {
        load.stop().await;
    }
    let (mut writes, mut unique, mut dups) = (0, 0, 0);
    for (i, coll) in world.colls.iter().enumerate() {
        let truth = Truth::read(coll).await;
        let (v, _) = world.consumers[i]
            .wait_complete(&truth, Duration::from_secs(120))
            .await;
        row.check(
            v.missing == 0 && v.order_violations.is_empty() && v.unexpected == 0,
            || {
                format!(
                    "p{i}: {} missing (first {:?}), order {:?}",
                    v.missing, v.first_missing, v.order_violations
                )
            },
        );
        writes += v.writes;
        unique += v.unique;
        dups += v.duplicates;
    }
    for m in &mut members {
        let status = m.proc.stop(Duration::from_secs(30));
        row.check(status.success(), || format!("graceful stop: {status}"));
    }
    row.writes = Some(writes);
    row.delivered = Some(unique);
    row.missing = Some(writes - unique.min(writes));
    row.duplicates = Some(dups);
    row.finish("SIGSTOP 16 s".to_owned(), took_over, started);
    vec![row]
}

/// Member 0 of `members` paused for twice the session timeout (8 s by default): member 1 runs
/// every pipeline; once woken, member 0 enqueues nothing more for the pipelines it `lost`, then
/// rejoins. When member 1 ran them all (s after the pause).
async fn pause_past_session(
    members: &[Member],
    pipelines: usize,
    lost: &[usize],
    row: &mut Row,
) -> Option<f64> {
    // WHEN member 0 is paused for twice the session timeout (8 s by default)
    signal(members[0].proc.pid(), "STOP");
    let paused = Instant::now();
    let took_over = loop {
        if owned_by(&members[1], pipelines).len() == pipelines {
            break Some(paused.elapsed().as_secs_f64());
        }
        if paused.elapsed() > Duration::from_secs(60) {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    while paused.elapsed() < Duration::from_secs(16) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    signal(members[0].proc.pid(), "CONT");
    say!(
        "group: member 0 paused {:.1} s; member 1 ran all pipelines after {took_over:?} s",
        paused.elapsed().as_secs_f64()
    );
    row.check(took_over.is_some(), || {
        "member 1 never ran the paused member's pipelines".into()
    });
    // THEN it enqueues nothing more for the pipelines it lost (its stale lease fences it),
    // until the group assigns one to it again: a take with a new epoch, which Apache Kafka's
    // rejoin can bring within seconds (sampled every 100 ms for 5 s)
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (stale, retaken) = stale_enqueues(&members[0], lost, Duration::from_secs(5)).await;
    say!(
        "group: after SIGCONT the paused member enqueued {stale} records for {lost:?} while \
         not owning them; retaken by it within 5 s: {retaken:?}"
    );
    row.check(stale == 0.0, || {
        format!("the woken member enqueued {stale} more records for its lost pipelines")
    });
    // AND it rejoins: one owner per pipeline across both again, both ready
    let refs: Vec<&Member> = members.iter().collect();
    let rejoined = settled(&refs, pipelines, Duration::from_secs(60)).await;
    // (503 until the group assigns it again: its session was lost)
    let ready = ready_says(&members[0], 200, "member").await.map(|_| 200);
    row.check(rejoined.is_some() && ready == Some(200), || {
        format!("not rejoined: owners {rejoined:?}, /readyz {ready:?}")
    });
    took_over
}

/// A pipeline added to the configuration at `path` and SIGHUP to every member: it gets a slot,
/// the control topic a partition (the member adds it: CreatePartitions), one member runs it,
/// and its events arrive.
async fn add_by_sighup(world: &World, path: &Path, members: &[Member], row: &mut Row) {
    let (inst, cfg, client) = (&world.inst, &world.cfg, &world.client);
    // (the control topic is the member's: it adds the partition the SIGHUP below needs)
    let control = world.control_topic().await;
    // WHEN a 5th pipeline is added to the file and both members get SIGHUP
    let grown = cfg.with_pipelines(cfg.pipelines + 1);
    create_topic_at(&inst.kafka, &grown.topic(cfg.pipelines), 1, &[]).await;
    std::fs::write(path, grown.toml()).expect("write config");
    let reloaded = Instant::now();
    for m in members {
        signal(m.proc.pid(), "HUP");
    }
    // THEN it gets a slot, the control topic a partition, and one member runs it
    let refs: Vec<&Member> = members.iter().collect();
    let added = settled(&refs, grown.pipelines, Duration::from_secs(90)).await;
    say!(
        "group: after SIGHUP the added pipeline runs on member {:?} after {:.1} s",
        added.as_ref().map(|o| o[cfg.pipelines]),
        reloaded.elapsed().as_secs_f64()
    );
    row.check(added.is_some(), || {
        "the pipeline added by SIGHUP never ran".into()
    });
    let partitions = partitions_of(&inst.kafka, &control);
    say!("group: the control topic has {partitions} partitions after the SIGHUP");
    row.check(partitions > cfg.pipelines, || {
        format!(
            "the control topic has {partitions} partitions for {} slots: no CreatePartitions",
            grown.pipelines
        )
    });
    let extra = client
        .database(&cfg.db)
        .collection::<Document>(&format!("t{}", cfg.pipelines));
    let extra_consumer = Consumer::start(&inst.kafka, &grown.topic(cfg.pipelines), 1);
    let extra_load = start_load(extra.clone(), RATE, 0, 9_000_000);
    tokio::time::sleep(Duration::from_secs(2)).await;
    extra_load.stop().await;
    let truth = Truth::read(&extra).await;
    let (v, _) = extra_consumer
        .wait_complete(&truth, Duration::from_secs(60))
        .await;
    row.check(v.missing == 0 && v.writes > 0, || {
        format!(
            "added pipeline: {} of {} events missing",
            v.missing, v.writes
        )
    });
}

/// Samples `member`'s enqueued records and ownership of `pipelines` every 100 ms for `span`:
/// the records enqueued for a pipeline between two samples that both found it not owned (a
/// stale owner publishing), and the pipelines it owned again at some sample.
async fn stale_enqueues(member: &Member, pipelines: &[usize], span: Duration) -> (f64, Vec<usize>) {
    let mut last: BTreeMap<usize, (f64, bool)> = BTreeMap::new();
    let mut stale = 0.0;
    let mut retaken = Vec::new();
    let until = Instant::now() + span;
    while Instant::now() < until {
        let text = member.metrics();
        for &p in pipelines {
            let label = format!("pipeline=\"p{p}\"");
            let owned = metric_sum(&text, "mongo_kafka_bridge_pipeline_owned", &[&label]) == 1.0;
            let count = metric_sum(
                &text,
                "mongo_kafka_bridge_kafka_messages_enqueued_total",
                &[&label],
            );
            if let Some(&(before, was_owned)) = last.get(&p)
                && !owned
                && !was_owned
                && count > before
            {
                stale += count - before;
            }
            if owned && !retaken.contains(&p) {
                retaken.push(p);
            }
            last.insert(p, (count, owned));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (stale, retaken)
}
