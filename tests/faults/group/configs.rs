//! `groupcfg`: members whose configurations disagree: a changed filter is refused without an
//! epoch bump, a slot the configuration does not know makes the member not ready naming the
//! pipeline, and a forced reset of a pipeline the group still assigns is taken again.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bson::Document;

use crate::common::bridge::bridge_cli;
use crate::group::{Member, World, owned_by, owned_eventually, ready_says, settled};
use crate::say;
use crate::suite::{Ctx, Row};

pub async fn disagreeing_configs(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    // (3 topics: a member of a newer configuration adds p2)
    let world = World::servers(ctx, "groupcfg", "groupcfg", 2, 3).await;
    let World { cfg, client, .. } = &world;
    let mut row = Row::new("group: members whose configurations disagree");
    // GIVEN member A (p0, p1) ran both and died (kill -9: its membership lingers until the
    // coordinator evicts it)
    let old = world.write("groupcfg-old.toml");
    let mut a = world.member(&old, "groupcfg-a.log");
    let ran = settled(&[&a], 2, Duration::from_secs(60)).await;
    row.check(ran.is_some(), || "member A never ran p0 and p1".into());
    a.proc.kill9();
    let before = cfg.offsets(client).await;
    // WHEN member B starts with p1's filter changed and a new p2
    let newer = cfg
        .toml()
        .replace(&cfg.entry(1, "json = \"relaxed\"\n"), "")
        + &cfg.entry(
            1,
            "pipeline = '[{\"$match\": {\"operationType\": \"insert\"}}]'\n",
        )
        + &cfg.entry(2, "");
    let new_path = ctx.dir.join("groupcfg-new.toml");
    std::fs::write(&new_path, newer).expect("write config");
    let b = world.member(&new_path, "groupcfg-b.log");
    // THEN B refuses p1 (not ready, p1's epoch unchanged) and runs p0 and p2
    let refused = ready_says(&b, 503, "pipeline p1: refused").await;
    row.check(refused.is_some(), || "B never reported p1 refused".into());
    let owned = owned_eventually(&b, 3, &[0, 2]).await;
    row.check(owned == vec![0, 2], || {
        format!("B runs {owned:?}, not [0, 2]")
    });
    let after = cfg.offsets(client).await;
    row.check(epoch(&after, "p1") == epoch(&before, "p1"), || {
        format!(
            "p1's epoch moved from {:?} to {:?} on a refusal",
            epoch(&before, "p1"),
            epoch(&after, "p1")
        )
    });
    drop(b);
    // WHEN B is gone and A (which does not know p2) is the only member
    let a2 = world.member(&old, "groupcfg-a2.log");
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
    forced_reset_retaken(&world, &old, &a2, &mut row).await;
    drop(a2);
    row.runs = "refused stream, unknown slot".to_owned();
    row.seconds = started.elapsed().as_secs_f64();
    vec![row]
}

/// The `epoch` of pipeline `name`'s offsets document in `docs`.
fn epoch(docs: &BTreeMap<String, Document>, name: &str) -> Option<i64> {
    docs.get(name).and_then(|d| d.get_i64("epoch").ok())
}

/// WHEN an operator forces a reset of p0 while `a2` runs it (configuration `old`), THEN `a2`,
/// to which the group still assigns it, takes it again after a session timeout.
async fn forced_reset_retaken(world: &World, old: &Path, a2: &Member, row: &mut Row) {
    let (cfg, client) = (&world.cfg, &world.client);
    // WHEN an operator forces a reset of p0 while A runs it (the lease is live)
    let (code, _, stderr) = bridge_cli(&["offsets", "reset", "p0", "--to-now", "--force"], old);
    row.check(code == Some(0), || {
        format!("offsets reset --force: {code:?} {stderr}")
    });
    let reset_epoch = epoch(&cfg.offsets(client).await, "p0").unwrap_or(0);
    // THEN A, to which the group still assigns it, takes it again after a session timeout
    let deadline = Instant::now() + Duration::from_secs(60);
    let retaken = loop {
        let now = epoch(&cfg.offsets(client).await, "p0").unwrap_or(0);
        if now > reset_epoch && owned_by(a2, 3).contains(&0) {
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
}
