//! Allocation-free text and number formatters for the Extended JSON transcoder: JSON string
//! escaping (with U+FFFD for invalid UTF-8), integers, shortest round-trip doubles, RFC 3339
//! dates, base64 and the Decimal128 to-string algorithm. Everything appends to a `Vec<u8>`
//! and cannot fail.

pub(super) const HEX: &[u8; 16] = b"0123456789abcdef";

pub(super) fn hex_byte(b: u8) -> [u8; 2] {
    [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0x0F)]]
}

/// For each byte: 0 if it may appear verbatim inside a JSON string, else the character that
/// follows the backslash in its escape (`u` for the `\u00XX` form).
pub(super) static ESCAPE: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = b'u';
        i += 1;
    }
    t[0x08] = b'b';
    t[0x09] = b't';
    t[0x0A] = b'n';
    t[0x0C] = b'f';
    t[0x0D] = b'r';
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t
};

/// Writes `bytes` as a quoted JSON string. Valid UTF-8 is copied verbatim except for `"`,
/// `\` and control characters (escaped); invalid sequences become U+FFFD. Returns whether
/// `bytes` was valid UTF-8 (nothing was replaced).
pub(super) fn write_json_string(out: &mut Vec<u8>, bytes: &[u8]) -> bool {
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let valid = std::str::from_utf8(bytes).is_ok();
    if valid {
        escape_utf8(out, bytes);
    } else {
        for chunk in bytes.utf8_chunks() {
            escape_utf8(out, chunk.valid().as_bytes());
            if !chunk.invalid().is_empty() {
                out.extend_from_slice("\u{FFFD}".as_bytes());
            }
        }
    }
    out.push(b'"');
    valid
}

/// Whether any byte of the 8-byte word `w` is `"`, `\` or below 0x20 (exact, not a
/// heuristic: the classic "has zero byte" / "has byte less than" bit tricks).
#[inline]
pub(super) fn word_needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH != 0;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0;
    below_space || has_zero(w ^ (ONES * u64::from(b'"'))) || has_zero(w ^ (ONES * u64::from(b'\\')))
}

/// Escapes already-valid UTF-8 (escapes are all ASCII, so multi-byte sequences pass intact).
pub(super) fn escape_utf8(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Skip 8 bytes at a time while none of them needs escaping.
        if let Some(word) = bytes.get(i..i + 8) {
            let w = u64::from_le_bytes(word.try_into().expect("invariant: 8-byte slice"));
            if !word_needs_escape(w) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let esc = ESCAPE[usize::from(b)];
        if esc != 0 {
            out.extend_from_slice(&bytes[start..i]);
            if esc == b'u' {
                let h = hex_byte(b);
                out.extend_from_slice(&[b'\\', b'u', b'0', b'0', h[0], h[1]]);
            } else {
                out.extend_from_slice(&[b'\\', esc]);
            }
            start = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[start..]);
}

/// Two ASCII digits for each of 0..100.
pub(super) static DIGITS2: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Writes the decimal digits of `v` into the tail of `buf`; returns the start index.
pub(super) fn format_u64(mut v: u64, buf: &mut [u8; 20]) -> usize {
    let mut i = buf.len();
    while v >= 100 {
        let d = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGITS2[d..d + 2]);
    }
    if v >= 10 {
        let d = v as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGITS2[d..d + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + v as u8;
    }
    i
}

pub(super) fn write_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    let mut buf = [0u8; 20];
    let start = format_u64(v.unsigned_abs(), &mut buf);
    out.extend_from_slice(&buf[start..]);
}

/// Writes `n` (< 10^width) zero-padded to `width` digits.
pub(super) fn write_padded(out: &mut Vec<u8>, n: u64, width: usize) {
    let mut buf = [0u8; 20];
    let start = format_u64(n, &mut buf);
    for _ in (buf.len() - start)..width {
        out.push(b'0');
    }
    out.extend_from_slice(&buf[start..]);
}

/// A fixed-capacity `fmt::Write` sink, so float formatting does not allocate.
pub(super) struct StackBuf {
    buf: [u8; 48],
    len: usize,
}

impl std::fmt::Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Writes a finite double: the shortest digits that round-trip (from `{:e}`), laid out in
/// plain notation when the decimal exponent is in `-4..16` and as `d.dddE±x` otherwise,
/// always with a fraction or exponent so that it reads back as a double.
pub(super) fn write_f64_finite(out: &mut Vec<u8>, v: f64) {
    use std::fmt::Write as _;
    let mut s = StackBuf {
        buf: [0; 48],
        len: 0,
    };
    write!(s, "{v:e}").expect("invariant: `{:e}` of an f64 is at most 25 bytes");
    let text = &s.buf[..s.len];
    // `text` is `[-]d[.ddd]e[-]x`.
    let (negative, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let e_pos = text
        .iter()
        .position(|&c| c == b'e')
        .expect("invariant: `{:e}` output contains 'e'");
    let (mantissa, exp_text) = (&text[..e_pos], &text[e_pos + 1..]);
    let mut exp: i32 = 0;
    let (exp_negative, exp_digits) = match exp_text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, exp_text),
    };
    for &c in exp_digits {
        exp = exp * 10 + i32::from(c - b'0');
    }
    if exp_negative {
        exp = -exp;
    }
    let mut digits = [0u8; 24];
    let mut n = 0;
    for &c in mantissa {
        if c != b'.' {
            digits[n] = c;
            n += 1;
        }
    }
    let digits = &digits[..n];

    if negative {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.extend_from_slice(digits);
                for _ in digits.len()..int_len {
                    out.push(b'0');
                }
                out.extend_from_slice(b".0");
            } else {
                out.extend_from_slice(&digits[..int_len]);
                out.push(b'.');
                out.extend_from_slice(&digits[int_len..]);
            }
        } else {
            out.extend_from_slice(b"0.");
            for _ in 1..(-exp) {
                out.push(b'0');
            }
            out.extend_from_slice(digits);
        }
    } else {
        out.push(digits[0]);
        out.push(b'.');
        if digits.len() > 1 {
            out.extend_from_slice(&digits[1..]);
        } else {
            out.push(b'0');
        }
        out.extend_from_slice(if exp < 0 { b"E-" } else { b"E+" });
        write_i64(out, i64::from(exp.unsigned_abs()));
    }
}

/// Writes `millis` (0 ..= end of year 9999) as RFC 3339 UTC: `YYYY-MM-DDTHH:MM:SS[.mmm]Z`;
/// the fraction has exactly 3 digits and is omitted when zero (spec conversion table, note 5).
pub(super) fn write_iso8601(out: &mut Vec<u8>, millis: i64) {
    write_civil(out, millis, false);
}

/// Like [`write_iso8601`], with the 3-digit fraction always written (`…:SS.mmmZ`).
pub(super) fn write_iso8601_millis(out: &mut Vec<u8>, millis: i64) {
    write_civil(out, millis, true);
}

fn write_civil(out: &mut Vec<u8>, millis: i64, always_fraction: bool) {
    let days = millis.div_euclid(86_400_000);
    let ms_of_day = millis.rem_euclid(86_400_000) as u64;
    // Civil-from-days (H. Hinnant), for days >= 0 since 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);

    write_padded(out, year as u64, 4);
    out.push(b'-');
    write_padded(out, month as u64, 2);
    out.push(b'-');
    write_padded(out, day as u64, 2);
    out.push(b'T');
    write_padded(out, ms_of_day / 3_600_000, 2);
    out.push(b':');
    write_padded(out, ms_of_day / 60_000 % 60, 2);
    out.push(b':');
    write_padded(out, ms_of_day / 1_000 % 60, 2);
    let ms = ms_of_day % 1_000;
    if ms != 0 || always_fraction {
        out.push(b'.');
        write_padded(out, ms, 3);
    }
    out.push(b'Z');
}

/// Standard base64 with `=` padding, as the spec's `$binary.base64` requires.
pub(super) fn write_base64(out: &mut Vec<u8>, data: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sym = |n: u32| ALPHABET[(n & 63) as usize];
    out.reserve(data.len().div_ceil(3) * 4);
    let mut chunks = data.chunks_exact(3);
    for c in &mut chunks {
        let n = u32::from(c[0]) << 16 | u32::from(c[1]) << 8 | u32::from(c[2]);
        out.extend_from_slice(&[sym(n >> 18), sym(n >> 12), sym(n >> 6), sym(n)]);
    }
    match *chunks.remainder() {
        [a] => {
            let n = u32::from(a) << 16;
            out.extend_from_slice(&[sym(n >> 18), sym(n >> 12), b'=', b'=']);
        }
        [a, b] => {
            let n = u32::from(a) << 16 | u32::from(b) << 8;
            out.extend_from_slice(&[sym(n >> 18), sym(n >> 12), sym(n >> 6), b'=']);
        }
        _ => {}
    }
}

/// Writes an IEEE 754-2008 decimal128 (BID encoding, BSON little-endian byte order) with the
/// algorithm of the BSON Decimal128 specification ("To-String representation"):
/// `NaN` (any sign or payload), `[-]Infinity`, otherwise `[-]coefficient` in plain notation
/// when the exponent is <= 0 and the adjusted exponent >= -6, else scientific `d[.ddd]E±x`.
/// Non-canonical coefficients (greater than 10^34 - 1) count as zero.
pub(super) fn write_decimal128(out: &mut Vec<u8>, bytes: &[u8; 16]) {
    const MAX_COEFFICIENT: u128 = 9_999_999_999_999_999_999_999_999_999_999_999;
    const EXPONENT_BIAS: i32 = 6176;
    let bits = u128::from_le_bytes(*bytes);
    let negative = bits >> 127 == 1;
    let combination = (bits >> 122) & 0x1F;
    if combination == 0x1F {
        out.extend_from_slice(b"NaN");
        return;
    }
    if negative {
        out.push(b'-');
    }
    if combination == 0x1E {
        out.extend_from_slice(b"Infinity");
        return;
    }
    let (biased_exponent, coefficient) = if (bits >> 125) & 0b11 == 0b11 {
        // Coefficient would be 0b100 << 111 | rest, which always exceeds the maximum:
        // non-canonical, hence zero.
        (((bits >> 111) & 0x3FFF) as i32, 0)
    } else {
        let c = bits & ((1u128 << 113) - 1);
        (
            ((bits >> 113) & 0x3FFF) as i32,
            if c > MAX_COEFFICIENT { 0 } else { c },
        )
    };
    let exponent = biased_exponent - EXPONENT_BIAS;

    // At most 34 digits.
    let mut buf = [0u8; 40];
    let start = format_u128(coefficient, &mut buf);
    let digits = &buf[start..];
    let adjusted = exponent + digits.len() as i32 - 1;

    if exponent <= 0 && adjusted >= -6 {
        if exponent == 0 {
            out.extend_from_slice(digits);
        } else {
            let frac_len = (-exponent) as usize;
            if frac_len >= digits.len() {
                out.extend_from_slice(b"0.");
                for _ in digits.len()..frac_len {
                    out.push(b'0');
                }
                out.extend_from_slice(digits);
            } else {
                let int_len = digits.len() - frac_len;
                out.extend_from_slice(&digits[..int_len]);
                out.push(b'.');
                out.extend_from_slice(&digits[int_len..]);
            }
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.extend_from_slice(if adjusted < 0 { b"E-" } else { b"E+" });
        write_i64(out, i64::from(adjusted.unsigned_abs()));
    }
}

/// Writes the decimal digits of `v` (< 10^38) into the tail of `buf`; returns the start.
pub(super) fn format_u128(v: u128, buf: &mut [u8; 40]) -> usize {
    const TEN19: u128 = 10_000_000_000_000_000_000;
    let mut chunk = [0u8; 20];
    if v < TEN19 {
        let s = format_u64(v as u64, &mut chunk);
        let n = chunk.len() - s;
        buf[40 - n..].copy_from_slice(&chunk[s..]);
        return 40 - n;
    }
    // Low 19 digits zero-padded, then the high part (< 10^19 for v < 10^38).
    let low = (v % TEN19) as u64;
    let high = (v / TEN19) as u64;
    let s = format_u64(low, &mut chunk);
    buf[21..40].fill(b'0');
    buf[40 - (chunk.len() - s)..].copy_from_slice(&chunk[s..]);
    let s = format_u64(high, &mut chunk);
    let n = chunk.len() - s;
    buf[21 - n..21].copy_from_slice(&chunk[s..]);
    21 - n
}
