//! `eostxn`: MongoDB transactions of 300 inserts stay whole for `read_committed` consumers
//! although the bridge is killed while publishing one. `max_transaction_events = 10` and a
//! light write load around the transactions, so every Kafka transaction would end after 10
//! events if a MongoDB transaction did not hold it open.
//!
//! Each round commits one MongoDB transaction of 300 inserts (ids `BASE + 1000·round + i`). A
//! long-lived `read_uncommitted` consumer (the noida-db quirk concerns `read_committed` only)
//! kill -9s the bridge as soon as the first of its records reaches the topic: the Kafka
//! transaction holding it is then open unless the bridge managed to commit in between. Right
//! after the kill, fresh reads tell which: the kill landed mid-transaction when
//! `read_uncommitted` has some of the 300 (a part, or all of them uncommitted) and
//! `read_committed` none. The next instance starts at once.
//!
//! Throughout, a reader polls with a fresh `read_committed` read (see the module doc of
//! `exactly_once`): each poll must see, on every partition, none or all of the records of a
//! round that the partition ends up with, each once, and never fewer than the poll before
//! ([`Polls`]: a fresh read is no snapshot across partitions). Rounds: 3 (10 long), up to 3 more until one kill landed
//! mid-transaction; none landing fails the scenario (it would test nothing).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bson::{Document, doc};

use crate::common::bridge::BridgeProc;
use crate::common::kafka::{Isolation, assign_from_start, consumer};
use crate::common::load::{Truth, start_load};
use crate::common::records::{EventId, Rec, read};
use crate::exactly_once::checks::{
    check_exactly_once, check_follower, check_sequence, wait_committed,
};
use crate::exactly_once::evidence::epochs_taken;
use crate::say;
use crate::stage::Stage;
use crate::suite::{Ctx, Row};

mod polls;

use polls::Poller;

const SIZE: usize = 300;
const BASE: i64 = 1_000_000;

fn round_of(r: &Rec) -> Option<i64> {
    match r.event {
        Some(EventId::Insert(id)) if id >= BASE => Some((id - BASE) / 1000),
        _ => None,
    }
}

/// Records of each round in `recs`: (distinct ids, records).
fn per_round(recs: &[Rec]) -> BTreeMap<i64, (usize, usize)> {
    let mut ids: HashMap<i64, HashSet<i64>> = HashMap::new();
    let mut counts: BTreeMap<i64, (usize, usize)> = BTreeMap::new();
    for r in recs {
        if let (Some(round), Some(EventId::Insert(id))) = (round_of(r), &r.event) {
            ids.entry(round).or_default().insert(*id);
            counts.entry(round).or_default().1 += 1;
        }
    }
    for (round, c) in &mut counts {
        c.0 = ids[round].len();
    }
    counts
}

pub async fn whole_transactions(ctx: &Ctx) -> Vec<Row> {
    let (rounds, extra_rounds) = if ctx.long { (10, 3) } else { (3, 3) };
    let extra = "max_transaction_events = 10\n";
    let stage = super::stage(ctx, "eostxn", "eostxn", 20, "", extra).await;
    let (inst, cfg, client, coll) = stage.parts();
    let topic = cfg.topic();
    let follower = stage.follower();
    let mut proc = stage.spawn("eostxn-0.log");
    cfg.wait_started(client, Duration::from_secs(60)).await;
    let poller = Poller::start(&inst.kafka, &topic);
    let watcher = Watcher::start(&inst.kafka, &topic);
    let load = start_load(coll.clone(), 50, 20, 0);
    let mut row = Row::new("exactly once: MongoDB transaction of 300, kill -9");
    let mut landed = Vec::new();
    let mut round = 0;
    while round < rounds || (landed.iter().all(|l: &bool| !l) && round < rounds + extra_rounds) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let killed = Round {
            stage: &stage,
            poller: &poller,
            watcher: &watcher,
            round,
        };
        landed.push(killed.kill_mid_transaction(&mut proc, &mut row).await);
        killed.restart(&mut proc, &mut row).await;
        round += 1;
    }
    let (acked, errors) = load.stop().await;
    let truth = Truth::read(coll).await;
    wait_committed(&inst.kafka, &topic, &truth, Duration::from_secs(120)).await;
    let status = proc.stop(Duration::from_secs(30));
    row.check(status.success(), || format!("graceful stop: {status}"));
    drop(watcher);
    let recs = read(&inst.kafka, &topic, Isolation::Committed).await;
    let polls = poller.finish(&recs);
    let v = check_exactly_once(&mut row, &truth, &recs);
    if let Some(f) = &follower {
        check_follower(&mut row, f, &recs).await;
    }
    let kills_landed = landed.iter().filter(|l| **l).count();
    check_sequence(&mut row, &inst.kafka, &cfg.offsets_db()).await;
    row.check(polls.violations.is_empty(), || {
        format!(
            "read_committed saw a part of a MongoDB transaction (or a duplicate) in {} of {} \
             polls: {}",
            polls.violations.len(),
            polls.polls,
            polls
                .violations
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ")
        )
    });
    row.check(kills_landed > 0, || {
        format!("none of the {round} kills landed mid-transaction: the scenario tested nothing")
    });
    say!(
        "eostxn: {round} transactions of {SIZE}, {kills_landed} kill(s) mid-transaction \
         ({landed:?}); {} read_committed polls, {} saw a part; {acked} load writes ({errors} \
         retried); final read_committed: {} events, {} delivered, {} missing, {} duplicates",
        polls.polls,
        polls.violations.len(),
        v.writes,
        v.unique,
        v.missing,
        v.duplicates
    );
    let mut row = row.with_verdict(&v);
    row.runs = format!(
        "{round} kills ({kills_landed} mid-transaction), {} polls",
        polls.polls
    );
    row.seconds = stage.started.elapsed().as_secs_f64();
    vec![row]
}

/// One round of the scenario.
struct Round<'a> {
    stage: &'a Stage,
    poller: &'a Poller,
    watcher: &'a Watcher,
    round: i64,
}

impl Round<'_> {
    /// Commits the round's MongoDB transaction of 300 with the watcher armed to kill `proc`
    /// at its first record; whether the kill landed mid-transaction (fresh reads right after
    /// it: `read_committed` none of the 300, `read_uncommitted` some).
    async fn kill_mid_transaction(&self, proc: &mut BridgeProc, row: &mut Row) -> bool {
        let (inst, cfg, client, coll) = self.stage.parts();
        let (round, topic) = (self.round, cfg.topic());
        self.watcher.arm(round, proc.pid());
        let docs: Vec<Document> = (0..SIZE as i64)
            .map(|i| doc! { "_id": BASE + 1000 * round + i })
            .collect();
        let mut session = client.start_session().await.expect("session");
        session
            .start_transaction()
            .await
            .expect("start transaction");
        coll.insert_many(docs)
            .session(&mut session)
            .await
            .expect("insert 300 in a transaction");
        session
            .commit_transaction()
            .await
            .expect("commit the transaction");
        let killed = tokio::task::block_in_place(|| proc.wait_exit(Duration::from_secs(30)));
        row.check(killed.is_some(), || {
            format!("round {round}: the watcher saw no record of the transaction within 30 s")
        });
        proc.kill9(); // reaps it (or kills it when the watcher did not)
        let committed = per_round(&read(&inst.kafka, &topic, Isolation::Committed).await);
        let uncommitted = per_round(&read(&inst.kafka, &topic, Isolation::Uncommitted).await);
        let c = committed.get(&round).copied().unwrap_or_default();
        let u = uncommitted.get(&round).copied().unwrap_or_default();
        let mid = c.1 == 0 && u.1 > 0;
        say!(
            "eostxn round {round}: killed {}; right after: read_committed {} of the 300, \
             read_uncommitted {} ({})",
            self.watcher.fired_note(round),
            c.1,
            u.1,
            if mid && u.0 < SIZE {
                "mid-transaction: a part published, none committed"
            } else if mid {
                "mid-transaction: all published, not committed"
            } else if c.1 > 0 {
                "too late: committed before the kill"
            } else {
                "too early: nothing published yet"
            }
        );
        mid
    }

    /// Starts the next instance in `proc`: it takes the next epoch, and `read_committed` sees
    /// the round's 300 (within 60 s).
    async fn restart(&self, proc: &mut BridgeProc, row: &mut Row) {
        let round = self.round;
        let epoch = round + 2;
        *proc = self.stage.spawn(&format!("eostxn-{}.log", round + 1));
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(epochs_taken(&proc.log_text()).contains(&epoch) && self.poller.complete(round))
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        row.check(epochs_taken(&proc.log_text()).contains(&epoch), || {
            format!("round {round}: the next instance did not take epoch {epoch}")
        });
        row.check(self.poller.complete(round), || {
            format!("round {round}: read_committed did not see the 300 within 60 s of the restart")
        });
    }
}

/// A long-lived `read_uncommitted` consumer that kill -9s the armed process at the first
/// record of the armed round.
struct Watcher {
    stop: Arc<AtomicBool>,
    /// (round, pid) to kill.
    armed: Arc<Mutex<Option<(i64, u32)>>>,
    /// Round → (the record's id, when it was seen relative to the arming).
    fired: Arc<Mutex<HashMap<i64, (i64, Duration)>>>,
    armed_at: Arc<Mutex<Instant>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(bootstrap: &str, topic: &str) -> Self {
        let group = format!("faults-eostxn-{}", std::process::id());
        let settings = [
            ("isolation.level", Isolation::Uncommitted.as_str()),
            ("fetch.wait.max.ms", "5"),
        ];
        let consumer = consumer(bootstrap, &group, &settings);
        assign_from_start(&consumer, topic, 3);
        let stop = Arc::new(AtomicBool::new(false));
        let armed = Arc::new(Mutex::new(None::<(i64, u32)>));
        let fired = Arc::new(Mutex::new(HashMap::new()));
        let armed_at = Arc::new(Mutex::new(Instant::now()));
        let (s, a, f, at) = (
            Arc::clone(&stop),
            Arc::clone(&armed),
            Arc::clone(&fired),
            Arc::clone(&armed_at),
        );
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Some(Ok(m)) = consumer.poll(Duration::from_millis(10)) else {
                    continue;
                };
                let rec = Rec::decode(&m);
                let Some(round) = round_of(&rec) else {
                    continue;
                };
                let mut armed = a.lock().expect("armed");
                if let Some((r, pid)) = *armed
                    && r == round
                {
                    // `kill` directly (not `signal`): the process may be gone already.
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                    *armed = None;
                    let Some(EventId::Insert(id)) = rec.event else {
                        continue;
                    };
                    let after = at.lock().expect("armed_at").elapsed();
                    f.lock().expect("fired").insert(round, (id, after));
                }
            }
        });
        Self {
            stop,
            armed,
            fired,
            armed_at,
            thread: Some(thread),
        }
    }

    fn arm(&self, round: i64, pid: u32) {
        *self.armed_at.lock().expect("armed_at") = Instant::now();
        *self.armed.lock().expect("armed") = Some((round, pid));
    }

    fn fired_note(&self, round: i64) -> String {
        match self.fired.lock().expect("fired").get(&round) {
            Some((id, after)) => format!(
                "at the first record seen (id {id}, {:.0} ms after the MongoDB transaction started)",
                after.as_secs_f64() * 1000.0
            ),
            None => "without the watcher (no record seen)".to_owned(),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
