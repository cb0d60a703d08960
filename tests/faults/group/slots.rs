//! `groupfull`: a pipeline added by SIGHUP whose slot has no partition yet: on Apache Kafka the
//! member adds it (CreatePartitions) and runs the pipeline. A control topic that cannot grow
//! (no `Alter` ACL) is the ACL scenario's (`security.rs`).

use std::time::{Duration, Instant};

use crate::common::bridge::signal;
use crate::common::kafka::partitions_of;
use crate::common::observe::metric_sum;
use crate::group::{World, owned_eventually, settled};
use crate::say;
use crate::suite::{Ctx, Row};

pub async fn no_partition_for_a_new_slot(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let world = World::servers(ctx, "groupfull", "groupfull", 2, 3).await;
    let World { inst, cfg, .. } = &world;
    let mut row = Row::new("group: a new slot gets its partition (CreatePartitions)");
    // GIVEN a member running p0 and p1, whose control topic it created
    let path = world.write("groupfull.toml");
    let m = world.member(&path, "groupfull-0.log");
    row.check(
        settled(&[&m], 2, Duration::from_secs(60)).await.is_some(),
        || "the member never ran p0 and p1".into(),
    );
    let control = world.control_topic().await;
    let before = partitions_of(&inst.kafka, &control);
    // WHEN a SIGHUP adds p2, whose slot 2 may have no partition yet
    let grown = cfg.with_pipelines(3);
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
    let gauge = metric_sum(
        &m.metrics(),
        "mongo_kafka_bridge_group_unassignable_pipelines",
        &[],
    );
    row.check(gauge == 0.0, || {
        format!("unassignable pipelines gauge {gauge}, not 0")
    });
    drop(m);
    row.finish(
        format!("SIGHUP adds a pipeline: {before} -> {after} partitions"),
        Some(took),
        started,
    );
    vec![row]
}
