//! `groupreuse` (issue 24): a slot reused after `offsets reset NAME --delete` while 2 members
//! run, under writes. Slots 0, 1, 2 are p0, p1, p2.
//!
//! - Together: p1 is removed from both members (SIGHUP), `offsets reset p1 --delete` frees
//!   slot 1 (the member assigned it becomes ready again without a rebalance), p3 is added to
//!   both (SIGHUP) and gets slot 1: p3 runs on exactly one member, p0 and p2 are never
//!   restarted (their epochs stay), p1 never runs again, and no member names p1 once slot 1
//!   is retired.
//! - Staggered: p3 is removed from its owner H only, `offsets reset p3 --delete`, p4 is added to
//!   H only and gets slot 1; H leaves, and the other member, whose configuration still names
//!   p3, is assigned slot 1: it must not run p3 there (a copy of the slots from before the
//!   reset said 1 → p3) and must name p4 in `/readyz`, until its reload runs p4.
//!
//! At the end p0, p2 and p4 (and p3, before its removal) delivered every write; p1 and p3 kept
//! the epoch of their reset and have no slot.

use std::path::Path;
use std::time::{Duration, Instant};

use bson::{Document, doc};

use crate::common::bridge::{bridge_cli, signal};
use crate::common::load::{Load, Truth, start_load};
use crate::common::verdict::verify;
use crate::group::{Member, RATE, World, epochs, owned_by};
use crate::say;
use crate::suite::{Ctx, Row};

mod phases;

/// Pipelines p0..p4 have topics and collections; members run a subset.
pub(super) const ALL: usize = 5;

/// A configuration with the pipelines `pipelines` of `world`.
fn config_of(world: &World, pipelines: &[usize]) -> String {
    let mut text = world.cfg.with_pipelines(0).toml();
    for i in pipelines {
        text.push_str(&world.cfg.entry(*i, "json = \"relaxed\"\n"));
    }
    text
}

/// Writes `pipelines` to `path` and sends SIGHUP to `member`.
pub(super) fn reload(world: &World, path: &Path, member: &Member, pipelines: &[usize]) {
    std::fs::write(path, config_of(world, pipelines)).expect("write config");
    signal(member.proc.pid(), "HUP");
}

/// Waits (90 s) until each of `want` runs on exactly one of `members` and the other pipelines
/// run nowhere; the owner's index per pipeline of `want`.
pub(super) async fn owners(members: &[&Member], want: &[usize]) -> Option<Vec<usize>> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let owned: Vec<Vec<usize>> = members.iter().map(|m| owned_by(m, ALL)).collect();
        let of = |p: usize| -> Vec<usize> {
            (0..members.len())
                .filter(|m| owned[*m].contains(&p))
                .collect()
        };
        let right = (0..ALL).all(|p| of(p).len() == usize::from(want.contains(&p)));
        if right {
            return Some(want.iter().map(|p| of(*p)[0]).collect());
        }
        if Instant::now() > deadline {
            say!("groupreuse: owners never settled on {want:?}: owned per member {owned:?}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits (90 s) until p0, p1 and p2 run once each and both `members` run one; the owners.
async fn spread(members: &[&Member; 2]) -> Option<Vec<usize>> {
    let deadline = Instant::now() + Duration::from_secs(90);
    while Instant::now() < deadline {
        let owned = owners(members, &[0, 1, 2]).await?;
        if owned.contains(&0) && owned.contains(&1) {
            return Some(owned);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

/// Pipeline `name`'s slot in `<offsets_collection>.slots`, if it has one.
pub(super) async fn slot_of(world: &World, name: &str) -> Option<i32> {
    let slots = world
        .client
        .database(&world.cfg.offsets_db())
        .collection::<Document>("offsets.slots");
    let found = slots.find_one(doc! { "_id.pipeline": name }).await;
    found.ok().flatten().and_then(|d| d.get_i32("slot").ok())
}

/// Waits (60 s) until pipeline `name`'s offsets document holds a resume token (its first
/// checkpoint: writes from then on are its to deliver); whether it did.
pub(super) async fn first_checkpoint(world: &World, name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let docs = world.cfg.offsets(&world.client).await;
        if docs
            .get(name)
            .is_some_and(|d| d.contains_key("resumeToken"))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Runs `offsets reset NAME --delete` with `config`; its epoch after the reset.
pub(super) async fn delete(world: &World, config: &Path, name: &str, row: &mut Row) -> i64 {
    let (code, stdout, stderr) = bridge_cli(&["offsets", "reset", name, "--delete"], config);
    row.check(
        code == Some(0) && stdout.contains("its group slot was freed"),
        || format!("offsets reset {name} --delete: {code:?} {stdout} {stderr}"),
    );
    let epoch = epochs(&world.cfg, &world.client, 0).await;
    epoch.get(name).copied().unwrap_or(0)
}

/// The load on pipeline `i`'s collection (inserts from `_id` `i`·1 000 000).
pub(super) fn load(world: &World, i: usize) -> Load {
    start_load(world.colls[i].clone(), RATE, 5, (i as i64) * 1_000_000)
}

/// Pipeline `i` delivered every write of its collection (duplicates allowed); the longest
/// delay write → produce (s).
pub(super) async fn delivered_all(world: &World, i: usize, row: &mut Row) -> f64 {
    let truth = Truth::read(&world.colls[i]).await;
    let consumer = &world.consumers[i];
    let (v, _) = consumer
        .wait_complete(&truth, Duration::from_secs(120))
        .await;
    let recs = consumer.snapshot();
    let v = if v.missing == 0 {
        verify(&truth, &recs)
    } else {
        v
    };
    row.check_sound_of(&format!("p{i}"), &v);
    say!(
        "groupreuse: p{i} delivered {} of {} events ({} duplicates)",
        v.unique,
        v.writes,
        v.duplicates
    );
    let delays: Vec<i64> = recs
        .iter()
        .filter_map(|r| Some(r.timestamp_ms? - r.written_ms?))
        .collect();
    let longest = delays.iter().max().copied().unwrap_or(0) as f64 / 1000.0;
    say!(
        "groupreuse: p{i}: longest delay write → produce {longest:.2} s over {} inserts",
        delays.len()
    );
    longest
}

/// Whether any member's log after `marks` (log lengths) names `text`.
pub(super) fn logged_since(members: &[&Member], marks: &[usize], text: &str) -> bool {
    let escaped = text.replace('"', "\\\"");
    members.iter().zip(marks).any(|(m, mark)| {
        let log = m.proc.log_text();
        let after = log.get(*mark..).unwrap_or("");
        after.contains(text) || after.contains(&escaped)
    })
}

/// The members' log lengths now.
pub(super) fn log_marks(members: &[&Member]) -> Vec<usize> {
    members.iter().map(|m| m.proc.log_text().len()).collect()
}

/// The index of the first of `members` whose `/readyz` names `text` (60 s).
pub(super) async fn reporter(members: &[&Member], text: &str) -> Option<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        for (i, m) in members.iter().enumerate() {
            let body = crate::common::observe::fetch(&m.addr, "/readyz");
            if body.is_some_and(|(_, b)| b.contains(text)) {
                return Some(i);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

pub async fn slot_reuse(ctx: &Ctx) -> Vec<Row> {
    let started = Instant::now();
    let world = World::up(ctx, "groupreuse", "groupreuse", ALL).await;
    let mut row = Row::new("group: slot reuse after offsets reset --delete");
    let paths = [
        ctx.dir.join("groupreuse-x.toml"),
        ctx.dir.join("groupreuse-y.toml"),
    ];
    for p in &paths {
        std::fs::write(p, config_of(&world, &[0, 1, 2])).expect("write config");
    }
    // GIVEN 2 members running p0, p1, p2 under writes
    let x = world.member(&paths[0], "groupreuse-x.log");
    let y = world.member(&paths[1], "groupreuse-y.log");
    let ran = spread(&[&x, &y]).await;
    row.check(ran.is_some(), || {
        "p0, p1, p2 never ran once each on 2 members".into()
    });
    let mut loads: Vec<(usize, Load)> = [0, 1, 2].iter().map(|i| (*i, load(&world, *i))).collect();
    let together = phases::together(&world, &paths, [&x, &y], &mut loads, &mut row).await;
    let Some((h, p1_epoch)) = together else {
        return vec![row];
    };
    let (mut members, o) = if h == 0 { ([x, y], 1) } else { ([y, x], 0) };
    // (members[0] is H, which runs p3 in slot 1; `o` the other's configuration)
    let paths = [paths[1 - o].clone(), paths[o].clone()];
    let p3_epoch = phases::staggered(&world, &paths, &mut members, &mut loads, &mut row).await;
    for (_, l) in loads {
        l.stop().await;
    }
    let mut delay: f64 = 0.0;
    for i in [0, 2] {
        delay = delay.max(delivered_all(&world, i, &mut row).await);
    }
    // (p4 waits, by design, while slot 1 is assigned to the member that does not define it)
    let waited = delivered_all(&world, 4, &mut row).await;
    say!("groupreuse: longest delay write → produce of p0, p2: {delay:.1} s; of p4: {waited:.1} s");
    row.check(delay < 40.0, || {
        format!("a pipeline stopped for {delay:.1} s (bound 40 s)")
    });
    let last = epochs(&world.cfg, &world.client, 0).await;
    for (name, epoch) in [("p1", p1_epoch), ("p3", p3_epoch)] {
        let slot = slot_of(&world, name).await;
        row.check(slot.is_none(), || format!("{name} has slot {slot:?} again"));
        row.check(last.get(name) == Some(&epoch), || {
            format!(
                "{name} ran after its reset: epoch {epoch} -> {:?}",
                last.get(name)
            )
        });
    }
    for m in &mut members {
        let status = m.proc.stop(Duration::from_secs(30));
        row.check(status.success(), || format!("graceful stop: {status}"));
    }
    row.finish("together and staggered", Some(delay), started);
    vec![row]
}
