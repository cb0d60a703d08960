//! MongoDB's comparison order of BSON values, as a copy's `_id`s must follow it: the check that
//! a copy paged with `{_id: {$gt: last}}` read what its index order promised.
//!
//! Invariant checked (`copy.rs`): the `_id`s a namespace's copy reads strictly increase by
//! MongoDB's comparison rules, within each batch and from the last `_id` of one batch to the
//! first of the next (also across type brackets and after a resume). A server whose `_id`
//! index orders values otherwise than its `$gt` compares them would make `$gt` paging skip
//! documents; the copy stops instead of finishing short.
//!
//! The rules (<https://www.mongodb.com/docs/manual/reference/bson-type-comparison-order/>, and
//! MongoDB's `canonicalizeBSONType`): first the type's rank (MinKey, undefined, null, numbers,
//! strings and symbols, documents, arrays, binary data, ObjectId, booleans, dates, timestamps,
//! regular expressions, DBPointer, JavaScript, JavaScript with scope, MaxKey); then, within a
//! rank: numbers by numeric value across int, long, double and decimal (NaN below every other
//! number); strings by the simple binary comparison (UTF-8 bytes); documents and arrays pair
//! by pair in their order (the pair's type rank, then its field name, then its value; a
//! document that ends first is less); binary data by length, then subtype, then bytes; the
//! rest by value. [`compare`] answers `None` when it cannot decide exactly (strings under a
//! non-simple collation, two decimals that only differ beyond a double's precision,
//! DBPointer and JavaScript-with-scope values): the check then trusts the server for that pair.

use std::cmp::Ordering;

use bson::{Decimal128, RawBsonRef, RawDocument};

/// How string values compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strings {
    /// The simple binary comparison (no collation, or `locale: "simple"`).
    Binary,
    /// The collection has a non-simple default collation: its order is the collation's, which
    /// this module does not implement; string pairs are not decided.
    Unchecked,
}

/// The type's rank in MongoDB's comparison order (lower sorts first).
fn rank(v: RawBsonRef<'_>) -> u8 {
    match v {
        RawBsonRef::MinKey => 0,
        RawBsonRef::Undefined => 1,
        RawBsonRef::Null => 2,
        RawBsonRef::Int32(_)
        | RawBsonRef::Int64(_)
        | RawBsonRef::Double(_)
        | RawBsonRef::Decimal128(_) => 3,
        RawBsonRef::String(_) | RawBsonRef::Symbol(_) => 4,
        RawBsonRef::Document(_) => 5,
        RawBsonRef::Array(_) => 6,
        RawBsonRef::Binary(_) => 7,
        RawBsonRef::ObjectId(_) => 8,
        RawBsonRef::Boolean(_) => 9,
        RawBsonRef::DateTime(_) => 10,
        RawBsonRef::Timestamp(_) => 11,
        RawBsonRef::RegularExpression(_) => 12,
        RawBsonRef::DbPointer(_) => 13,
        RawBsonRef::JavaScriptCode(_) => 14,
        RawBsonRef::JavaScriptCodeWithScope(_) => 15,
        RawBsonRef::MaxKey => 16,
    }
}

/// `a` against `b` by MongoDB's comparison rules; `None` when this module cannot decide.
pub(crate) fn compare(a: RawBsonRef<'_>, b: RawBsonRef<'_>, strings: Strings) -> Option<Ordering> {
    use RawBsonRef as R;
    let by_rank = rank(a).cmp(&rank(b));
    if by_rank != Ordering::Equal {
        return Some(by_rank);
    }
    Some(match (a, b) {
        (R::String(x) | R::Symbol(x), R::String(y) | R::Symbol(y)) => match strings {
            Strings::Binary => x.as_bytes().cmp(y.as_bytes()),
            Strings::Unchecked => return None,
        },
        (R::Document(x), R::Document(y)) => return pairs(x, y, strings),
        (R::Array(x), R::Array(y)) => return elements(x, y, strings),
        (R::Binary(x), R::Binary(y)) => (x.bytes.len(), u8::from(x.subtype), x.bytes).cmp(&(
            y.bytes.len(),
            u8::from(y.subtype),
            y.bytes,
        )),
        (R::ObjectId(x), R::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (R::Boolean(x), R::Boolean(y)) => x.cmp(&y),
        (R::DateTime(x), R::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (R::Timestamp(x), R::Timestamp(y)) => (x.time, x.increment).cmp(&(y.time, y.increment)),
        (R::RegularExpression(x), R::RegularExpression(y)) => {
            (x.pattern, x.options).cmp(&(y.pattern, y.options))
        }
        (R::JavaScriptCode(x), R::JavaScriptCode(y)) => x.as_bytes().cmp(y.as_bytes()),
        (R::DbPointer(_), _) | (R::JavaScriptCodeWithScope(_), _) => return None,
        _ if by_rank == Ordering::Equal && rank(a) == 3 => return numbers(a, b),
        // MinKey, undefined, null and MaxKey: one value each.
        _ => Ordering::Equal,
    })
}

/// Two documents (or arrays) pair by pair.
fn pairs(x: &RawDocument, y: &RawDocument, strings: Strings) -> Option<Ordering> {
    let (mut xs, mut ys) = (x.iter(), y.iter());
    loop {
        let (a, b) = match (xs.next(), ys.next()) {
            (None, None) => return Some(Ordering::Equal),
            (None, Some(_)) => return Some(Ordering::Less),
            (Some(_), None) => return Some(Ordering::Greater),
            (Some(a), Some(b)) => (a.ok()?, b.ok()?),
        };
        let order = rank(a.1)
            .cmp(&rank(b.1))
            .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()));
        let order = match order {
            Ordering::Equal => compare(a.1, b.1, strings)?,
            decided => decided,
        };
        if order != Ordering::Equal {
            return Some(order);
        }
    }
}

/// Two arrays element by element (as documents whose field names are their indexes).
fn elements(x: &bson::RawArray, y: &bson::RawArray, strings: Strings) -> Option<Ordering> {
    let (mut xs, mut ys) = (x.into_iter(), y.into_iter());
    loop {
        let (a, b) = match (xs.next(), ys.next()) {
            (None, None) => return Some(Ordering::Equal),
            (None, Some(_)) => return Some(Ordering::Less),
            (Some(_), None) => return Some(Ordering::Greater),
            (Some(a), Some(b)) => (a.ok()?, b.ok()?),
        };
        let order = match rank(a).cmp(&rank(b)) {
            Ordering::Equal => compare(a, b, strings)?,
            decided => decided,
        };
        if order != Ordering::Equal {
            return Some(order);
        }
    }
}

/// A number, as exactly as needed to compare it.
enum Number {
    Int(i64),
    Double(f64),
}

fn number(v: RawBsonRef<'_>) -> Option<(Number, bool)> {
    Some(match v {
        RawBsonRef::Int32(i) => (Number::Int(i64::from(i)), false),
        RawBsonRef::Int64(i) => (Number::Int(i), false),
        RawBsonRef::Double(d) => (Number::Double(d), false),
        RawBsonRef::Decimal128(d) => (Number::Double(decimal(d)?), true),
        _ => return None,
    })
}

/// A decimal as the nearest double (`None` if its text does not parse).
fn decimal(d: Decimal128) -> Option<f64> {
    d.to_string().parse().ok()
}

/// Two numbers by value; NaN is equal to NaN and below every other number. Two values of
/// which one is a decimal and that are equal as doubles are not decided.
fn numbers(a: RawBsonRef<'_>, b: RawBsonRef<'_>) -> Option<Ordering> {
    let ((x, x_dec), (y, y_dec)) = (number(a)?, number(b)?);
    let order = match (x, y) {
        (Number::Int(i), Number::Int(j)) => i.cmp(&j),
        (Number::Double(f), Number::Double(g)) => doubles(f, g),
        (Number::Int(i), Number::Double(g)) => int_double(i, g),
        (Number::Double(f), Number::Int(j)) => int_double(j, f).reverse(),
    };
    (order != Ordering::Equal || !(x_dec || y_dec)).then_some(order)
}

fn doubles(f: f64, g: f64) -> Ordering {
    match (f.is_nan(), g.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => f.partial_cmp(&g).unwrap_or(Ordering::Equal),
    }
}

/// `i` against `g` exactly (no rounding of `i` to a double).
fn int_double(i: i64, g: f64) -> Ordering {
    // 2^63 as a double; every double at or above it exceeds any i64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if g.is_nan() {
        return Ordering::Greater;
    }
    if g >= TWO_63 {
        return Ordering::Less;
    }
    if g < -TWO_63 {
        return Ordering::Greater;
    }
    let whole = g.trunc();
    // In range: -2^63 <= whole < 2^63, so the conversion is exact.
    let by_whole = i.cmp(&(whole as i64));
    by_whole.then_with(|| 0.0_f64.partial_cmp(&(g - whole)).unwrap_or(Ordering::Equal))
}

/// Whether `next` may follow `previous` in a copy: it is strictly greater, or this module
/// cannot decide (see [`compare`]).
pub(crate) fn follows(previous: RawBsonRef<'_>, next: RawBsonRef<'_>, strings: Strings) -> bool {
    compare(previous, next, strings).is_none_or(|o| o == Ordering::Less)
}

#[cfg(test)]
mod tests;
