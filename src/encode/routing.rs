//! Routing (`[pipelines.routing]`, README "Routing"): an event's topic from a namespace
//! pattern's template or a document field, and its key from a document field. The settings
//! and their rules are in `config/routing.rs`, which lists the feature's pieces.
//!
//! Which topic, in order: the first `[[pipelines.routing.namespaces]]` entry whose glob or
//! regex matches the event's namespace (`db.coll`, or `db` for a database event), then
//! `[pipelines.routing] topic`, then the pipeline's usual topic ([`super::topics`]). A template
//! that cannot be filled (a field missing, null, not a string or an integer, or not a topic
//! name; `${coll}` for a database event) sends the event to `default_topic`, or without one (a
//! template of namespace parts only) to the usual topic. An event without a namespace (an
//! `invalidate`) goes to `default_topic` when there is one, else to the usual topic.
//!
//! Which key: with `key_field`, a document event's key is `{<last segment>: value}` of that
//! field (a delete's from its pre-image when `fullDocument` is absent), in the pipeline's
//! `key_format`; an event without the field keeps its `documentKey` key. Events without a
//! `documentKey` (drop, rename, …) keep their namespace key.
//!
//! Invariants: a pipeline without routing has no [`Router`] (one branch per event); a topic is
//! built from a namespace's parts once per namespace in a row and from fields at most once per
//! distinct name (up to [`MADE_MAX`] names are kept, then the table starts again).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use bson::{RawBsonRef, RawDocument, RawDocumentBuf};
use prometheus::IntCounter;

use super::RecordEncoder;
use crate::config::PipelineConfig;
use crate::config::routing::{Matcher, Piece, Template, field_path, topic_char};
use crate::event::ChangeEventView;

/// Distinct topic names kept for reuse.
const MADE_MAX: usize = 10_000;

/// One pipeline's compiled routing.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    namespaces: Vec<(Matcher, Template)>,
    topic: Option<Template>,
    default_topic: Option<Arc<str>>,
    key_field: Option<Vec<String>>,
    /// The namespace of the last event and its route: the entry (or `None` for `topic`, or no
    /// route at all), and its topic when the template has no field.
    last: Option<(String, Option<Route>, Option<Arc<str>>)>,
    made: HashMap<Box<str>, Arc<str>>,
    buf: String,
    /// Events sent to `default_topic` (or the usual topic) and events keyed by `documentKey`
    /// for want of the field.
    fallbacks: Option<(IntCounter, IntCounter)>,
}

/// Which template routes a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `namespaces[i]`.
    Entry(usize),
    /// `[pipelines.routing] topic`.
    Topic,
}

impl Router {
    /// The router of `p`, `None` without `[pipelines.routing]`. Valid after
    /// [`Config::validate`](crate::config::Config::validate) (an entry that does not compile is
    /// left out).
    pub(crate) fn of(p: &PipelineConfig) -> Option<Self> {
        let r = p.routing.as_ref()?;
        let namespaces = r
            .namespaces
            .iter()
            .filter_map(|n| Some((n.matcher().ok()?, Template::parse(&n.topic).ok()?)))
            .collect();
        Some(Self {
            namespaces,
            topic: r.topic.as_deref().and_then(|t| Template::parse(t).ok()),
            default_topic: r.default_topic.as_deref().map(Arc::from),
            key_field: r.key_field.as_deref().and_then(|k| field_path(k).ok()),
            last: None,
            made: HashMap::new(),
            buf: String::new(),
            fallbacks: None,
        })
    }

    /// The topic templates with no placeholder and `default_topic`: topics known before any
    /// event.
    pub(crate) fn known_topics(&self) -> Vec<String> {
        let literal = self.namespaces.iter().map(|(_, t)| t).chain(&self.topic);
        literal
            .filter_map(|t| t.literal().map(str::to_owned))
            .chain(self.default_topic.as_deref().map(str::to_owned))
            .collect()
    }

    /// Whether `topic` is one this routing can write (every placeholder stands for one or more
    /// characters).
    pub(crate) fn could_write(&self, topic: &str) -> bool {
        let templates = self.namespaces.iter().map(|(_, t)| t).chain(&self.topic);
        self.default_topic.as_deref() == Some(topic)
            || templates.into_iter().any(|t| shape(t).is_match(topic))
    }

    /// The topic of an event (`raw` is `None` for a copied document's namespace), or `None`
    /// for the pipeline's usual topic.
    pub(crate) fn topic(
        &mut self,
        view: &ChangeEventView<'_>,
        raw: Option<&RawDocument>,
    ) -> Option<Arc<str>> {
        let Some(db) = view.db else {
            // An invalidate: no namespace to route by.
            return self.default_topic.clone();
        };
        let coll = view.coll.filter(|c| !c.is_empty());
        let (route, made) = self.route_of(db, coll);
        let route = route?;
        if made.is_some() {
            return made;
        }
        let mut buf = std::mem::take(&mut self.buf);
        let filled = self
            .template(route, db, coll)
            .is_some_and(|(template, captures)| {
                fill(&mut buf, template, (db, coll), captures.as_deref(), raw)
            });
        let topic = if filled {
            Some(self.intern(&buf))
        } else {
            self.fallback_topic()
        };
        self.buf = buf;
        topic
    }

    /// The template of `route` and, for a regex entry, its groups in namespace `db`.`coll`.
    fn template(
        &self,
        route: Route,
        db: &str,
        coll: Option<&str>,
    ) -> Option<(&Template, Option<Vec<String>>)> {
        match route {
            Route::Entry(i) => {
                let (matcher, template) = &self.namespaces[i];
                let captures = match matcher {
                    Matcher::Regex(re) => re.captures(&namespace(db, coll)).map(|c| {
                        (1..c.len())
                            .map(|g| c.get(g).map_or(String::new(), |m| m.as_str().to_owned()))
                            .collect()
                    }),
                    Matcher::Glob(_) => None,
                };
                Some((template, captures))
            }
            Route::Topic => Some((self.topic.as_ref()?, None)),
        }
    }

    /// The route of namespace `db`.`coll`, and its topic when no field is needed (cached for
    /// the last namespace).
    fn route_of(&mut self, db: &str, coll: Option<&str>) -> (Option<Route>, Option<Arc<str>>) {
        if let Some((ns, route, made)) = &self.last
            && is_namespace(ns, db, coll)
        {
            return (*route, made.clone());
        }
        let ns = namespace(db, coll);
        let route = self
            .namespaces
            .iter()
            .position(|(m, _)| match m {
                Matcher::Glob(g) => g.is_match(&ns),
                Matcher::Regex(re) => re.is_match(&ns),
            })
            .map(Route::Entry)
            .or(self.topic.as_ref().map(|_| Route::Topic));
        let made = route.and_then(|r| self.namespace_only(r, db, coll));
        self.last = Some((ns, route, made.clone()));
        (route, made)
    }

    /// The topic of `route` for a namespace when its template names no field.
    fn namespace_only(&mut self, route: Route, db: &str, coll: Option<&str>) -> Option<Arc<str>> {
        let (template, captures) = self.template(route, db, coll)?;
        if template.has_fields() {
            return None;
        }
        let mut buf = String::new();
        // One that cannot be filled is counted per event, by `topic`.
        fill(&mut buf, template, (db, coll), captures.as_deref(), None).then(|| self.intern(&buf))
    }

    /// An event whose template could not be filled: `default_topic`, or the usual topic.
    fn fallback_topic(&self) -> Option<Arc<str>> {
        if let Some((topic, _)) = &self.fallbacks {
            topic.inc();
        }
        self.default_topic.clone()
    }

    fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(topic) = self.made.get(name) {
            return Arc::clone(topic);
        }
        if self.made.len() >= MADE_MAX {
            self.made.clear();
        }
        let topic: Arc<str> = Arc::from(name);
        self.made.insert(Box::from(name), Arc::clone(&topic));
        topic
    }

    /// The key document of a document event from `key_field`, `None` without one or when the
    /// event lacks the field (it keeps its `documentKey` key).
    fn key<'a>(
        &self,
        raw: &'a RawDocument,
        view: &ChangeEventView<'a>,
    ) -> Option<Cow<'a, RawDocument>> {
        let path = self.key_field.as_ref()?;
        view.document_key?;
        let value = lookup(raw, path).or_else(|| {
            // A delete has no fullDocument: its pre-image has the field, when the pipeline
            // asks for one.
            (path[0] == "fullDocument")
                .then(|| raw.get_document("fullDocumentBeforeChange").ok())
                .flatten()
                .and_then(|before| lookup(before, &path[1..]))
        });
        let Some(value) = value.filter(|v| !matches!(v, RawBsonRef::Null | RawBsonRef::Undefined))
        else {
            if let Some((_, key)) = &self.fallbacks {
                key.inc();
            }
            return None;
        };
        let mut doc = RawDocumentBuf::new();
        doc.append(path[path.len() - 1].as_str(), value.to_raw_bson());
        Some(Cow::Owned(doc))
    }
}

/// `db.coll`, or `db` for a database event.
fn namespace(db: &str, coll: Option<&str>) -> String {
    match coll {
        Some(coll) => format!("{db}.{coll}"),
        None => db.to_owned(),
    }
}

fn is_namespace(ns: &str, db: &str, coll: Option<&str>) -> bool {
    match (ns.strip_prefix(db), coll) {
        (Some(""), None) => true,
        (Some(rest), Some(coll)) => rest.strip_prefix('.') == Some(coll),
        _ => false,
    }
}

/// The value at `path` (documents and array indexes) under `doc`.
fn lookup<'a>(doc: &'a RawDocument, path: &[String]) -> Option<RawBsonRef<'a>> {
    let (first, rest) = path.split_first()?;
    let mut value = doc.get(first).ok()??;
    for segment in rest {
        value = match value {
            RawBsonRef::Document(d) => d.get(segment).ok()??,
            RawBsonRef::Array(a) => a.get(segment.parse().ok()?).ok()??,
            _ => return None,
        };
    }
    Some(value)
}

/// Writes `template` for the event into `buf`; `false` when a piece cannot be filled.
fn fill(
    buf: &mut String,
    template: &Template,
    (db, coll): (&str, Option<&str>),
    captures: Option<&[String]>,
    raw: Option<&RawDocument>,
) -> bool {
    buf.clear();
    for piece in &template.pieces {
        let ok = match piece {
            Piece::Literal(text) => {
                buf.push_str(text);
                true
            }
            Piece::Db => part(buf, db),
            Piece::Coll => coll.is_some_and(|c| part(buf, c)),
            Piece::Capture(n) => captures
                .and_then(|c| c.get(n - 1))
                .is_some_and(|c| part(buf, c)),
            Piece::Field(path) => match raw.and_then(|raw| lookup(raw, path)) {
                Some(RawBsonRef::String(s)) => part(buf, s),
                Some(RawBsonRef::Int32(n)) => write!(buf, "{n}").is_ok(),
                Some(RawBsonRef::Int64(n)) => write!(buf, "{n}").is_ok(),
                _ => false,
            },
        };
        if !ok {
            return false;
        }
    }
    !buf.is_empty() && buf.len() <= 249 && !buf.starts_with("__")
}

/// Appends `text` when it is a non-empty run of topic-name characters.
fn part(buf: &mut String, text: &str) -> bool {
    let ok = !text.is_empty() && text.chars().all(topic_char);
    if ok {
        buf.push_str(text);
    }
    ok
}

/// A regex matching every name `template` can give.
fn shape(template: &Template) -> regex::Regex {
    let mut re = String::from("^");
    for piece in &template.pieces {
        match piece {
            Piece::Literal(text) => re.push_str(&regex::escape(text)),
            _ => re.push_str("[A-Za-z0-9._-]+"),
        }
    }
    re.push('$');
    regex::Regex::new(&re).expect("escaped literals and one character class form a valid regex")
}

impl RecordEncoder {
    /// Counts routing fallbacks: events sent to `default_topic` (or the usual topic) and
    /// events keyed by `documentKey` for want of `key_field` (no-op without routing).
    pub(crate) fn with_routing_fallbacks(mut self, topic: IntCounter, key: IntCounter) -> Self {
        if let Some(router) = self.router.as_deref_mut() {
            router.fallbacks = Some((topic, key));
        }
        self
    }

    /// The key document of an event: from `key_field` when routing sets one and the event has
    /// the field, else its `documentKey` (or namespace).
    pub(super) fn key_of<'a>(
        &self,
        raw: &'a RawDocument,
        view: &ChangeEventView<'a>,
    ) -> Cow<'a, RawDocument> {
        self.router
            .as_deref()
            .and_then(|r| r.key(raw, view))
            .unwrap_or_else(|| super::format::key_document(view, &self.pipeline))
    }
}

#[cfg(test)]
mod tests;
