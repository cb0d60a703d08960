//! Tests of [`OrderedWindow`], with `tokio::sync::oneshot` channels as fake delivery futures:
//! sending `Ok(position)` is a delivery, sending `Err` a delivery error, dropping the sender a
//! cancelled delivery.
//!
//! `next()` is polled once with [`FutureExt::now_or_never`]: `None` means it is pending (nothing
//! may be yielded yet), `Some(None)` that the window is empty, `Some(Some(item))` a yield.

use super::*;

use futures::FutureExt;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use tokio::sync::oneshot;

type Window = OrderedWindow<usize, &'static str>;
type Ack = oneshot::Sender<Result<usize, &'static str>>;

/// Appends an event of `bytes` whose delivery is reported through the returned sender.
fn push(window: &mut Window, bytes: usize) -> Ack {
    let (tx, rx) = oneshot::channel();
    window.push_event(bytes, (Instant::now(), Arc::from("t")), async move {
        rx.await.map_err(|_| "cancelled")?
    });
    tx
}

/// What one poll of `next()` gave.
#[derive(Debug, PartialEq)]
enum Polled {
    /// Nothing can be yielded yet.
    Pending,
    /// The window is empty.
    Empty,
    /// An entry: position, bytes released, whether it was an event.
    Done(usize, usize, bool),
    /// A failed entry.
    Failed(&'static str),
}

fn poll_next(window: &mut Window) -> Polled {
    match window.next().now_or_never() {
        None => Polled::Pending,
        Some(None) => Polled::Empty,
        Some(Some(Ok(done))) => Polled::Done(done.position, done.bytes, done.is_event),
        Some(Some(Err(e))) => Polled::Failed(e),
    }
}

#[track_caller]
fn deliver(ack: Ack, position: usize) {
    ack.send(Ok(position))
        .expect("the window still waits for this delivery");
}

// ---------------------------------------------------------------------------------------------
// Unit tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_empty_window_yields_none_at_once() {
    let mut window = Window::new();
    assert!(window.next().await.is_none());
    assert!(window.is_empty());
    assert_eq!((window.events(), window.bytes()), (0, 0));
    assert_eq!(window.oldest(), None);
}

#[tokio::test]
async fn deliveries_in_order_are_yielded_in_order() {
    // GIVEN three events in flight
    let mut window = Window::new();
    let acks: Vec<Ack> = [10, 20, 30].map(|b| push(&mut window, b)).into();
    assert_eq!((window.events(), window.bytes()), (3, 60));
    assert_eq!(poll_next(&mut window), Polled::Pending);

    // WHEN each is delivered in order
    for (position, ack) in acks.into_iter().enumerate() {
        deliver(ack, position);
    }

    // THEN they are yielded in order, each releasing its bytes
    assert_eq!(poll_next(&mut window), Polled::Done(0, 10, true));
    assert_eq!((window.events(), window.bytes()), (2, 50));
    assert_eq!(poll_next(&mut window), Polled::Done(1, 20, true));
    assert_eq!(poll_next(&mut window), Polled::Done(2, 30, true));
    assert_eq!((window.events(), window.bytes()), (0, 0));
    assert_eq!(poll_next(&mut window), Polled::Empty);
    assert!(window.is_empty());
}

#[tokio::test]
async fn a_later_delivery_is_held_until_the_earlier_one() {
    // GIVEN e0 and e1 in flight
    let mut window = Window::new();
    let e0 = push(&mut window, 100);
    let e1 = push(&mut window, 7);

    // WHEN e1 is delivered first
    deliver(e1, 1);

    // THEN nothing is yielded and nothing is released
    assert_eq!(poll_next(&mut window), Polled::Pending);
    assert_eq!((window.events(), window.bytes()), (2, 107));

    // WHEN e0 is delivered
    deliver(e0, 0);

    // THEN e0 then e1 are yielded at once
    assert_eq!(poll_next(&mut window), Polled::Done(0, 100, true));
    assert_eq!(poll_next(&mut window), Polled::Done(1, 7, true));
    assert_eq!(poll_next(&mut window), Polled::Empty);
}

#[tokio::test]
async fn a_watermark_waits_for_the_events_read_before_it() {
    // GIVEN an undelivered event, then a post-batch token (C03)
    let mut window = Window::new();
    let e0 = push(&mut window, 5);
    window.push_watermark(1);

    // THEN the watermark is not yielded, and does not count as an event
    assert_eq!(poll_next(&mut window), Polled::Pending);
    assert_eq!((window.events(), window.bytes()), (1, 5));

    // WHEN the event is delivered
    deliver(e0, 0);

    // THEN the event, then the watermark are yielded
    assert_eq!(poll_next(&mut window), Polled::Done(0, 5, true));
    assert_eq!(poll_next(&mut window), Polled::Done(1, 0, false));
    assert_eq!(poll_next(&mut window), Polled::Empty);
}

#[tokio::test]
async fn a_watermark_at_the_head_is_yielded_at_once() {
    let mut window = Window::new();
    window.push_watermark(0);
    let _e1 = push(&mut window, 3);
    assert_eq!(poll_next(&mut window), Polled::Done(0, 0, false));
    assert_eq!(poll_next(&mut window), Polled::Pending);
    assert_eq!((window.events(), window.bytes()), (1, 3));
}

#[tokio::test]
async fn a_failed_delivery_at_the_head_is_yielded_as_an_error() {
    let mut window = Window::new();
    let e0 = push(&mut window, 1);
    let e1 = push(&mut window, 1);
    assert_eq!(poll_next(&mut window), Polled::Pending);
    deliver(e1, 1);
    e0.send(Err("broker said no")).expect("waiting");
    assert_eq!(poll_next(&mut window), Polled::Failed("broker said no"));
}

#[tokio::test]
async fn a_cancelled_delivery_is_an_error_never_a_success() {
    // GIVEN e0 and e1, with e1 delivered
    let mut window = Window::new();
    let e0 = push(&mut window, 1);
    let e1 = push(&mut window, 1);
    assert_eq!(poll_next(&mut window), Polled::Pending);
    deliver(e1, 1);

    // WHEN e0's delivery is dropped without a result (producer closed)
    drop(e0);

    // THEN the window yields an error, not e1's position
    assert_eq!(poll_next(&mut window), Polled::Failed("cancelled"));
}

#[tokio::test]
async fn a_failure_behind_an_undelivered_event_waits_for_it() {
    // GIVEN e0 undelivered and e1 failed
    let mut window = Window::new();
    let e0 = push(&mut window, 1);
    let e1 = push(&mut window, 1);
    e1.send(Err("too large")).expect("waiting");

    // THEN nothing is yielded yet
    assert_eq!(poll_next(&mut window), Polled::Pending);

    // WHEN e0 is delivered
    deliver(e0, 0);

    // THEN e0 is yielded, then e1's error
    assert_eq!(poll_next(&mut window), Polled::Done(0, 1, true));
    assert_eq!(poll_next(&mut window), Polled::Failed("too large"));
}

#[tokio::test]
async fn next_is_cancel_safe() {
    // GIVEN a pending next() that is dropped (as a select! branch that lost)
    let mut window = Window::new();
    let e0 = push(&mut window, 4);
    assert_eq!(poll_next(&mut window), Polled::Pending);
    assert_eq!(poll_next(&mut window), Polled::Pending);

    // WHEN the event is delivered afterwards
    deliver(e0, 0);

    // THEN it is yielded once, with its accounting released once
    assert_eq!(poll_next(&mut window), Polled::Done(0, 4, true));
    assert_eq!((window.events(), window.bytes()), (0, 0));
    assert_eq!(poll_next(&mut window), Polled::Empty);
}

#[tokio::test]
async fn next_wakes_up_when_a_delivery_arrives_from_another_task() {
    // GIVEN an event whose delivery is reported by another task a little later
    let mut window = Window::new();
    let e0 = push(&mut window, 9);
    let reporter = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        deliver(e0, 0);
    });

    // WHEN the window is awaited
    let done = tokio::time::timeout(std::time::Duration::from_secs(5), window.next())
        .await
        .expect("woken by the delivery")
        .expect("not empty")
        .expect("delivered");

    // THEN the event is yielded
    assert_eq!((done.position, done.bytes, done.is_event), (0, 9, true));
    reporter.await.expect("reporter ran");
}

#[tokio::test]
async fn oldest_is_the_push_time_of_the_oldest_entry_in_flight() {
    // GIVEN e0 pushed, then 2 ms later e1
    let mut window = Window::new();
    let before_e0 = Instant::now();
    let e0 = push(&mut window, 1);
    let after_e0 = Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let _e1 = push(&mut window, 1);

    // THEN oldest is e0's push time
    let oldest = window.oldest().expect("two entries");
    assert!(before_e0 <= oldest && oldest <= after_e0);

    // WHEN e0 is yielded
    deliver(e0, 0);
    assert_eq!(poll_next(&mut window), Polled::Done(0, 1, true));

    // THEN oldest is e1's push time
    assert!(window.oldest().expect("one entry") > after_e0);
}

// ---------------------------------------------------------------------------------------------
// Property: interleaved pushes and out-of-order, partly failing deliveries
// ---------------------------------------------------------------------------------------------

/// How an event's delivery ends.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outcome {
    Delivered,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone)]
enum Entry {
    Event { bytes: usize, outcome: Outcome },
    Watermark,
}

#[derive(Debug, Clone)]
struct Scenario {
    entries: Vec<Entry>,
    /// Delivery order: a permutation of the events' ordinals (0 = first event pushed).
    order: Vec<usize>,
    /// Whether each step prefers a push (true) or a delivery (false), when both are possible.
    steps: Vec<bool>,
}

fn entry(failures: bool) -> impl Strategy<Value = Entry> {
    let outcome = if failures {
        prop_oneof![
            18 => Just(Outcome::Delivered),
            1 => Just(Outcome::Failed),
            1 => Just(Outcome::Cancelled),
        ]
        .boxed()
    } else {
        Just(Outcome::Delivered).boxed()
    };
    prop_oneof![
        5 => (1usize..100_000, outcome).prop_map(|(bytes, outcome)| Entry::Event { bytes, outcome }),
        1 => Just(Entry::Watermark),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    any::<bool>()
        .prop_flat_map(|failures| prop::collection::vec(entry(failures), 0..48))
        .prop_flat_map(|entries| {
            let events = entries
                .iter()
                .filter(|e| matches!(e, Entry::Event { .. }))
                .count();
            let order = Just((0..events).collect::<Vec<usize>>()).prop_shuffle();
            let steps = prop::collection::vec(any::<bool>(), entries.len() + events);
            (Just(entries), order, steps)
        })
        .prop_map(|(entries, order, steps)| Scenario {
            entries,
            order,
            steps,
        })
}

/// The relay's view of the window: pushes, acknowledgements, and what it consumed.
struct Model {
    entries: Vec<Entry>,
    /// Entry index of each event ordinal.
    event_index: Vec<usize>,
    senders: Vec<Option<Ack>>,
    /// Per entry: `Some(true)` resolved Ok (watermarks on push), `Some(false)` failed.
    resolved: Vec<Option<bool>>,
    pushed: usize,
    /// Entries yielded `Ok` so far; since they must come in push order, also the next position.
    yielded: usize,
    /// Set once an `Err` was yielded: the relay stops consuming.
    stopped: bool,
}

impl Model {
    fn new(entries: Vec<Entry>) -> Self {
        let event_index = entries
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Entry::Event { .. }))
            .map(|(i, _)| i)
            .collect();
        let n = entries.len();
        Self {
            entries,
            event_index,
            senders: (0..n).map(|_| None).collect(),
            resolved: vec![None; n],
            pushed: 0,
            yielded: 0,
            stopped: false,
        }
    }

    fn push(&mut self, window: &mut Window) {
        let i = self.pushed;
        match self.entries[i] {
            Entry::Event { bytes, .. } => self.senders[i] = Some(push(window, bytes)),
            Entry::Watermark => {
                window.push_watermark(i);
                self.resolved[i] = Some(true);
            }
        }
        self.pushed += 1;
    }

    fn complete(&mut self, i: usize) -> Result<(), TestCaseError> {
        let ack = self.senders[i].take().expect("pushed, not yet completed");
        let Entry::Event { outcome, .. } = self.entries[i] else {
            unreachable!("only events have senders")
        };
        match outcome {
            Outcome::Delivered => {
                prop_assert!(ack.send(Ok(i)).is_ok(), "receiver {i} dropped");
            }
            Outcome::Failed => {
                prop_assert!(ack.send(Err("failed")).is_ok(), "receiver {i} dropped");
            }
            Outcome::Cancelled => drop(ack),
        }
        self.resolved[i] = Some(outcome == Outcome::Delivered);
        Ok(())
    }

    /// Consumes everything `next()` yields without waiting, checking each item.
    fn drain(&mut self, window: &mut Window) -> Result<(), TestCaseError> {
        loop {
            match poll_next(window) {
                Polled::Pending => break,
                Polled::Empty => {
                    prop_assert_eq!(self.yielded, self.pushed, "empty with entries in flight");
                    break;
                }
                Polled::Done(position, bytes, is_event) => {
                    // (a) positions strictly increase in push order, with no gap
                    prop_assert_eq!(position, self.yielded);
                    // (b) every entry up to and including it resolved Ok
                    prop_assert!(
                        self.resolved[..=position].iter().all(|r| *r == Some(true)),
                        "yielded {} past {:?}",
                        position,
                        &self.resolved[..=position]
                    );
                    let expected = match self.entries[position] {
                        Entry::Event { bytes, .. } => (bytes, true),
                        Entry::Watermark => (0, false),
                    };
                    prop_assert_eq!((bytes, is_event), expected);
                    self.yielded += 1;
                }
                Polled::Failed(error) => {
                    // (c) the error is the first failure in push order, after all before it
                    //     resolved Ok; the relay stops here
                    let head = self.yielded;
                    prop_assert!(head < self.pushed, "error from an entry never pushed");
                    prop_assert_eq!(self.resolved[head], Some(false));
                    let expected = match self.entries[head] {
                        Entry::Event {
                            outcome: Outcome::Cancelled,
                            ..
                        } => "cancelled",
                        _ => "failed",
                    };
                    prop_assert_eq!(error, expected);
                    self.stopped = true;
                    return Ok(());
                }
            }
        }
        // Liveness: the head is pending only while it is unpushed or unresolved.
        prop_assert!(
            self.yielded == self.pushed || self.resolved[self.yielded].is_none(),
            "entry {} resolved {:?} but was not yielded",
            self.yielded,
            self.resolved[self.yielded]
        );
        // (d) accounting: exactly the events pushed and not yet yielded
        let in_flight = self.entries[self.yielded..self.pushed]
            .iter()
            .filter_map(|e| match e {
                Entry::Event { bytes, .. } => Some(*bytes),
                Entry::Watermark => None,
            });
        let (events, bytes) = in_flight.fold((0, 0), |(n, b), x| (n + 1, b + x));
        prop_assert_eq!((window.events(), window.bytes()), (events, bytes));
        prop_assert_eq!(window.is_empty(), self.yielded == self.pushed);
        prop_assert_eq!(window.oldest().is_none(), self.yielded == self.pushed);
        Ok(())
    }
}

fn run(scenario: Scenario) -> Result<(), TestCaseError> {
    let mut window = Window::new();
    let mut model = Model::new(scenario.entries);
    let mut completed = 0;
    let mut steps = scenario.steps.into_iter();
    model.drain(&mut window)?;
    while !model.stopped {
        let can_push = model.pushed < model.entries.len();
        let next_delivery = scenario
            .order
            .get(completed)
            .map(|&ordinal| model.event_index[ordinal]);
        let can_complete = next_delivery.is_some_and(|i| i < model.pushed);
        let prefer_push = steps.next().unwrap_or(false);
        if can_push && (prefer_push || !can_complete) {
            model.push(&mut window);
        } else if let (true, Some(i)) = (can_complete, next_delivery) {
            model.complete(i)?;
            completed += 1;
        } else {
            break;
        }
        model.drain(&mut window)?;
    }
    // Every entry was pushed and resolved: the relay either stopped at the first failure, or
    // consumed everything and the accounting is back to zero.
    let first_failure = model.resolved.iter().position(|r| *r == Some(false));
    match first_failure {
        Some(i) => {
            prop_assert!(model.stopped);
            prop_assert_eq!(model.yielded, i);
        }
        None => {
            prop_assert!(!model.stopped);
            prop_assert_eq!(model.yielded, model.entries.len());
            prop_assert_eq!((window.events(), window.bytes()), (0, 0));
            prop_assert!(window.is_empty());
        }
    }
    Ok(())
}

/// 256 cases from a seed printed with the test's output. To replay a failure, run
/// `PROPTEST_RNG_SEED=<seed> cargo test --lib window::tests::ordered_window_never_passes`.
/// No failure file is written (`failure_persistence: None`).
fn proptest_config() -> ProptestConfig {
    let defaults = ProptestConfig::default();
    let seed = match defaults.rng_seed {
        RngSeed::Fixed(seed) => seed,
        RngSeed::Random => rand::random(),
    };
    eprintln!("window proptest seed: PROPTEST_RNG_SEED={seed}");
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        ..defaults
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn ordered_window_never_passes_an_undelivered_entry(scenario in scenario()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        // `unconstrained`: tokio's cooperative budget would otherwise make a ready oneshot
        // look pending after many polls inside one `block_on` poll.
        runtime.block_on(tokio::task::unconstrained(async move { run(scenario) }))?;
    }
}
