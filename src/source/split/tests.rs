//! Tests of the split-event reassembly, with the fuzz targets' crashes (tests/fuzz/).
use super::*;
use bson::rawdoc;

fn fragment(n: i32, of: i32, field: &str) -> RawDocumentBuf {
    let mut doc = rawdoc! {
        "_id": { "_data": format!("T{n}") },
        "operationType": "update",
        "documentKey": { "_id": 1 },
        "splitEvent": { "fragment": n, "of": of },
    };
    doc.append(field, format!("value-{n}"));
    doc
}

#[test]
fn three_fragments_become_one_event_with_the_last_token() {
    let mut r = Reassembler::default();
    assert_eq!(r.push(fragment(1, 3, "fullDocument")), Ok(None));
    assert_eq!(r.push(fragment(2, 3, "updateDescription")), Ok(None));
    let whole = r
        .push(fragment(3, 3, "fullDocumentBeforeChange"))
        .unwrap()
        .unwrap();
    assert_eq!(
        whole,
        rawdoc! {
            "_id": { "_data": "T3" },
            "operationType": "update",
            "documentKey": { "_id": 1 },
            "fullDocument": "value-1",
            "updateDescription": "value-2",
            "fullDocumentBeforeChange": "value-3",
        }
    );
    assert!(!r.is_pending());
}

#[test]
fn unsplit_events_pass_through_and_single_fragments_lose_the_marker() {
    let mut r = Reassembler::default();
    let plain = rawdoc! { "_id": { "_data": "A" }, "operationType": "insert" };
    assert_eq!(r.push(plain.clone()), Ok(Some(plain)));
    let whole = r.push(fragment(1, 1, "fullDocument")).unwrap().unwrap();
    assert!(whole.get("splitEvent").unwrap().is_none());
    let mut expected = fragment(1, 1, "fullDocument");
    expected = expected
        .iter()
        .map(Result::unwrap)
        .filter(|(key, _)| *key != "splitEvent")
        .fold(RawDocumentBuf::new(), |mut doc, (key, value)| {
            doc.append(key, value.to_raw_bson());
            doc
        });
    assert_eq!(whole.as_bytes(), expected.as_bytes());
}

#[test]
fn a_single_fragment_of_many_fields_is_merged_whole() {
    // GIVEN a single fragment with more fields than the plain check holds
    let mut doc = fragment(1, 1, "fullDocument");
    for i in 0..30 {
        doc.append(format!("f{i}"), i);
    }
    // THEN it is merged: every field kept once, no marker
    let whole = Reassembler::default().push(doc).unwrap().unwrap();
    let keys: Vec<&str> = whole.iter().map(|e| e.unwrap().0).collect();
    assert_eq!(keys.len(), 4 + 30, "{keys:?}");
    assert!(!keys.contains(&"splitEvent"));
}

#[test]
fn a_marker_after_an_unreadable_element_is_an_error() {
    // GIVEN a fragment whose element before `splitEvent` has a length past the end
    let mut bytes = fragment(1, 2, "x").into_bytes();
    let key = b"operationType\0";
    let at = bytes
        .windows(key.len())
        .position(|w| w == key)
        .expect("the key")
        + key.len();
    bytes[at..at + 4].copy_from_slice(&1000i32.to_le_bytes());
    let raw = RawDocumentBuf::from_bytes(bytes).expect("outer length and terminator");
    // THEN it is an error, not an event passed on whole
    assert_eq!(
        Reassembler::default().push(raw),
        Err(SplitError::Marker { expected: 1 })
    );
}

#[test]
fn out_of_sequence_fragments_are_errors() {
    let mut r = Reassembler::default();
    assert_eq!(
        r.push(fragment(2, 3, "x")),
        Err(SplitError::OutOfSequence {
            expected: 1,
            got: 2,
            of: 3
        })
    );
    let mut r = Reassembler::default();
    r.push(fragment(1, 2, "x")).unwrap();
    let plain = rawdoc! { "_id": { "_data": "A" } };
    assert_eq!(
        r.push(plain),
        Err(SplitError::OutOfSequence {
            expected: 2,
            got: 0,
            of: 2
        })
    );
}

#[test]
fn an_unreadable_marker_is_an_error_never_a_whole_event() {
    let markers = [
        rawdoc! { "fra)ment": 1, "of": 1 },
        rawdoc! { "fragment": 1.0, "of": 1 },
        rawdoc! { "fragment": 1 },
    ];
    for marker in markers {
        let mut r = Reassembler::default();
        let raw = rawdoc! { "_id": { "_data": "A" }, "splitEvent": marker.clone() };
        assert_eq!(
            r.push(raw),
            Err(SplitError::Marker { expected: 1 }),
            "{marker:?}"
        );
    }
    let mut r = Reassembler::default();
    let raw = rawdoc! { "_id": { "_data": "A" }, "splitEvent": "1 of 2" };
    assert_eq!(r.push(raw), Err(SplitError::Marker { expected: 1 }));
}

/// Pushes the fuzz input's documents in order (as the `split` target reads them) and checks
/// what the target checks of each whole event made of fragments: no marker, each field
/// once, and `_id` first when bson reads one in the last fragment.
fn replay(input: &[u8]) {
    let mut rest = input;
    let mut r = Reassembler::default();
    while rest.len() >= 5 {
        let declared = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
        let len = usize::try_from(declared)
            .ok()
            .filter(|n| (5..=rest.len()).contains(n))
            .unwrap_or(rest.len());
        let (one, tail) = rest.split_at(len);
        rest = tail;
        let Ok(raw) = RawDocument::from_bytes(one) else {
            continue;
        };
        let has_id = matches!(raw.get("_id"), Ok(Some(_)));
        let fragment = matches!(raw.get("splitEvent"), Ok(Some(_)));
        if let Ok(Some(whole)) = r.push(raw.to_raw_document_buf())
            && fragment
        {
            let keys: Vec<&str> = whole.iter().flatten().map(|(k, _)| k).collect();
            let mut unique = keys.clone();
            unique.sort_unstable();
            unique.dedup();
            assert_eq!(unique.len(), keys.len(), "a field twice: {keys:?}");
            assert!(!keys.contains(&"splitEvent"), "{keys:?}");
            assert!(!has_id || keys.first() == Some(&"_id"), "{keys:?}");
        }
    }
}

/// The `split` fuzz target's second crash (tests/fuzz/README.md): a single fragment with
/// `documentKey` twice and no `_id` kept both and did not put `_id` first.
#[test]
fn a_single_fragment_with_a_field_twice_is_merged_into_the_events_shape() {
    replay(include_bytes!(
        "../../../tests/fuzz/split_single_fragment_field_twice.bin"
    ));
}

/// The third: an `_id` whose regex value ends on the document's last byte, which bson
/// reads and the element walk did not, was left out of the merged event.
#[test]
fn an_id_bson_reads_is_kept_first_even_at_the_documents_last_byte() {
    replay(include_bytes!(
        "../../../tests/fuzz/split_id_after_an_element_over_the_end.bin"
    ));
}

/// The `split` fuzz target's crash (tests/fuzz/README.md): BSON documents one after the
/// other, the second a fragment whose marker has no readable `fragment`.
#[test]
fn the_fuzzers_unreadable_marker_is_an_error() {
    let input = include_bytes!("../../../tests/fuzz/split_marker_unreadable.bin");
    let mut rest = &input[..];
    let mut results = Vec::new();
    let mut r = Reassembler::default();
    while rest.len() >= 5 {
        let len = i32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let (one, tail) = rest.split_at(len);
        rest = tail;
        let raw = RawDocument::from_bytes(one).expect("a BSON document");
        results.push(
            r.push(raw.to_raw_document_buf())
                .map(|whole| whole.is_some()),
        );
    }
    assert_eq!(
        results,
        [Ok(true), Err(SplitError::Marker { expected: 1 }), Ok(true)]
    );
}
