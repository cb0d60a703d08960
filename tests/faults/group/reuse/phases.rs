//! The two halves of `groupreuse` ([`super`]): the pipelines changed on both members at once,
//! then on one member before the other.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::{
    delete, delivered_all, first_checkpoint, load, log_marks, logged_since, owners, reload,
    reporter, slot_of,
};
use crate::common::load::Load;
use crate::common::observe::fetch;
use crate::group::{Member, World, epochs, owned_by, ready_says};
use crate::say;
use crate::suite::Row;

/// Waits (60 s) until `member`'s `/readyz` no longer contains `text`; the last body if it
/// still does.
async fn readyz_lacks(member: &Member, text: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = fetch(&member.addr, "/readyz").map(|(_, b)| b);
        match body {
            Some(b) if !b.contains(text) => return Ok(()),
            Some(b) if Instant::now() > deadline => return Err(b.replace('\n', " | ")),
            None if Instant::now() > deadline => return Err("no answer".into()),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Together: p1 removed from both members, deleted, p3 added to both. The index of the member
/// that runs p3 (in slot 1) and p1's epoch after its reset.
pub(super) async fn together(
    world: &World,
    paths: &[PathBuf; 2],
    members: [&Member; 2],
    loads: &mut Vec<(usize, Load)>,
    row: &mut Row,
) -> Option<(usize, i64)> {
    let before = epochs(&world.cfg, &world.client, 0).await;
    // WHEN p1 is removed from both members (SIGHUP)
    for (p, m) in paths.iter().zip(members) {
        reload(world, p, m, &[0, 2]);
    }
    // THEN p1 stops, and the member assigned slot 1 names it
    let holder = reporter(&members, "assigned pipeline \"p1\"").await;
    row.check(holder.is_some(), || {
        "no member reported slot 1 of the removed p1".into()
    });
    let stopped = owners(&members, &[0, 2]).await;
    row.check(stopped.is_some(), || "p1 did not stop everywhere".into());
    // WHEN an operator deletes p1 (`offsets reset p1 --delete` frees its slot)
    let p1_epoch = delete(world, &paths[0], "p1", row).await;
    // THEN the member assigned slot 1 stops naming p1, without a rebalance
    if let Some(h) = holder {
        let cleared = readyz_lacks(members[h], "\"p1\"").await;
        row.check(cleared.is_ok(), || {
            format!("after the reset a member still names p1 in /readyz: {cleared:?}")
        });
    }
    let marks = log_marks(&members);
    // WHEN p3 is added to both members (SIGHUP)
    for (p, m) in paths.iter().zip(members) {
        reload(world, p, m, &[0, 2, 3]);
    }
    // THEN p3 gets slot 1 and runs on exactly one member; p0 and p2 were never restarted; p1
    // never ran again and no member names it
    let owned = owners(&members, &[0, 2, 3]).await;
    row.check(owned.is_some(), || {
        "p3 never ran on exactly one member".into()
    });
    let slot = slot_of(world, "p3").await;
    row.check(slot == Some(1), || format!("p3 has slot {slot:?}, not 1"));
    let checkpointed = first_checkpoint(world, "p3").await;
    row.check(checkpointed, || "p3 never stored its first position".into());
    loads.push((3, load(world, 3)));
    let after = epochs(&world.cfg, &world.client, 0).await;
    for name in ["p0", "p2"] {
        row.check(before.get(name) == after.get(name), || {
            format!(
                "{name} restarted: epoch {:?} -> {:?}",
                before.get(name),
                after.get(name)
            )
        });
    }
    row.check(after.get("p1") == Some(&p1_epoch), || {
        format!("p1 ran again: epoch {p1_epoch} -> {:?}", after.get("p1"))
    });
    let named = logged_since(&members, &marks, "assigned pipeline \"p1\"");
    row.check(!named, || {
        "a member named p1 after its slot was retired".into()
    });
    say!("groupreuse: together: p3 in slot {slot:?}, owners of p0, p2, p3 {owned:?}");
    Some((owned?[2], p1_epoch))
}

/// Staggered: p3 removed from its owner H (`members[0]`, configuration `paths[0]`) only,
/// deleted, p4 added to H only; H leaves and the other member is assigned slot 1. p3's epoch
/// after its reset.
pub(super) async fn staggered(
    world: &World,
    paths: &[PathBuf; 2],
    members: &mut [Member; 2],
    loads: &mut Vec<(usize, Load)>,
    row: &mut Row,
) -> i64 {
    // (p3 takes writes for a few seconds first)
    tokio::time::sleep(Duration::from_secs(3)).await;
    if let Some(at) = loads.iter().position(|(i, _)| *i == 3) {
        loads.remove(at).1.stop().await;
    }
    delivered_all(world, 3, row).await;
    // WHEN p3 is removed from H only (the other member's configuration still names it)
    reload(world, &paths[0], &members[0], &[0, 2]);
    let named = ready_says(&members[0], 503, "assigned pipeline \"p3\"").await;
    row.check(named.is_some(), || "H never named the removed p3".into());
    // and deleted, and p4 is added to H only
    let p3_epoch = delete(world, &paths[0], "p3", row).await;
    reload(world, &paths[0], &members[0], &[0, 2, 4]);
    // THEN p4 gets slot 1 and runs on H
    let owned = owners(&[&members[0], &members[1]], &[0, 2, 4]).await;
    let on_h = owned.as_ref().is_some_and(|o| o[2] == 0);
    row.check(on_h, || format!("p4 does not run on H: owners {owned:?}"));
    let slot = slot_of(world, "p4").await;
    row.check(slot == Some(1), || format!("p4 has slot {slot:?}, not 1"));
    let checkpointed = first_checkpoint(world, "p4").await;
    row.check(checkpointed, || "p4 never stored its first position".into());
    loads.push((4, load(world, 4)));
    let marks = log_marks(&[&members[1]]);
    // WHEN H leaves, so the other member is assigned slot 1
    let status = members[0].proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("H's graceful stop: {status}"));
    // THEN it does not run p3 there (which its configuration still names) and names p4
    let o = &members[1];
    let named = ready_says(o, 503, "assigned pipeline \"p4\"").await;
    let body = fetch(&o.addr, "/readyz").map(|(_, b)| b.replace('\n', " | "));
    row.check(named.is_some(), || {
        format!("the other member never named p4 in slot 1: {body:?}")
    });
    let runs = owned_by(o, super::ALL);
    row.check(!runs.contains(&3), || {
        format!("p3, deleted, runs again: {runs:?}")
    });
    let stale = logged_since(&[o], &marks, "assigned pipeline \"p3\"");
    row.check(!stale, || "the other member named p3 for slot 1".into());
    say!(
        "groupreuse: staggered: the other member says {:?}",
        named.map(|b| b.replace('\n', " | "))
    );
    // WHEN it reloads with p4 and H starts again with it
    reload(world, &paths[1], o, &[0, 2, 4]);
    members[0] = world.member(&paths[0], "groupreuse-h2.log");
    // THEN p0, p2 and p4 run once each, p1 and p3 nowhere
    let owned = owners(&[&members[0], &members[1]], &[0, 2, 4]).await;
    row.check(owned.is_some(), || "p0, p2, p4 never ran once each".into());
    p3_epoch
}
