//! `fuzz`: a randomized fuzz of the Extended JSON encoder with arbitrary BSON documents and
//! arbitrary byte buffers, in both modes.

use std::time::Instant;

use bson::spec::BinarySubtype;
use bson::{Binary, Bson, Document, RawDocument, RawDocumentBuf};
use mongo_kafka_bridge::extjson::{self, JsonMode};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::say;
use crate::suite::Row;

fn random_string(rng: &mut StdRng, allow_nul: bool) -> String {
    const SPECIAL: &[char] = &[
        '"', '\\', '/', '\u{8}', '\u{c}', '\n', '\r', '\t', '\u{1}', '\u{1f}', '\u{7f}', 'é',
        '\u{2028}', '\u{2029}', '\u{fffd}', '😀', '$', '{', '}', '[', ']', ':',
    ];
    let len = match rng.random_range(0..10) {
        0 => 0,
        1..=7 => rng.random_range(1..12),
        _ => rng.random_range(12..200),
    };
    (0..len)
        .map(|_| match rng.random_range(0..4) {
            0 => SPECIAL[rng.random_range(0..SPECIAL.len())],
            1 => char::from_u32(rng.random_range(0..0x11_0000)).unwrap_or('x'),
            _ => char::from(rng.random_range(b' '..=b'~')),
        })
        .filter(|c| allow_nul || *c != '\0')
        .collect()
}

fn random_f64(rng: &mut StdRng) -> f64 {
    match rng.random_range(0..12) {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        3 => -0.0,
        4 => f64::MIN_POSITIVE / 3.0, // subnormal
        5 => f64::MAX,
        6 => f64::from(rng.random_range(-1000..1000)),
        7 => rng.random_range(-1e20..1e20),
        _ => f64::from_bits(rng.random()),
    }
}

fn random_value(rng: &mut StdRng, depth: usize) -> Bson {
    let nested = depth < 7;
    match rng.random_range(0..21) {
        0 => Bson::Double(random_f64(rng)),
        1 => Bson::String(random_string(rng, true)),
        2 if nested => Bson::Document(random_document(rng, depth + 1)),
        3 if nested => Bson::Array(
            (0..rng.random_range(0..6))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        4 => {
            let subtype = match rng.random_range(0..6) {
                0 => BinarySubtype::Generic,
                1 => BinarySubtype::Uuid,
                2 => BinarySubtype::Md5,
                3 => BinarySubtype::Encrypted,
                4 => BinarySubtype::UserDefined(rng.random_range(0x80..=0xff)),
                _ => BinarySubtype::Column,
            };
            let len = rng.random_range(0..40);
            Bson::Binary(Binary {
                subtype,
                bytes: (0..len).map(|_| rng.random()).collect(),
            })
        }
        5 => Bson::Undefined,
        6 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(rng.random())),
        7 => Bson::Boolean(rng.random()),
        8 => Bson::DateTime(bson::DateTime::from_millis(match rng.random_range(0..3) {
            0 => rng.random(),
            1 => rng.random_range(0..253_402_300_799_999),
            _ => rng.random_range(-62_135_596_800_000..0),
        })),
        9 => Bson::Null,
        10 => Bson::RegularExpression(bson::Regex {
            pattern: random_string(rng, false),
            options: ["", "i", "ims", "ux", "imsux"][rng.random_range(0..5)].to_owned(),
        }),
        11 => Bson::JavaScriptCode(random_string(rng, true)),
        12 => Bson::Symbol(random_string(rng, true)),
        13 if nested => Bson::JavaScriptCodeWithScope(bson::JavaScriptCodeWithScope {
            code: random_string(rng, true),
            scope: random_document(rng, depth + 1),
        }),
        14 => Bson::Int32(rng.random()),
        15 => Bson::Timestamp(bson::Timestamp {
            time: rng.random(),
            increment: rng.random(),
        }),
        16 => Bson::Int64(match rng.random_range(0..3) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.random(),
        }),
        17 => Bson::Decimal128(bson::Decimal128::from_bytes(rng.random())),
        18 => Bson::MaxKey,
        19 => Bson::MinKey,
        _ => Bson::Int32(rng.random_range(-3..3)),
    }
}

fn random_document(rng: &mut StdRng, depth: usize) -> Document {
    let mut doc = Document::new();
    for _ in 0..rng.random_range(0..6) {
        let key = match rng.random_range(0..4) {
            0 => "_id".to_owned(),
            1 => format!("${}", random_string(rng, false)),
            _ => random_string(rng, false),
        };
        doc.insert(key, random_value(rng, depth));
    }
    doc
}

/// A change-event-like envelope around a random document.
fn random_event(rng: &mut StdRng) -> Document {
    if rng.random_bool(0.5) {
        return random_document(rng, 1);
    }
    bson::doc! {
        "_id": { "_data": random_string(rng, false) },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: rng.random(), increment: rng.random() },
        "wallTime": bson::DateTime::from_millis(rng.random()),
        "fullDocument": random_document(rng, 2),
        "ns": { "db": "d", "coll": "c" },
        "documentKey": { "_id": random_value(rng, 3) },
    }
}

/// Mutates valid BSON bytes: flips, overwrites, inserts, truncates; then (usually) repairs the
/// outer length and terminator so `RawDocument::from_bytes` accepts the buffer and the encoder
/// has to walk the damage.
fn mutate(rng: &mut StdRng, mut bytes: Vec<u8>) -> Vec<u8> {
    for _ in 0..rng.random_range(1..5) {
        if bytes.len() <= 5 {
            break;
        }
        let at = rng.random_range(4..bytes.len() - 1);
        match rng.random_range(0..6) {
            0 => bytes[at] ^= 1 << rng.random_range(0..8),
            1 => bytes[at] = rng.random(),
            2 => {
                bytes[at] =
                    [0x00, 0x01, 0x02, 0x03, 0x04, 0x0c, 0x13, 0x7f, 0xff][rng.random_range(0..9)]
            }
            3 => bytes.insert(at, rng.random()),
            4 => {
                let end = rng.random_range(at..bytes.len());
                bytes.drain(at..end);
            }
            _ => {
                // an inner length field: a small or a huge value
                let v: i32 = if rng.random() {
                    rng.random_range(-8..64)
                } else {
                    rng.random()
                };
                let end = (at + 4).min(bytes.len());
                let le = v.to_le_bytes();
                bytes[at..end].copy_from_slice(&le[..end - at]);
            }
        }
    }
    if rng.random_range(0..10) > 0 && bytes.len() >= 5 {
        let len = bytes.len() as i32;
        bytes[..4].copy_from_slice(&len.to_le_bytes());
        let last = bytes.len() - 1;
        bytes[last] = 0;
    }
    bytes
}

fn random_buffer(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.random_range(5..120);
    let mut bytes: Vec<u8> = (0..len).map(|_| rng.random()).collect();
    bytes[..4].copy_from_slice(&(len as i32).to_le_bytes());
    bytes[len - 1] = 0;
    bytes
}

fn encode_both(doc: &RawDocument) -> Vec<Result<String, extjson::ExtJsonError>> {
    [JsonMode::Relaxed, JsonMode::Canonical]
        .into_iter()
        .map(|mode| extjson::to_string(doc, mode))
        .collect()
}

/// Raw BSON of `{d: {d: … {leaf: 1}}}` with `depth` documents, built without recursion.
fn nested_bytes(depth: usize) -> Vec<u8> {
    let mut doc = vec![0, 0, 0, 0, 0x10, b'l', b'e', b'a', b'f', 0, 1, 0, 0, 0, 0];
    let len = doc.len() as i32;
    doc[..4].copy_from_slice(&len.to_le_bytes());
    for _ in 1..depth {
        let mut outer = vec![0, 0, 0, 0, 0x03, b'd', 0];
        outer.extend_from_slice(&doc);
        outer.push(0);
        let len = outer.len() as i32;
        outer[..4].copy_from_slice(&len.to_le_bytes());
        doc = outer;
    }
    doc
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Feeds `n` random documents and `n` random/mutated byte buffers to `extjson::to_string` in
/// both modes: no panic; every output parses as JSON; every valid document encodes; the
/// canonical output of a valid document parses back to the same BSON.
/// What the fuzz saw: counts and the first failures.
#[derive(Default)]
struct Findings {
    /// Damaged or random buffers `from_bytes` accepted.
    accepted: usize,
    /// Their encodings that succeeded, and those that failed (cleanly).
    encoded: usize,
    errors: usize,
    /// Valid documents whose canonical output read back to them exactly.
    round_trips: usize,
    /// The first 10 failures.
    failures: Vec<String>,
}

impl Findings {
    fn fail(&mut self, what: String) {
        if self.failures.len() < 10 {
            self.failures.push(what);
        }
    }

    /// Documents whose depth is around MAX_DEPTH: an error beyond it, never a stack overflow.
    fn depths(&mut self) {
        for depth in [
            extjson::MAX_DEPTH - 1,
            extjson::MAX_DEPTH,
            extjson::MAX_DEPTH + 1,
            5000,
        ] {
            let raw = nested_bytes(depth);
            let raw = RawDocument::from_bytes(&raw).unwrap();
            for r in encode_both(raw) {
                match (depth <= extjson::MAX_DEPTH, r) {
                    // (serde_json stops at 128 levels, so count the objects instead)
                    (true, Ok(s))
                        if s.matches('{').count() >= depth && s.ends_with(&"}".repeat(depth)) => {}
                    (false, Err(extjson::ExtJsonError::TooDeep)) => {}
                    (_, other) => self.fail(format!("depth {depth}: {:?}", other.map(|s| s.len()))),
                }
            }
        }
    }

    /// Valid document #`i`: both modes give JSON, and the canonical one reads back to `doc`.
    fn valid(&mut self, i: usize, doc: &Document, raw: &RawDocumentBuf) {
        let Ok(outputs) = std::panic::catch_unwind(|| encode_both(raw)) else {
            self.fail(format!("panic on document #{i}: {}", hex(raw.as_bytes())));
            return;
        };
        for (mode, out) in ["relaxed", "canonical"].iter().zip(outputs) {
            match out {
                Ok(s) => match serde_json::from_str::<serde_json::Value>(&s) {
                    Ok(json) if *mode == "canonical" => match Bson::try_from(json) {
                        Ok(Bson::Document(back)) if same(&back, doc) => self.round_trips += 1,
                        Ok(back) => self.fail(format!(
                            "canonical output of document #{i} does not round-trip: {s} → {back:?}; input {}",
                            hex(raw.as_bytes())
                        )),
                        Err(e) => self.fail(format!(
                            "canonical output of document #{i} is not Extended JSON ({e}): {s}"
                        )),
                    },
                    Ok(_) => {}
                    Err(e) => self.fail(format!(
                        "{mode} output of document #{i} is not JSON ({e}): {s}"
                    )),
                },
                Err(e) => self.fail(format!(
                    "valid document #{i} failed in {mode} mode: {e}; input {}",
                    hex(raw.as_bytes())
                )),
            }
        }
    }

    /// A damaged or random buffer: when `from_bytes` accepts it, valid JSON or a clean error.
    fn buffer(&mut self, bytes: &[u8]) {
        let Ok(doc) = RawDocument::from_bytes(bytes) else {
            return;
        };
        self.accepted += 1;
        let Ok(outputs) = std::panic::catch_unwind(|| encode_both(doc)) else {
            self.fail(format!("panic on buffer: {}", hex(bytes)));
            return;
        };
        for out in outputs {
            match out {
                Ok(s) => {
                    self.encoded += 1;
                    if serde_json::from_str::<serde_json::Value>(&s).is_err() {
                        self.fail(format!("invalid JSON {s:?} from buffer {}", hex(bytes)));
                    }
                }
                Err(_) => self.errors += 1,
            }
        }
    }
}

pub fn fuzz_extjson(n: usize, seed: u64) -> Row {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut found = Findings::default();
    found.depths();
    for i in 0..n {
        let doc = random_event(&mut rng);
        let raw = match RawDocumentBuf::from_document(&doc) {
            Ok(r) => r,
            Err(e) => panic!("generated document does not serialize: {e}: {doc:?}"),
        };
        found.valid(i, &doc, &raw);
        // The same document damaged, and pure noise.
        for bytes in [
            mutate(&mut rng, raw.as_bytes().to_vec()),
            random_buffer(&mut rng),
        ] {
            found.buffer(&bytes);
        }
    }
    let mut row = Row::new("extjson fuzz (both modes)");
    row.runs = format!("{} inputs", n * 3);
    row.seconds = started.elapsed().as_secs_f64();
    say!(
        "extjson fuzz: seed {seed}: {n} documents ({} round-trip exactly in canonical mode), \
         {} damaged/random buffers accepted by from_bytes → {} encodings ok, {} errors; {:.1} s",
        found.round_trips,
        found.accepted,
        found.encoded,
        found.errors,
        row.seconds
    );
    assert!(
        found.failures.is_empty(),
        "extjson fuzz (seed {seed}, MKB_FAULTS_SEED={seed} reproduces):\n{}",
        found.failures.join("\n")
    );
    row
}

/// BSON equality where NaN equals NaN (the only value `PartialEq` does not identify).
fn same(a: &Document, b: &Document) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b.iter())
            .all(|((ka, va), (kb, vb))| ka == kb && same_value(va, vb))
}

fn same_value(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Double(x), Bson::Double(y)) => {
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan())
        }
        (Bson::Document(x), Bson::Document(y)) => same(x, y),
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same_value(a, b))
        }
        // Random bytes give non-canonical decimals (printed as 0 per the Decimal128 spec).
        (Bson::Decimal128(_), Bson::Decimal128(_)) => true,
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => {
            x.code == y.code && same(&x.scope, &y.scope)
        }
        _ => a == b,
    }
}
