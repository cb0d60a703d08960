//! `stallcoord` (exactly once, Apache Kafka only): in a three-node cluster, the node that
//! coordinates the pipeline's transactions (the leader of its `__transaction_state`
//! partition) killed under load, and restarted 15 s later. The coordinator moves to another
//! node once the controller fences the dead one (`broker.session.timeout.ms`); the pipeline
//! commits again without a process restart, and a fresh `read_committed` read has every event
//! once.

use std::time::{Duration, Instant};

use crate::cluster::leader_of;
use crate::common::kafka::Isolation;
use crate::common::load::{Truth, start_load};
use crate::common::records::read;
use crate::exactly_once::checks::{check_exactly_once, wait_committed};
use crate::exactly_once::freeze::print_evidence;
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

/// `transaction.state.log.num.partitions` of `scripts/services` clusters.
const STATE_PARTITIONS: i32 = 10;

/// The `__transaction_state` partition of `transactional_id`: Kafka's
/// `Utils.abs(id.hashCode()) % partitions`, with Java's `String.hashCode` over UTF-16 units.
fn state_partition(transactional_id: &str) -> i32 {
    let hash = transactional_id
        .encode_utf16()
        .fold(0_i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)));
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % STATE_PARTITIONS
}

pub async fn coordinator_killed(ctx: &Ctx) -> Vec<Row> {
    let mut row = Row::new("exactly once: transaction coordinator's node killed (3 brokers)");
    let stage = Stage::up_on(
        ctx,
        "stallcoord",
        &["--brokers", "3"],
        "stallcoord",
        20,
        |cfg| {
            cfg.pipeline_extra = "delivery = \"exactly_once\"\n".to_owned();
        },
    )
    .await;
    let (inst, cfg, client, coll) = stage.parts();
    if inst.nodes != 3 {
        row.check(false, || format!("{} Kafka node(s), not 3", inst.nodes));
        return vec![row];
    }
    let (mut proc, _) = stage.start("stallcoord.log").await;
    let load = start_load(coll.clone(), 150, 20, 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    // WHEN the node coordinating the pipeline's transactions is killed
    let uid = cfg
        .offsets(client)
        .await
        .and_then(|d| d.get_str("streamUid").ok().map(str::to_owned))
        .expect("a taken pipeline has a streamUid");
    let id = format!("mongo-kafka-bridge.{}.p.{uid}", cfg.offsets_db());
    let partition = state_partition(&id);
    let node =
        tokio::task::block_in_place(|| leader_of(&inst.kafka, "__transaction_state", partition));
    let before = cfg.commit_sequence(client).await;
    let killed = Instant::now();
    inst.services(&["kill", &format!("kafka{node}")]);
    say!(
        "stallcoord: killed node {node}, the coordinator of {id} (__transaction_state[{partition}])"
    );
    // THEN the pipeline commits again on its own (another node coordinates)
    while cfg.commit_sequence(client).await <= before && killed.elapsed() < Duration::from_secs(120)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let recovered = killed.elapsed().as_secs_f64();
    row.check(cfg.commit_sequence(client).await > before, || {
        "no commit within 120 s of the coordinator's kill".to_owned()
    });
    tokio::time::sleep(Duration::from_secs(15).saturating_sub(killed.elapsed())).await;
    inst.services(&["restart", &format!("kafka{node}"), "--timeout", "90"]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (acked, _) = load.stop().await;
    let truth = Truth::read(coll).await;
    wait_committed(&inst.kafka, &cfg.topic(), &truth, Duration::from_secs(180)).await;
    row.check(proc.running(), || {
        format!("the bridge exited: {}", proc.log_tail(10))
    });
    let restarts = proc.restarts();
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    let committed = read(&inst.kafka, &cfg.topic(), Isolation::Committed).await;
    let v = check_exactly_once(&mut row, &truth, &committed);
    if v.duplicates > 0 {
        let uncommitted = read(&inst.kafka, &cfg.topic(), Isolation::Uncommitted).await;
        print_evidence(&inst.kafka, &cfg.offsets_db(), &uncommitted, &committed).await;
        // The brokers' logs and data as evidence (the instance is wiped when it is dropped).
        let src = std::path::PathBuf::from(std::env::var("MKB_SERVICES_DIR").unwrap_or_default())
            .join(&inst.name);
        let _ = std::process::Command::new("cp")
            .arg("-r")
            .arg(&src)
            .arg(ctx.dir.join("servers"))
            .status();
    }
    say!(
        "stallcoord: committing again {recovered:.1} s after the kill, {restarts} pipeline \
         restart(s); {acked} writes: {} delivered, {} missing, {} duplicates",
        v.unique,
        v.missing,
        v.duplicates
    );
    let mut row = row.with_verdict(&v);
    row.finish(
        format!("node {node} killed"),
        Some(recovered),
        stage.started,
    );
    vec![row]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partition_follows_javas_string_hash() {
        // "a".hashCode() = 97, "ab".hashCode() = 3105, "polygenelubricants".hashCode() =
        // Integer.MIN_VALUE (Utils.abs makes it 0).
        assert_eq!(state_partition("a"), 7);
        assert_eq!(state_partition("ab"), 5);
        assert_eq!(state_partition("polygenelubricants"), 0);
    }
}
