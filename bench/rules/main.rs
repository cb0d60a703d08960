//! The field rules' cost per event, for callgrind (BENCHMARKS.md, "Field rules"): builds a
//! `RecordEncoder` for a collection pipeline with 0, 3 or 10 rules and encodes one ~1 KB insert
//! event N times. Instructions per event are the difference of two runs (N = 30 000 and
//! N = 10 000) divided by 20 000, so start-up cancels out:
//!
//! ```sh
//! cargo build --release --example rules
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/rules 3 10000
//! ```

use bson::{RawDocumentBuf, doc, oid::ObjectId};
use mongo_kafka_bridge::config::Config;
use mongo_kafka_bridge::encode::RecordEncoder;

/// The `[pipelines.fields]` table of `rules` rules (0, 3 or 10).
fn fields(rules: usize) -> &'static str {
    match rules {
        0 => "",
        3 => {
            "[pipelines.fields]\nhash_key = \"0123456789abcdef0123\"\nexclude = [\"card.cvv\"]\n\
              mask = [\"ssn\"]\nhash = [\"email\"]\n"
        }
        _ => {
            "[pipelines.fields]\nhash_key = \"0123456789abcdef0123\"\n\
              exclude = [\"card.cvv\", \"notes\", \"tags.secret\"]\nmask = [\"ssn\", \"phone\"]\n\
              hash = [\"email\", \"card.no\"]\ntruncate = { \"bio\" = 64 }\n\
              rename = { \"addr.zip\" = \"postcode\", \"name\" = \"fullName\" }\n"
        }
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rules: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(0);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"shop\"\ncollection = \"people\"\n{}",
        fields(rules)
    );
    let config = Config::from_toml(&text, std::iter::empty()).expect("a valid configuration");
    let mut encoder = RecordEncoder::new(&config.pipelines[0], "");
    let id = ObjectId::new();
    let event = RawDocumentBuf::from_document(&doc! {
        "_id": { "_data": "8263A1B2C3000000012B022C0100296E5A1004" },
        "operationType": "insert",
        "clusterTime": bson::Timestamp { time: 1_700_000_000, increment: 1 },
        "ns": { "db": "shop", "coll": "people" },
        "documentKey": { "_id": id },
        "fullDocument": {
            "_id": id, "name": "Ada Lovelace", "email": "ada@example.com", "ssn": "078-05-1120",
            "phone": "+44 20 7946 0958", "bio": "x".repeat(600),
            "card": { "no": "4111111111111111", "cvv": "123" },
            "addr": { "street": "12 St James's Square", "zip": "SW1Y 4LB", "city": "London" },
            "tags": [ { "k": "a", "secret": "s" }, { "k": "b", "secret": "t" } ],
            "notes": "n".repeat(100), "n": 42_i64,
        },
    })
    .expect("an event");
    let mut bytes = 0;
    for _ in 0..n {
        let encoded = encoder.encode(&event).expect("encodes");
        bytes += encoded
            .records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Vec::len))
            .sum::<usize>();
    }
    println!(
        "{rules} rules: {n} events, {} bytes per event ({} B event)",
        bytes / n.max(1),
        event.as_bytes().len()
    );
}
