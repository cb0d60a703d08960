//! `[pipelines.fields]` on documents, updates and whole events (`encode/fields.rs`), and the
//! rules' refusals at load (`config/fields.rs`).

use bson::{RawDocumentBuf, doc};

use super::fields::{FieldRewriter, cut};
use crate::config::PipelineConfig;

const KEY: &str = "0123456789abcdef0123456789abcdef";

fn rewriter(rules: &str) -> FieldRewriter {
    let p = PipelineConfig::for_test(&format!(
        "database = \"d\"\n[pipelines.fields]\nhash_key = \"{KEY}\"\n{rules}"
    ));
    FieldRewriter::of(&p).expect("rules set")
}

fn raw(d: bson::Document) -> RawDocumentBuf {
    RawDocumentBuf::from_document(&d).expect("a document")
}

fn rewrite(rules: &str, d: bson::Document) -> bson::Document {
    let out = rewriter(rules).document(&raw(d)).expect("rewritten");
    out.to_document().expect("valid BSON")
}

fn refused(rules: &str) -> (String, String) {
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n[pipelines.fields]\n{rules}"
    );
    match crate::config::Config::from_toml(&text, std::iter::empty()) {
        Err(crate::error::BridgeError::Config { field, reason }) => (field, reason),
        other => panic!("expected a config error for {rules:?}, got {other:?}"),
    }
}

#[test]
fn exclude_drops_paths_through_arrays_and_keeps_the_id() {
    let out = rewrite(
        "exclude = [\"card.cvv\", \"items.cost\", \"_note\"]",
        doc! { "_id": 1, "card": { "no": "4111", "cvv": "123" },
        "items": [ { "sku": "a", "cost": 3 }, { "sku": "b", "cost": 4 }, 7 ], "_note": "x" },
    );
    assert_eq!(
        out,
        doc! { "_id": 1, "card": { "no": "4111" }, "items": [ { "sku": "a" }, { "sku": "b" }, 7 ] }
    );
}

#[test]
fn include_keeps_only_its_paths_and_drops_scalars_on_the_way() {
    let out = rewrite(
        "include = [\"name\", \"addr.city\"]",
        doc! { "_id": 1, "name": "n", "ssn": "s", "addr": { "city": "c", "zip": "z" }, "other": 1 },
    );
    assert_eq!(out, doc! { "_id": 1, "name": "n", "addr": { "city": "c" } });
    let scalar = rewrite(
        "include = [\"addr.city\"]",
        doc! { "_id": 1, "addr": "flat" },
    );
    assert_eq!(scalar, doc! { "_id": 1 });
}

#[test]
fn rename_mask_hash_and_truncate_rewrite_their_values() {
    let out = rewrite(
        "rename = { \"addr.zip\" = \"postcode\" }\nmask = [\"ssn\"]\nhash = [\"email\", \"n\"]\n\
         truncate = { \"bio\" = 4 }",
        doc! { "_id": 1, "addr": { "zip": "z" }, "ssn": 123, "email": "a@b", "n": 5_i64,
        "bio": "héllo wörld" },
    );
    assert_eq!(out.get_document("addr").unwrap(), &doc! { "postcode": "z" });
    assert_eq!(out.get_str("ssn").unwrap(), "****");
    let email = out.get_str("email").unwrap();
    assert_eq!(email.len(), 64);
    assert!(
        email
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    // HMAC-SHA-256 of the UTF-8 bytes under KEY, computed independently:
    // python3 -c 'import hmac,hashlib;print(hmac.new(b"0123456789abcdef0123456789abcdef",b"a@b",hashlib.sha256).hexdigest())'
    assert_eq!(
        email,
        "c9a476944778bb314d9f03924f55e0b1768483b531042080913902ac4f3f5191"
    );
    assert_ne!(out.get_str("n").unwrap(), email);
    // "hé" is 3 bytes: 4 bytes would split the next character, so the cut keeps "hé" + "l".
    assert_eq!(out.get_str("bio").unwrap(), "hél");
}

#[test]
fn the_hash_is_stable_and_keyed() {
    let a = rewrite("hash = [\"e\"]", doc! { "_id": 1, "e": "x" });
    let b = rewrite("hash = [\"e\"]", doc! { "_id": 2, "e": "x" });
    assert_eq!(a.get_str("e").unwrap(), b.get_str("e").unwrap());
    let p = PipelineConfig::for_test(
        "database = \"d\"\n[pipelines.fields]\nhash_key = \"another key of 16+ bytes\"\nhash = [\"e\"]",
    );
    let other = FieldRewriter::of(&p)
        .unwrap()
        .document(&raw(doc! { "_id": 1, "e": "x" }))
        .unwrap()
        .to_document()
        .unwrap();
    assert_ne!(other.get_str("e").unwrap(), a.get_str("e").unwrap());
}

#[test]
fn cut_never_splits_a_character() {
    assert_eq!(cut("abc", 5), "abc");
    assert_eq!(cut("aé", 2), "a");
    assert_eq!(cut("€x", 1), "");
    assert_eq!(cut("€x", 3), "€");
}

fn update_event(updated: bson::Document, removed: Vec<&str>) -> RawDocumentBuf {
    raw(doc! {
        "_id": { "_data": "82" }, "operationType": "update",
        "ns": { "db": "d", "coll": "c" }, "documentKey": { "_id": 1 },
        "updateDescription": {
            "updatedFields": updated,
            "removedFields": removed,
            "truncatedArrays": [ { "field": "card.history", "newSize": 1 } ],
        },
    })
}

#[test]
fn updated_fields_follow_the_rules_by_their_dotted_keys() {
    let r = rewriter(
        "exclude = [\"card\"]\nrename = { \"addr.zip\" = \"postcode\" }\nmask = [\"items.secret\"]",
    );
    let event = update_event(
        doc! { "card.cvv": "1", "addr.zip": "z", "items.2.secret": "s", "items.2.n": 1,
        "addr": { "zip": "y", "city": "c" }, "name": "n" },
        vec!["card.no", "addr.zip", "other"],
    );
    let out = r.event(&event).unwrap();
    assert!(!out.emptied);
    let d = out.event.to_document().unwrap();
    let u = d.get_document("updateDescription").unwrap();
    assert_eq!(
        u.get_document("updatedFields").unwrap(),
        &doc! { "addr.postcode": "z", "items.2.secret": "****", "items.2.n": 1,
        "addr": { "postcode": "y", "city": "c" }, "name": "n" }
    );
    let removed: Vec<&str> = u
        .get_array("removedFields")
        .unwrap()
        .iter()
        .filter_map(|b| b.as_str())
        .collect();
    assert_eq!(removed, ["addr.postcode", "other"]);
    assert!(u.get_array("truncatedArrays").unwrap().is_empty());
    assert_eq!(d.get_document("documentKey").unwrap(), &doc! { "_id": 1 });
}

#[test]
fn an_update_of_excluded_fields_only_is_emptied() {
    let r = rewriter("exclude = [\"secret\"]");
    let only = update_event(doc! { "secret.a": 1 }, vec!["secret"]);
    let event = r.event(&only).unwrap();
    // truncatedArrays names card.history, which is kept: not emptied
    assert!(!event.emptied);
    let r = rewriter("exclude = [\"secret\", \"card\"]");
    assert!(r.event(&only).unwrap().emptied);
    let touched = update_event(doc! { "secret.a": 1, "x": 2 }, vec![]);
    assert!(!r.event(&touched).unwrap().emptied);
}

#[test]
fn rules_that_would_break_the_key_or_do_nothing_are_refused() {
    for (rules, field, phrase) in [
        ("exclude = [\"_id\"]", "exclude[0]", "`_id`"),
        ("mask = [\"_id.a\"]", "mask[0]", "`_id`"),
        ("exclude = [\"a..b\"]", "exclude[0]", "not a field path"),
        ("exclude = [\"$a\"]", "exclude[0]", "`$`"),
        (
            "exclude = [\"a\"]\nmask = [\"a\"]",
            "mask[0]",
            "already has a rule",
        ),
        (
            "exclude = [\"a\"]\nmask = [\"a.b\"]",
            "mask[0]",
            "under \"a\"",
        ),
        (
            "mask = [\"a.b\"]\nexclude = [\"a\"]",
            "mask[0]",
            "under \"a\"",
        ),
        (
            "exclude = [\"a.b\"]\nmask = [\"a\"]",
            "mask[0]",
            "sit under",
        ),
        (
            "include = [\"a\"]\nexclude = [\"b\"]",
            "exclude",
            "cannot be combined",
        ),
        (
            "include = [\"a\"]\nmask = [\"b\"]",
            "mask[0]",
            "not at or under an `include`",
        ),
        (
            "rename = { \"a\" = \"b.c\" }",
            "rename.\"a\"",
            "without dots",
        ),
        (
            "truncate = { \"a\" = 0 }",
            "truncate.\"a\"",
            "at least 1 byte",
        ),
        ("hash = [\"a\"]", "hash", "needs a key"),
        (
            "hash = [\"a\"]\nhash_key = \"short\"",
            "hash_key",
            "at least 16",
        ),
        (
            "hash = [\"a\"]\nhash_key_env = \"MKB_TEST_UNSET_KEY\"",
            "hash_key_env",
            "not set",
        ),
    ] {
        let (f, reason) = refused(rules);
        assert_eq!(
            f,
            format!("pipelines[0].fields.{field}"),
            "{rules}: {reason}"
        );
        assert!(reason.contains(phrase), "{rules}: {reason}");
    }
}

#[test]
fn a_rule_on_a_routed_field_is_refused() {
    let text = "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                [[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n\
                [pipelines.routing]\ntopic = \"o.${fullDocument.region}\"\ndefault_topic = \"o\"\n\
                [pipelines.fields]\nhash_key = \"0123456789abcdef\"\nhash = [\"region\"]\n";
    match crate::config::Config::from_toml(text, std::iter::empty()) {
        Err(crate::error::BridgeError::Config { field, reason }) => {
            assert_eq!(field, "pipelines[0].fields.hash[0]");
            assert!(reason.contains("routes or keys by"), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_key_from_the_environment_is_a_secret_never_debug_printed() {
    let text = "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
                [[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n\
                [pipelines.fields]\nhash_key_env = \"MKB_K\"\nhash = [\"e\"]\n";
    let env = [("MKB_K".to_owned(), "a-key-of-sixteen-bytes".to_owned())];
    let config = crate::config::Config::from_toml(text, env).expect("valid");
    assert!(
        config
            .secrets()
            .contains(&"a-key-of-sixteen-bytes".to_owned())
    );
    assert!(!format!("{config:?}").contains("a-key-of-sixteen-bytes"));
    let inline = text.replace(
        "hash_key_env = \"MKB_K\"",
        "hash_key = \"inline-key-16-bytes\"",
    );
    let config = crate::config::Config::from_toml(&inline, std::iter::empty()).expect("valid");
    assert!(!format!("{config:?}").contains("inline-key-16-bytes"));
}

#[test]
fn a_rule_on_a_shard_key_field_is_found_with_its_rule() {
    use crate::config::fields::shard_key_conflict;
    let p = PipelineConfig::for_test(
        "database = \"d\"\n[pipelines.fields]\nexclude = [\"region.code\", \"x\"]",
    );
    let f = p.fields.as_ref().unwrap();
    let key = |k: &[&str]| k.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        shard_key_conflict(f, &key(&["region", "_id"])),
        Some(("exclude[0]".to_owned(), "region".to_owned()))
    );
    assert_eq!(shard_key_conflict(f, &key(&["tenant", "_id"])), None);
    let p = PipelineConfig::for_test("database = \"d\"\n[pipelines.fields]\ninclude = [\"name\"]");
    assert_eq!(
        shard_key_conflict(p.fields.as_ref().unwrap(), &key(&["tenant"])),
        Some(("include".to_owned(), "tenant".to_owned()))
    );
}

#[test]
fn the_example_configurations_fields_block_is_valid_once_uncommented() {
    let block = crate::config::tests::example_block("# [pipelines.fields]", "# [pipelines.unwrap]");
    let text = format!(
        "[mongodb]\nuri = \"mongodb://h:1\"\n[kafka]\nbootstrap_servers = \"h:1\"\n\
         [[pipelines]]\nname = \"p\"\ndatabase = \"d\"\n{block}"
    );
    let env = [("PEOPLE_HASH_KEY".to_owned(), KEY.to_owned())];
    let config = crate::config::Config::from_toml(&text, env).expect("the block loads");
    let f = config.pipelines[0].fields.as_ref().expect("fields");
    assert!(
        !f.exclude.is_empty() && !f.hash.is_empty() && !f.truncate.is_empty(),
        "{block}"
    );
}

#[test]
fn an_included_field_can_also_be_masked_hashed_truncated_or_renamed() {
    let out = rewrite(
        "include = [\"email\", \"ssn\", \"bio\", \"zip\"]\nhash = [\"email\"]\nmask = [\"ssn\"]\n\
         truncate = { \"bio\" = 2 }\nrename = { \"zip\" = \"postcode\" }",
        doc! { "_id": 1, "email": "a@b", "ssn": "1", "bio": "abcd", "zip": "75", "other": 2 },
    );
    assert_eq!(out.get_str("ssn"), Ok("****"));
    assert_eq!(out.get_str("bio"), Ok("ab"));
    assert_eq!(out.get_str("postcode"), Ok("75"));
    assert_eq!(out.get_str("email").map(str::len), Ok(64), "{out}");
    assert!(!out.contains_key("other"), "{out}");
    let (field, reason) = refused("include = [\"a\"]\nexclude = [\"a\"]");
    assert_eq!(field, "pipelines[0].fields.exclude[0]");
    assert!(reason.contains("already has a rule (include)"), "{reason}");
}

#[test]
fn a_rename_never_writes_a_name_twice_nor_slips_past_another_rule() {
    for (rules, phrase) in [
        ("rename = { \"a\" = \"_id\" }", "onto `_id`"),
        (
            "rename = { \"b\" = \"c\", \"d\" = \"c\" }",
            "also the new name",
        ),
        (
            "rename = { \"f\" = \"g\" }\nmask = [\"g\"]",
            "put the rule on \"f\"",
        ),
        (
            "rename = { \"e.x\" = \"y\" }\nexclude = [\"e.y\"]",
            "put the rule on \"e.x\"",
        ),
        ("rename = { \"a\" = \"a\" }", "to itself"),
    ] {
        let (field, reason) = refused(rules);
        assert!(field.contains("rename."), "{rules}: {field}");
        assert!(reason.contains(phrase), "{rules}: {reason}");
    }
    // A swap is fine; a document that has the new name already is refused when rewritten.
    let swapped = rewrite(
        "rename = { \"h\" = \"i\", \"i\" = \"h\" }",
        doc! { "_id": 1, "h": "H", "i": "I" },
    );
    assert_eq!(swapped, doc! { "_id": 1, "i": "H", "h": "I" });
    let twice = rewriter("rename = { \"b\" = \"c\" }")
        .document(&raw(doc! { "_id": 1, "b": 1, "c": 2 }))
        .expect_err("c twice");
    assert!(twice.to_string().contains("\"c\" twice"), "{twice}");
    let update = doc! { "updatedFields": { "b": 1, "c": 2 }, "removedFields": [] };
    let event = raw(doc! { "operationType": "update", "updateDescription": update });
    assert!(
        rewriter("rename = { \"b\" = \"c\" }")
            .event(&event)
            .is_err()
    );
}
