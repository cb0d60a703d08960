//! Group scenarios beyond spread and failover (`group.rs` has their machinery), each on its
//! own Apache Kafka broker and MongoDB:
//! - a member paused (SIGSTOP) past the session timeout loses its pipelines; after SIGCONT it
//!   enqueues nothing more for them, then rejoins; a pipeline a SIGHUP adds gets a slot, the
//!   member adds the control topic's partition for it (CreatePartitions), and one member runs it;
//! - members whose configurations disagree: a changed filter is refused without an epoch bump,
//!   a slot the configuration does not know makes the member not ready naming the pipeline;
//! - a revocation in the middle of a snapshot: the next owner resumes after the committed
//!   progress and the topic holds every document;
//! - a pipeline added by SIGHUP whose slot has no partition yet: on Apache Kafka the member
//!   adds it (CreatePartitions) and runs the pipeline. A control topic that cannot grow (no
//!   `Alter` ACL) is the ACL scenario's (`security.rs`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bson::{Document, doc};

use crate::Ctx;
use crate::group::*;
use crate::harness::*;
use crate::say;

pub async fn paused_member(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let World {
        inst,
        cfg,
        client,
        colls,
        consumers,
    } = World::up(ctx, "groupstop", "groupstop", 4).await;
    // (the control topic is the member's: it adds the partition the SIGHUP below needs)
    let control = format!("__mongo_kafka_bridge.{}.group.faults", cfg.offsets_db());
    let path = ctx.dir.join("groupstop.toml");
    std::fs::write(&path, cfg.toml()).expect("write config");
    let mut row = Row::new("group: a member paused past its session");
    let mut members: Vec<Member> = (0..2)
        .map(|n| Member::start(&path, ctx.dir.join(format!("groupstop-{n}.log"))))
        .collect();
    let refs: Vec<&Member> = members.iter().collect();
    let Some(owners) = settled(&refs, cfg.pipelines, Duration::from_secs(90)).await else {
        row.check(false, || "the pipelines never had one owner each".into());
        return vec![row];
    };
    let loads: Vec<Load> = colls
        .iter()
        .enumerate()
        .map(|(i, c)| start_load(c.clone(), RATE, 5, (i as i64) * 1_000_000))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lost: Vec<usize> = (0..cfg.pipelines).filter(|p| owners[*p] == 0).collect();
    // WHEN member 0 is paused for twice the session timeout (8 s by default)
    signal(members[0].proc.pid(), "STOP");
    let paused = Instant::now();
    let took_over = loop {
        if owned_by(&members[1], cfg.pipelines).len() == cfg.pipelines {
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
    let (stale, retaken) = stale_enqueues(&members[0], &lost, Duration::from_secs(5)).await;
    say!(
        "group: after SIGCONT the paused member enqueued {stale} records for {lost:?} while \
         not owning them; retaken by it within 5 s: {retaken:?}"
    );
    row.check(stale == 0.0, || {
        format!("the woken member enqueued {stale} more records for its lost pipelines")
    });
    // AND it rejoins: one owner per pipeline across both again, both ready
    let refs: Vec<&Member> = members.iter().collect();
    let rejoined = settled(&refs, cfg.pipelines, Duration::from_secs(60)).await;
    // (503 until the group assigns it again: its session was lost)
    let ready = ready_says(&members[0], 200, "member").await.map(|_| 200);
    row.check(rejoined.is_some() && ready == Some(200), || {
        format!("not rejoined: owners {rejoined:?}, /readyz {ready:?}")
    });
    // WHEN a 5th pipeline is added to the file and both members get SIGHUP
    let grown = GroupCfg {
        uri: cfg.uri.clone(),
        kafka: cfg.kafka.clone(),
        db: cfg.db.clone(),
        pipelines: cfg.pipelines + 1,
    };
    create_topic(&inst.kafka, &grown.topic(cfg.pipelines), 1).await;
    std::fs::write(&path, grown.toml()).expect("write config");
    let reloaded = Instant::now();
    for m in &members {
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
    for load in loads {
        load.stop().await;
    }
    let (mut writes, mut unique, mut dups) = (0, 0, 0);
    for (i, coll) in colls.iter().enumerate() {
        let truth = Truth::read(coll).await;
        let (v, _) = consumers[i]
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
    row.runs = "SIGSTOP 16 s".to_owned();
    row.recovery_s = took_over;
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
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
            let owned = sample_sum(&text, "mongo_kafka_bridge_pipeline_owned", &label) == 1.0;
            let count = sample_sum(
                &text,
                "mongo_kafka_bridge_kafka_messages_enqueued_total",
                &label,
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

pub async fn disagreeing_configs(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let inst = Instance::up_with(&ctx.script, &ctx.instance("groupcfg"), &[]);
    let cfg = GroupCfg {
        uri: inst.mongo_uri.clone(),
        kafka: inst.kafka.clone(),
        db: "groupcfg".to_owned(),
        pipelines: 2,
    };
    let client = inst.client().await;
    for i in 0..3 {
        create_topic(&inst.kafka, &cfg.topic(i), 1).await;
    }
    let mut row = Row::new("group: members whose configurations disagree");
    // GIVEN member A (p0, p1) ran both and died (kill -9: its membership lingers until the
    // coordinator evicts it)
    let old = ctx.dir.join("groupcfg-old.toml");
    std::fs::write(&old, cfg.toml()).expect("write config");
    let mut a = Member::start(&old, ctx.dir.join("groupcfg-a.log"));
    let ran = settled(&[&a], 2, Duration::from_secs(60)).await;
    row.check(ran.is_some(), || "member A never ran p0 and p1".into());
    a.proc.kill9();
    let epoch = |docs: &BTreeMap<String, Document>, name: &str| {
        docs.get(name).and_then(|d| d.get_i64("epoch").ok())
    };
    let before = cfg.offsets(&client).await;
    // WHEN member B starts with p1's filter changed and a new p2
    let newer = cfg
        .toml()
        .replace(&entry(&cfg, 1, "json = \"relaxed\"\n"), "")
        + &entry(
            &cfg,
            1,
            "pipeline = '[{\"$match\": {\"operationType\": \"insert\"}}]'\n",
        )
        + &entry(&cfg, 2, "");
    let new_path = ctx.dir.join("groupcfg-new.toml");
    std::fs::write(&new_path, newer).expect("write config");
    let b = Member::start(&new_path, ctx.dir.join("groupcfg-b.log"));
    // THEN B refuses p1 (not ready, p1's epoch unchanged) and runs p0 and p2
    let refused = ready_says(&b, 503, "pipeline p1: refused").await;
    row.check(refused.is_some(), || "B never reported p1 refused".into());
    let owned = owned_eventually(&b, 3, &[0, 2]).await;
    row.check(owned == vec![0, 2], || {
        format!("B runs {owned:?}, not [0, 2]")
    });
    let after = cfg.offsets(&client).await;
    row.check(epoch(&after, "p1") == epoch(&before, "p1"), || {
        format!(
            "p1's epoch moved from {:?} to {:?} on a refusal",
            epoch(&before, "p1"),
            epoch(&after, "p1")
        )
    });
    drop(b);
    // WHEN B is gone and A (which does not know p2) is the only member
    let a2 = Member::start(&old, ctx.dir.join("groupcfg-a2.log"));
    // THEN A runs p0 and p1 and is not ready, naming p2
    let unknown = ready_says(&a2, 503, "assigned pipeline \"p2\"").await;
    row.check(unknown.is_some(), || {
        "A never reported the unknown slot of p2".into()
    });
    let owned = owned_eventually(&a2, 3, &[0, 1]).await;
    row.check(owned == vec![0, 1], || {
        format!("A runs {owned:?}, not [0, 1]")
    });
    say!(
        "group: disagreeing configurations: B {:?}; A {:?}",
        refused.map(|b| b.replace('\n', " | ")),
        unknown.map(|b| b.replace('\n', " | "))
    );
    // WHEN an operator forces a reset of p0 while A runs it (the lease is live)
    let (code, _, stderr) =
        crate::support::bridge_cli(&["offsets", "reset", "p0", "--to-now", "--force"], &old);
    row.check(code == Some(0), || {
        format!("offsets reset --force: {code:?} {stderr}")
    });
    let reset_epoch = epoch(&cfg.offsets(&client).await, "p0").unwrap_or(0);
    // THEN A, to which the group still assigns it, takes it again after a session timeout
    let deadline = Instant::now() + Duration::from_secs(60);
    let retaken = loop {
        let now = epoch(&cfg.offsets(&client).await, "p0").unwrap_or(0);
        if now > reset_epoch && owned_by(&a2, 3).contains(&0) {
            break Some(now);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    say!(
        "group: after a forced reset (epoch {reset_epoch}) the assigned member took p0 again: {retaken:?}"
    );
    row.check(retaken.is_some(), || {
        "p0 was never taken again after a forced reset".into()
    });
    drop(a2);
    row.runs = "refused stream, unknown slot".to_owned();
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}

/// `copied_in_this_run` of the "namespace copied" line in `log`, if it has one.
fn copied_in_this_run(log: &str) -> Option<u64> {
    log.lines()
        .filter(|l| l.contains("\"namespace copied\""))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|v| v["copied_in_this_run"].as_u64())
}

pub async fn revoked_mid_snapshot(ctx: &Ctx) -> Vec<Row> {
    const DOCS: i64 = 8_000;
    let started = Instant::now();
    let inst = Instance::up_with(&ctx.script, &ctx.instance("groupsnap"), &[]);
    let cfg = GroupCfg {
        uri: inst.mongo_uri.clone(),
        kafka: inst.kafka.clone(),
        db: "groupsnap".to_owned(),
        pipelines: 1,
    };
    let client = inst.client().await;
    create_topic(&inst.kafka, &cfg.topic(0), 1).await;
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
        &entry(&cfg, 0, "json = \"relaxed\"\n"),
        &entry(&cfg, 0, snapshot),
    );
    let path = ctx.dir.join("groupsnap.toml");
    std::fs::write(&path, text).expect("write config");
    let mut row = Row::new("group: revoked in the middle of a snapshot");
    // GIVEN member A copying the collection
    let mut a = Member::start(&path, ctx.dir.join("groupsnap-a.log"));
    let offsets = client
        .database(&cfg.offsets_db())
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
    row.check(progress > 0 && progress < DOCS, || {
        format!("A's committed copy progress was {progress}")
    });
    // WHEN B joins and A leaves (SIGTERM: its slot is revoked, it drains and commits)
    let b = Member::start(&path, ctx.dir.join("groupsnap-b.log"));
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
    let records = crate::support::collect_from(
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

pub async fn no_partition_for_a_new_slot(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let inst = Instance::up_with(&ctx.script, &ctx.instance("groupfull"), &[]);
    let cfg = GroupCfg {
        uri: inst.mongo_uri.clone(),
        kafka: inst.kafka.clone(),
        db: "groupfull".to_owned(),
        pipelines: 2,
    };
    for i in 0..3 {
        create_topic(&inst.kafka, &cfg.topic(i), 1).await;
    }
    let mut row = Row::new("group: a new slot gets its partition (CreatePartitions)");
    // GIVEN a member running p0 and p1, whose control topic it created
    let path = ctx.dir.join("groupfull.toml");
    std::fs::write(&path, cfg.toml()).expect("write config");
    let m = Member::start(&path, ctx.dir.join("groupfull-0.log"));
    row.check(
        settled(&[&m], 2, Duration::from_secs(60)).await.is_some(),
        || "the member never ran p0 and p1".into(),
    );
    let control = format!("__mongo_kafka_bridge.{}.group.faults", cfg.offsets_db());
    let before = partitions_of(&inst.kafka, &control);
    // WHEN a SIGHUP adds p2, whose slot 2 may have no partition yet
    let grown = GroupCfg {
        pipelines: 3,
        uri: cfg.uri.clone(),
        kafka: cfg.kafka.clone(),
        db: cfg.db.clone(),
    };
    std::fs::write(&path, grown.toml()).expect("write config");
    let reloaded = Instant::now();
    signal(m.proc.pid(), "HUP");
    // THEN the member adds the partition and runs p2 beside p0 and p1, and nothing is reported
    // unassignable
    let owned = owned_eventually(&m, 3, &[0, 1, 2]).await;
    let took = reloaded.elapsed().as_secs_f64();
    let after = partitions_of(&inst.kafka, &control);
    say!(
        "group: SIGHUP added p2: control topic {before} -> {after} partitions, p2 ran after {took:.1} s"
    );
    row.check(owned == vec![0, 1, 2], || {
        format!("the member runs {owned:?}, not [0, 1, 2]")
    });
    row.check(after >= 3, || {
        format!("the control topic has {after} partitions for 3 slots")
    });
    let gauge = sample_sum(
        &m.metrics(),
        "mongo_kafka_bridge_group_unassignable_pipelines",
        "",
    );
    row.check(gauge == 0.0, || {
        format!("unassignable pipelines gauge {gauge}, not 0")
    });
    drop(m);
    row.runs = format!("SIGHUP adds a pipeline: {before} -> {after} partitions");
    row.recovery_s = Some(took);
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}
