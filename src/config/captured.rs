//! Which namespaces a pipeline captures: its scope, narrowed by the `$match` stages of its
//! `pipeline` that test `ns` (the change event's `{db, coll}`,
//! <https://www.mongodb.com/docs/manual/reference/change-events/>). `check` reads it to know
//! which collections need pre-/post-images.
//!
//! The reading maps a `$match` on `ns` (`{db, coll}` documents), `ns.db` and `ns.coll` (a name,
//! `$eq`, or `$in` of names), combined by the filter's implicit and, `$and` and `$or`. Every
//! other condition (`operationType`, `fullDocument.…`) narrows the events, not the
//! collections, and is left out: the result is the set of collections whose events *can* pass.
//!
//! Invariant: what cannot be mapped is said, never guessed: a condition on `ns` this reading
//! does not know (a regular expression, `$ne`, `$nin`, `$expr`, `$nor`, a stage other than
//! `$match` that touches `ns`) gives [`Uncertain`], naming it.

use std::collections::BTreeSet;

use bson::{Bson, Document};

use super::PipelineConfig;

/// A database and a collection; `None` for any.
pub type Namespace = (Option<String>, Option<String>);

/// Why the captured namespaces cannot be told: the condition, as the file writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uncertain(pub String);

impl std::fmt::Display for Uncertain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl PipelineConfig {
    /// The namespaces whose events can pass the pipeline's scope and stages, each once, in
    /// order; empty when none can. Valid after [`Config::validate`](super::Config::validate).
    ///
    /// Errors: [`Uncertain`] when a stage tests `ns` in a way that cannot be mapped.
    pub fn captured(&self) -> Result<Vec<Namespace>, Uncertain> {
        let mut set = BTreeSet::from([(self.database.clone(), self.collection.clone())]);
        for stage in self.stages() {
            match stage.get_document("$match") {
                Ok(filter) => set = meet(&set, &of_filter(filter)?),
                Err(_) if mentions_ns(&Bson::Document(stage.clone())) => {
                    return Err(uncertain("a stage other than $match touches ns", &stage));
                }
                Err(_) => {}
            }
        }
        Ok(set.into_iter().collect())
    }
}

/// Every namespace.
fn any() -> BTreeSet<Namespace> {
    BTreeSet::from([(None, None)])
}

fn uncertain(what: &str, value: &impl ToString) -> Uncertain {
    Uncertain(format!("{what}: {}", value.to_string()))
}

/// The namespaces a `$match` filter lets through.
fn of_filter(filter: &Document) -> Result<BTreeSet<Namespace>, Uncertain> {
    let mut set = any();
    for (key, value) in filter {
        let part = match key.as_str() {
            "ns" => whole(value)?,
            "ns.db" => names(key, value)?.map(|db| (Some(db), None)).collect(),
            "ns.coll" => names(key, value)?.map(|c| (None, Some(c))).collect(),
            "$and" => clauses(key, value)?
                .into_iter()
                .try_fold(any(), |set, c| Ok(meet(&set, &of_filter(&c)?)))?,
            "$or" => {
                let mut union = BTreeSet::new();
                for clause in clauses(key, value)? {
                    union.extend(of_filter(&clause)?);
                }
                union
            }
            _ if key.starts_with("ns.") || mentions_ns(value) => {
                return Err(uncertain(key, value));
            }
            _ => continue,
        };
        set = meet(&set, &part);
    }
    Ok(set)
}

/// The documents of an `$and` or `$or` array.
fn clauses(key: &str, value: &Bson) -> Result<Vec<Document>, Uncertain> {
    let Bson::Array(items) = value else {
        return Err(uncertain(key, value));
    };
    items
        .iter()
        .map(|item| {
            item.as_document()
                .cloned()
                .ok_or_else(|| uncertain(key, value))
        })
        .collect()
}

/// The names `ns.db` or `ns.coll` may equal: a string, `{$eq: s}` or `{$in: [s, …]}`.
fn names(key: &str, value: &Bson) -> Result<impl Iterator<Item = String>, Uncertain> {
    let list = match value {
        Bson::String(s) => vec![s.clone()],
        Bson::Document(d) if d.len() == 1 => match d.iter().next() {
            Some((op, Bson::String(s))) if op == "$eq" => vec![s.clone()],
            Some((op, Bson::Array(items))) if op == "$in" => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| uncertain(key, value))?,
            _ => return Err(uncertain(key, value)),
        },
        _ => return Err(uncertain(key, value)),
    };
    Ok(list.into_iter())
}

/// The namespaces an equality on the whole `ns` lets through: `{db, coll}`, `{$eq: …}` or
/// `{$in: […]}` of them. MongoDB compares embedded documents field by field in order, so only
/// `{db, coll}` in that order can equal an event's `ns`; `{db}` alone equals the `ns` of
/// database events only, which name no collection.
fn whole(value: &Bson) -> Result<BTreeSet<Namespace>, Uncertain> {
    let one = |v: &Bson| -> Result<Option<Namespace>, Uncertain> {
        let Bson::Document(d) = v else {
            return Err(uncertain("ns", value));
        };
        let keys: Vec<&str> = d.keys().map(String::as_str).collect();
        match (keys.as_slice(), d.get_str("db"), d.get_str("coll")) {
            (["db", "coll"], Ok(db), Ok(coll)) => Ok(Some((Some(db.into()), Some(coll.into())))),
            (["db"], Ok(_), _) => Ok(None),
            (["coll", "db"], ..) => Err(uncertain(
                "ns (MongoDB compares {coll, db} field by field in order: it equals no event's \
                 ns, which is {db, coll})",
                value,
            )),
            _ => Err(uncertain("ns", value)),
        }
    };
    let list = match value {
        Bson::Document(d) if d.keys().all(|k| !k.starts_with('$')) => vec![value.clone()],
        Bson::Document(d) if d.len() == 1 => match d.iter().next() {
            Some((op, v)) if op == "$eq" => vec![v.clone()],
            Some((op, Bson::Array(items))) if op == "$in" => items.clone(),
            _ => return Err(uncertain("ns", value)),
        },
        _ => return Err(uncertain("ns", value)),
    };
    let mut set = BTreeSet::new();
    for item in &list {
        set.extend(one(item)?);
    }
    Ok(set)
}

/// The namespaces in both `a` and `b`.
fn meet(a: &BTreeSet<Namespace>, b: &BTreeSet<Namespace>) -> BTreeSet<Namespace> {
    fn both(x: &Option<String>, y: &Option<String>) -> Option<Option<String>> {
        match (x, y) {
            (None, other) | (other, None) => Some(other.clone()),
            (Some(x), Some(y)) => (x == y).then(|| Some(x.clone())),
        }
    }
    a.iter()
        .flat_map(|(db_a, coll_a)| {
            b.iter()
                .filter_map(move |(db_b, coll_b)| Some((both(db_a, db_b)?, both(coll_a, coll_b)?)))
        })
        .collect()
}

/// Whether `value` names the `ns` field: a key `ns` or `ns.…`, or a field path `$ns…`.
fn mentions_ns(value: &Bson) -> bool {
    match value {
        Bson::Document(d) => d
            .iter()
            .any(|(k, v)| k == "ns" || k.starts_with("ns.") || mentions_ns(v)),
        Bson::Array(items) => items.iter().any(mentions_ns),
        Bson::String(s) => s == "$ns" || s.starts_with("$ns."),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(scope: &str, stages: &str) -> Result<Vec<Namespace>, Uncertain> {
        let body = format!("{scope}pipeline = '''{stages}'''\n");
        PipelineConfig::for_test(&body).captured()
    }

    fn ns(db: Option<&str>, coll: Option<&str>) -> Namespace {
        (db.map(str::to_owned), coll.map(str::to_owned))
    }

    #[test]
    fn a_database_scope_is_narrowed_to_the_collections_its_match_names() {
        let db = "database = \"shop\"\n";
        let both = vec![
            ns(Some("shop"), Some("orders")),
            ns(Some("shop"), Some("payments")),
        ];
        let named = r#"[{"$match": {"ns.coll": {"$in": ["orders", "payments"]}}}]"#;
        assert_eq!(captured(db, named), Ok(both.clone()));
        let or = r#"[{"$match": {"$or": [{"ns.coll": "orders"}, {"ns.coll": {"$eq": "payments"}}],
                     "operationType": {"$ne": "insert"}}}]"#;
        assert_eq!(captured(db, or), Ok(both));
        // Another database's name captures nothing: the scope and the filter meet.
        let other = r#"[{"$match": {"ns": {"db": "crm", "coll": "orders"}}}]"#;
        assert_eq!(captured(db, other), Ok(vec![]));
        // Conditions on other fields narrow events, not collections.
        let ops = r#"[{"$match": {"operationType": {"$in": ["update", "invalidate"]}}}]"#;
        assert_eq!(captured(db, ops), Ok(vec![ns(Some("shop"), None)]));
    }

    #[test]
    fn a_deployment_scope_maps_whole_namespaces_and_databases() {
        let list = r#"[{"$match": {"ns": {"$in": [{"db": "shop", "coll": "orders"},
                       {"db": "shop", "coll": "payments"}, {"db": "crm"}]}}}]"#;
        assert_eq!(
            captured("", list),
            Ok(vec![
                ns(Some("shop"), Some("orders")),
                ns(Some("shop"), Some("payments")),
            ])
        );
        let and = r#"[{"$match": {"$and": [{"ns.db": "shop"}, {"ns.coll": "orders"}]}},
                      {"$project": {"fullDocument.secret": 0}}]"#;
        assert_eq!(
            captured("", and),
            Ok(vec![ns(Some("shop"), Some("orders"))])
        );
        assert_eq!(captured("", "[]"), Ok(vec![ns(None, None)]));
    }

    #[test]
    fn what_cannot_be_mapped_is_named() {
        for (stages, named) in [
            (
                r#"[{"$match": {"ns.coll": {"$regex": "^ord"}}}]"#,
                "ns.coll",
            ),
            (
                r#"[{"$match": {"ns.coll": {"$nin": ["audit"]}}}]"#,
                "ns.coll",
            ),
            (
                r#"[{"$match": {"$expr": {"$eq": ["$ns.coll", "x"]}}}]"#,
                "$expr",
            ),
            (r#"[{"$match": {"$nor": [{"ns.coll": "audit"}]}}]"#, "$nor"),
            (r#"[{"$addFields": {"ns.coll": "x"}}]"#, "other than $match"),
            (
                r#"[{"$match": {"ns": {"coll": "orders", "db": "shop"}}}]"#,
                "in order",
            ),
        ] {
            let found = captured("", stages).expect_err(stages);
            assert!(found.0.contains(named), "{stages}: {found}");
        }
    }
}
