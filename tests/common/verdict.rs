//! The verdict of a fault run: MongoDB's writes ([`Truth`]) compared with what a consumer read:
//! nothing missing, per-document order of first copies, no record of an event MongoDB does not
//! have, and how many copies of each event.

use std::collections::HashMap;

use crate::common::load::Truth;
use crate::common::records::{EventId, Rec};

/// MongoDB's writes compared with what the consumer read.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Change events the writes produced.
    pub writes: usize,
    /// Distinct expected events read.
    pub unique: usize,
    pub missing: usize,
    pub first_missing: Vec<EventId>,
    /// Extra copies of expected events.
    pub duplicates: usize,
    /// Records of events MongoDB does not have, or that are not load events.
    pub unexpected: usize,
    /// Per-document order violations of first occurrences.
    pub order_violations: Vec<String>,
    /// Event → number of copies read.
    pub copies: HashMap<EventId, usize>,
    /// Event → cluster time of its first copy.
    pub times: HashMap<EventId, (u32, u32)>,
}

pub fn verify(truth: &Truth, recs: &[Rec]) -> Verdict {
    let expected = truth.expected();
    let mut recs: Vec<&Rec> = recs.iter().collect();
    recs.sort_by_key(|r| (r.partition, r.offset));
    let mut v = Verdict {
        writes: expected.len(),
        ..Verdict::default()
    };
    // Per update document: the last first-seen n.
    let mut last_first: HashMap<&str, i64> = HashMap::new();
    for r in &recs {
        let Some(e) = &r.event else {
            v.unexpected += 1;
            continue;
        };
        if !expected.contains(e) {
            v.unexpected += 1;
            continue;
        }
        let c = v.copies.entry(e.clone()).or_insert(0);
        *c += 1;
        if *c > 1 {
            v.duplicates += 1;
            continue;
        }
        if let Some(t) = r.cluster_time {
            v.times.insert(e.clone(), t);
        }
        if let EventId::Update(k, n) = e {
            let last = last_first.entry(k.as_str()).or_insert(0);
            if *n != *last + 1 && v.order_violations.len() < 10 {
                v.order_violations.push(format!(
                    "{k}: update n={n} first seen after n={last} (partition {} offset {})",
                    r.partition, r.offset
                ));
            }
            *last = (*last).max(*n);
        }
    }
    v.unique = v.copies.len();
    let mut missing: Vec<EventId> = expected
        .iter()
        .filter(|e| !v.copies.contains_key(*e))
        .cloned()
        .collect();
    missing.sort();
    v.missing = missing.len();
    missing.truncate(10);
    v.first_missing = missing;
    v
}

impl Verdict {
    /// Panics unless nothing is missing, nothing unexpected arrived and order holds.
    pub fn assert_sound(&self, scenario: &str) {
        assert_eq!(
            self.missing, 0,
            "{scenario}: {} of {} events missing in Kafka, first {:?}",
            self.missing, self.writes, self.first_missing
        );
        assert!(
            self.order_violations.is_empty(),
            "{scenario}: per-document order broken: {:?}",
            self.order_violations
        );
        assert_eq!(
            self.unexpected, 0,
            "{scenario}: records of events MongoDB does not have"
        );
    }
}
