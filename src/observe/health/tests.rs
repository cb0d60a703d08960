//! Unit tests of readiness and liveness.

use super::*;

fn ready(lines: &[&str]) -> Readiness {
    Readiness {
        ready: true,
        lines: lines.iter().map(|l| (*l).to_owned()).collect(),
    }
}

fn not_ready(lines: &[&str]) -> Readiness {
    Readiness {
        ready: false,
        ..ready(lines)
    }
}

#[test]
fn readiness_reports_closed_stream_stale_delivery_and_draining() {
    let health = Health::new(["a".to_owned()], 120_000);
    assert_eq!(
        health.readiness(1000),
        not_ready(&["pipeline a: change stream not open"])
    );
    let a = health.pipeline("a");
    a.stream_open.store(true, Ordering::Relaxed);
    assert_eq!(health.readiness(1000), ready(&[]));
    a.oldest_in_flight_ms
        .store(now_ms() - 5000, Ordering::Relaxed);
    let r = health.readiness(1000);
    assert!(
        !r.ready && r.lines[0].contains("oldest undelivered"),
        "{r:?}"
    );
    a.oldest_in_flight_ms.store(0, Ordering::Relaxed);
    health.draining.store(true, Ordering::Relaxed);
    assert_eq!(
        health.readiness(1000),
        not_ready(&["draining: shutdown in progress"])
    );
}

#[test]
fn readiness_reports_a_server_that_does_not_answer() {
    let health = Health::new(["a".to_owned()], 120_000);
    let a = health.pipeline("a");
    a.stream_open.store(true, Ordering::Relaxed);
    a.server_answer_bound_ms.store(6000, Ordering::Relaxed);
    a.awaiting_server_since_ms
        .store(now_ms() - 1000, Ordering::Relaxed);
    assert!(health.readiness(60_000).ready);
    a.awaiting_server_since_ms
        .store(now_ms() - 7000, Ordering::Relaxed);
    let r = health.readiness(60_000);
    assert!(
        !r.ready && r.lines[0].contains("no answer from MongoDB"),
        "{r:?}"
    );
}

#[test]
fn a_standby_is_ready_and_says_who_owns_the_pipeline() {
    // GIVEN a pipeline whose stream is closed because another instance owns it
    let health = Health::new(["a".to_owned()], 120_000);
    health
        .pipeline("a")
        .set_standby("host:1:abc", 1_764_403_200_000);
    // THEN the process is ready, and the body says so
    assert_eq!(
        health.readiness(1000),
        ready(&["pipeline a: standby, owner host:1:abc until 2025-11-29T08:00:00Z"])
    );
    health.pipeline("a").clear_standby();
    assert!(!health.readiness(1000).ready);
}

#[test]
fn a_pipeline_restarted_after_a_kafka_failure_is_not_ready_until_kafka_answers() {
    let health = Health::new(["a".to_owned()], 120_000);
    let a = health.pipeline("a");
    a.stream_open.store(true, Ordering::Relaxed);
    a.kafka_failing.store(true, Ordering::Relaxed);
    let r = health.readiness(60_000);
    assert!(
        !r.ready && r.lines[0].contains("Kafka deliveries failed"),
        "{r:?}"
    );
    a.kafka_failing.store(false, Ordering::Relaxed);
    assert!(health.readiness(60_000).ready);
}

#[test]
fn a_refused_pipeline_is_not_ready_and_says_why() {
    let health = Health::new(["a".to_owned()], 120_000);
    health.pipeline("a").set_refused("its stream changed");
    assert_eq!(
        health.readiness(1000),
        not_ready(&["pipeline a: refused: its stream changed"])
    );
}

#[test]
fn liveness_flags_a_stale_heartbeat_and_forgets_an_ended_loop() {
    let health = Health::new(["a".to_owned()], 5000);
    assert_eq!(health.liveness(), Ok(()));
    let a = health.pipeline("a");
    a.heartbeat_ms.store(now_ms() - 5001, Ordering::Relaxed);
    assert_eq!(
        health.liveness(),
        Err("pipeline a: loop has not ticked for over 5000 ms".to_owned())
    );
    a.loop_ended();
    assert_eq!(health.liveness(), Ok(()));
    a.beat();
    assert_eq!(health.liveness(), Ok(()));
}

#[test]
fn a_group_member_is_ready_once_joined_with_what_it_runs_and_not_with_a_slot_it_cannot_run() {
    let health = Health::new(["a".to_owned(), "b".to_owned()], 120_000);
    health.set_group("g");
    assert_eq!(
        health.readiness(1000),
        not_ready(&["group g: joining, no assignment yet"])
    );
    health.group_joined(true);
    assert_eq!(
        health.readiness(1000),
        ready(&["group g: member, runs 0 pipeline(s)"])
    );
    let a = health.pipeline("a");
    a.begin_run();
    a.stream_open.store(true, Ordering::Relaxed);
    assert_eq!(
        health.readiness(1000),
        ready(&["group g: member, runs 1 pipeline(s)"])
    );
    health.group_problem(
        "slot 3",
        Some("assigned pipeline \"x\", unknown here".to_owned()),
    );
    assert_eq!(
        health.readiness(1000),
        not_ready(&[
            "group g: slot 3: assigned pipeline \"x\", unknown here",
            "group g: member, runs 1 pipeline(s)"
        ])
    );
    health.group_problem("slot 3", None);
    // A lost session: not a member until the next assignment.
    health.group_joined(false);
    assert!(!health.readiness(1000).ready);
    health.group_joined(true);
    // A pipeline a reload adds is elsewhere until the group assigns it here.
    let c = health.pipeline("c");
    assert!(c.elsewhere.load(Ordering::Relaxed));
    health.remove_pipeline("c");
    assert_eq!(health.names(), vec!["a".to_owned(), "b".to_owned()]);
    assert!(health.readiness(1000).ready);
}

#[test]
fn a_missing_topic_ends_when_a_record_reaches_it_and_only_that_topic() {
    let health = Health::new(["a".to_owned()], 120_000);
    let a = health.pipeline("a");
    a.stream_open.store(true, Ordering::Relaxed);
    assert!(a.set_topic_missing("t", "topic \"t\" does not exist"));
    assert!(
        !a.set_topic_missing("t", "topic \"t\" does not exist"),
        "one episode"
    );
    a.delivered_to("other");
    assert_eq!(
        health.readiness(1000),
        not_ready(&["pipeline a: topic \"t\" does not exist"])
    );
    a.delivered_to("t");
    assert_eq!(health.readiness(1000), ready(&[]));
    assert!(a.set_topic_missing("t", "again"), "a new episode");
}

#[test]
fn a_take_over_waiting_for_the_previous_lease_says_so_instead_of_a_closed_stream() {
    let health = Health::new(["a".to_owned()], 120_000);
    let a = health.pipeline("a");
    a.lease_wait_until_ms
        .store(now_ms() + 10_000, Ordering::Relaxed);
    let r = health.readiness(1000);
    assert!(!r.ready, "{r:?}");
    assert_eq!(r.lines.len(), 1, "{r:?}");
    assert!(r.lines[0].contains("previous owner's lease"), "{r:?}");
    a.lease_wait_until_ms.store(0, Ordering::Relaxed);
    assert_eq!(
        health.readiness(1000),
        not_ready(&["pipeline a: change stream not open"])
    );
}
