//! `delivery = "exactly_once"` under faults, on Apache Kafka (or noida-db with
//! `MKB_BROKER=noida`):
//!
//! - `eos`: kill -9 under a steady write load, the next instance started at once (50 kills,
//!   the long form 5 blocks of 50 on fresh servers): a `read_committed` read has every event
//!   exactly once, a `read_uncommitted` read has more (aborted records).
//! - `eostxn`: MongoDB transactions of 300 inserts with `max_transaction_events = 10`, the
//!   bridge killed as soon as the first record of one reached the topic: a `read_committed`
//!   reader polling throughout sees, per partition, none or all of its share of the 300, once.
//! - `eosfreeze`: the broker frozen (SIGSTOP) under load, once for less and once for more than
//!   `transaction.timeout.ms`: exactly once, and the process keeps running.
//! - `eosfence`: a second instance takes the pipeline over: the first stands by fenced, its
//!   open transaction aborted and invisible.
//! - `eosreset`: `offsets reset --to-now` and `--delete` while stopped are honoured on the next
//!   start, although the progress topic holds an older position.
//! - `eosahead`: an offsets document ahead of Kafka's newest committed progress record (a
//!   commit that never became visible) is never trusted: the next start resumes from the
//!   record, exactly once, and says so.
//! - `eostimeout` (Apache Kafka only): the bridge paused past `transaction.timeout.ms`, so the
//!   coordinator aborts its transaction: it recovers on its own, exactly once.
//!
//! Also here, an ordinary test of the binary ([`gap`]): a stop between Kafka's commit and the
//! offsets write repeats nothing.
//!
//! Every scenario starts from the same [`Stage`](crate::stage::Stage) with
//! `delivery = "exactly_once"`. On Apache Kafka, a long-lived `read_committed` consumer (its
//! follower, [`Consumer::read_committed`](crate::common::records::Consumer::read_committed))
//! also reads each topic from before the bridge starts to the end, as a downstream team's
//! consumer would, and must see exactly what a fresh read sees ([`checks`]). On noida-db it is
//! left out (below). The progress topic and the logs are the evidence of a repeat
//! ([`evidence`]).
//!
//! Every check of what `read_committed` consumers see is a fresh consumer reading every
//! partition from offset 0 to its end ([`read_all`](crate::common::records::read_all)): on
//! noida-db 0.2.3 a consumer that has
//! read past an aborted transaction silently skips every later committed record of the same
//! producer (`INFRA.md`, "Stand-in quirks"), and so does a *new* consumer that starts at an
//! offset after one (measured with confluent-kafka alone: commit, abort, commit, commit by
//! one `transactional.id`; a fresh `read_committed` read from 0 has the three commits, one
//! from the third commit's offset has nothing). Only a read from offset 0 is correct; a
//! long-lived `read_committed` consumer would report losses that are not there.

mod ahead;
pub mod checks;
pub mod evidence;
mod fence;
pub mod freeze;
mod gap;
mod kill9;
mod reset;
mod timeout;
mod whole;

use crate::stage::Stage;
use crate::suite::{Ctx, Suite};

/// Runs the scenarios of this module (each selectable by its name).
pub async fn run(suite: &mut Suite, ctx: &Ctx) {
    suite
        .run("eos", "exactly once: kill -9", kill9::kill9(ctx))
        .await;
    suite
        .run(
            "eostxn",
            "exactly once: MongoDB transaction kept whole",
            whole::whole_transactions(ctx),
        )
        .await;
    suite
        .run(
            "eosfreeze",
            "exactly once: broker frozen",
            freeze::broker_frozen(ctx),
        )
        .await;
    suite
        .run(
            "eosfence",
            "exactly once: two instances",
            fence::two_instances(ctx),
        )
        .await;
    suite
        .run(
            "eosreset",
            "exactly once: offsets reset",
            reset::offsets_reset(ctx),
        )
        .await;
    suite
        .run(
            "eosahead",
            "exactly once: offsets document ahead of Kafka",
            ahead::document_ahead(ctx),
        )
        .await;
    if crate::suite::default_broker() == "kafka" {
        suite
            .run(
                "eostimeout",
                "exactly once: coordinator timeout",
                timeout::coordinator_timeout(ctx),
            )
            .await;
    }
}

/// [`Stage::up`] of an exactly-once scenario: `delivery = "exactly_once"` and `pipeline_extra`
/// in its pipeline, `properties` in `[kafka.properties]`, and `keys` update documents.
pub async fn stage(
    ctx: &Ctx,
    scenario: &str,
    db: &str,
    keys: u32,
    properties: &str,
    pipeline_extra: &str,
) -> Stage {
    Stage::up(ctx, scenario, db, keys, |cfg| {
        cfg.properties = properties.to_owned();
        cfg.pipeline_extra = format!("delivery = \"exactly_once\"\n{pipeline_extra}");
    })
    .await
}
