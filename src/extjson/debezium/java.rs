//! The Java text rules under Debezium 3.6.3's records: how the MongoDB Java driver's JSON
//! writer (driver 5.9.2 on JDK 17) escapes strings and prints doubles, and how Kafka's
//! `JsonConverter` (Jackson) quotes the strings it embeds in a record.
//!
//! # Invariants
//!
//! * [`write_java_string`] decides per UTF-16 code unit, as the Java writer does: `"` `\` and
//!   the five short escapes (`\b \t \n \f \r`), raw for the units in
//!   [`RAW_BMP`](super::java_chars::RAW_BMP), and `\uxxxx` (lower-case hex) for every other
//!   unit. A supplementary character is therefore always two escapes (`\ud83d\ude00`), and the
//!   output is pure ASCII except for raw BMP characters.
//! * [`write_jackson_string`] is Jackson's default: `"` `\`, short escapes for the five,
//!   `\u00XX` (upper-case hex) for the other controls, each surrogate of a supplementary
//!   character as `\uXXXX` (upper-case, Jackson's UTF-8 generator does not combine them), and
//!   everything else raw, including U+007F and U+2028.
//! * [`write_double`] prints JDK 17's `Double.toString` ([`super::java_double`]) with a `+` on
//!   non-negative exponents (`1.0E+20`, `1.5E-7`), as the driver's writer does; NaN and the
//!   infinities are the bare words `NaN`, `Infinity`, `-Infinity` (not JSON; the strict
//!   writer writes them so) unless the caller wraps them.

use super::java_chars::RAW_BMP;
use super::java_double::java_digits;

const HEX_LOWER: &[u8; 16] = b"0123456789abcdef";
const HEX_UPPER: &[u8; 16] = b"0123456789ABCDEF";

/// Whether the Java writer copies this UTF-16 unit raw (it has no escape of its own).
pub(super) fn java_raw(unit: u16) -> bool {
    if unit < 0x80 {
        return (0x20..0x7F).contains(&unit) && unit != u16::from(b'"') && unit != u16::from(b'\\');
    }
    RAW_BMP
        .binary_search_by(|&(start, end)| {
            if end < unit {
                std::cmp::Ordering::Less
            } else if start > unit {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// The short escape of a unit, if it has one (both writers share these).
fn short_escape(unit: u16) -> Option<&'static str> {
    Some(match unit {
        0x22 => "\\\"",
        0x5C => "\\\\",
        0x08 => "\\b",
        0x09 => "\\t",
        0x0A => "\\n",
        0x0C => "\\f",
        0x0D => "\\r",
        _ => return None,
    })
}

fn push_unit_escape(out: &mut String, unit: u16, hex: &[u8; 16]) {
    out.push_str("\\u");
    for shift in [12, 8, 4, 0] {
        out.push(char::from(hex[usize::from((unit >> shift) & 0xF)]));
    }
}

/// Appends `s` as the Java writer quotes a string: `"…"` with its escapes.
pub(super) fn write_java_string(out: &mut String, s: &str) {
    write_quoted(
        out,
        s,
        |c| u16::try_from(u32::from(c)).is_ok_and(java_raw),
        HEX_LOWER,
    );
}

/// Appends `s` quoted: characters `raw` accepts are copied (in runs), every other one is
/// escaped UTF-16 unit by unit, with its short escape when it has one, else `\uXXXX` in `hex`.
fn write_quoted(out: &mut String, s: &str, raw: impl Fn(char) -> bool, hex: &[u8; 16]) {
    out.reserve(s.len() + 2);
    out.push('"');
    let mut run_start = 0;
    for (at, c) in s.char_indices() {
        if raw(c) {
            continue;
        }
        out.push_str(&s[run_start..at]);
        run_start = at + c.len_utf8();
        let mut units = [0u16; 2];
        for &unit in c.encode_utf16(&mut units).iter() {
            match short_escape(unit) {
                Some(escape) => out.push_str(escape),
                None => push_unit_escape(out, unit, hex),
            }
        }
    }
    out.push_str(&s[run_start..]);
    out.push('"');
}

/// Appends UTF-16 `units` (which may hold unpaired surrogates) as the Java writer quotes them.
pub(super) fn write_java_units(out: &mut String, units: &[u16]) {
    out.push('"');
    for &unit in units {
        if let Some(escape) = short_escape(unit) {
            out.push_str(escape);
        } else if let Some(c) = char::from_u32(u32::from(unit)).filter(|_| java_raw(unit)) {
            out.push(c);
        } else {
            push_unit_escape(out, unit, HEX_LOWER);
        }
    }
    out.push('"');
}

/// Appends `s` as Kafka's `JsonConverter` (Jackson, default settings) writes a JSON string:
/// the form of the key's `id`, of the value's `after`/`updatedFields`/`before` strings and of
/// the `removedFields` names.
///
/// ```
/// let mut out = String::new();
/// mongo_kafka_bridge::extjson::debezium::write_jackson_string(&mut out, "q\"\\\t\u{1}\u{7f}é😀");
/// assert_eq!(out, "\"q\\\"\\\\\\t\\u0001\u{7f}é\\uD83D\\uDE00\"");
/// ```
pub fn write_jackson_string(out: &mut String, s: &str) {
    let raw = |c: char| {
        let code = u32::from(c);
        code >= 0x20 && code != 0x22 && code != 0x5C && code <= 0xFFFF
    };
    write_quoted(out, s, raw, HEX_UPPER);
}

/// JDK 17's `Double.toString(v)`: `7.0`, `-0.0`, `0.001`, `9.99E-4`, `1.0E20`,
/// `1.9999999999999998E23`, `NaN`, `Infinity`.
///
/// ```
/// use mongo_kafka_bridge::extjson::debezium::java_double_to_string;
///
/// assert_eq!(java_double_to_string(7.0), "7.0");
/// assert_eq!(java_double_to_string(1e20), "1.0E20");
/// assert_eq!(java_double_to_string(2e23), "1.9999999999999998E23");
/// assert_eq!(java_double_to_string(123456789.0), "1.23456789E8");
/// ```
pub fn java_double_to_string(v: f64) -> String {
    let mut out = String::new();
    write_java_double(&mut out, v, false);
    out
}

/// Appends a double as the driver's JSON writer does: [`java_double_to_string`] with `E+` for
/// non-negative exponents.
pub(super) fn write_double(out: &mut String, v: f64) {
    write_java_double(out, v, true);
}

fn write_java_double(out: &mut String, v: f64, plus_exponent: bool) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_sign_negative() {
        out.push('-');
    }
    if v.is_infinite() {
        out.push_str("Infinity");
        return;
    }
    if v == 0.0 {
        out.push_str("0.0");
        return;
    }
    let decimal = java_digits(v.to_bits());
    let digits = decimal.digits();
    let exponent = decimal.exponent();
    let push_digits = |out: &mut String, d: &[u8]| {
        out.extend(d.iter().map(|&b| char::from(b)));
    };
    if exponent > 0 && exponent < 8 {
        // Plain: ddd.ddd, with ".0" when nothing follows the point.
        let int_len = digits.len().min(exponent as usize);
        push_digits(out, &digits[..int_len]);
        if int_len < exponent as usize {
            out.extend(std::iter::repeat_n('0', exponent as usize - int_len));
            out.push_str(".0");
        } else if int_len < digits.len() {
            out.push('.');
            push_digits(out, &digits[int_len..]);
        } else {
            out.push_str(".0");
        }
    } else if exponent <= 0 && exponent > -3 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-exponent) as usize));
        push_digits(out, digits);
    } else {
        push_digits(out, &digits[..1]);
        out.push('.');
        if digits.len() > 1 {
            push_digits(out, &digits[1..]);
        } else {
            out.push('0');
        }
        out.push('E');
        let e = exponent - 1;
        if e < 0 {
            out.push('-');
        } else if plus_exponent {
            out.push('+');
        }
        out.push_str(&e.unsigned_abs().to_string());
    }
}
