//! Java's `Double.toString` as JDK 17 prints it, which is what Debezium 3.6.3's JSON writers put
//! in `after`, `updatedFields` and keys (they add a `+` to positive exponents, see
//! [`super::java::write_double`]).
//!
//! JDK 17 is not "the shortest decimal that reads back": its algorithm (the one documented in
//! `Double.toString`'s javadoc up to JDK 18 and replaced in JDK 19 by JDK-4511638) generates
//! digits with Steele and White's free-format method, with a decimal exponent *estimated* in
//! floating point, a symmetric stopping test, and integer fast paths. The results that differ
//! from the shortest are part of the format Debezium writes, so they are reproduced here:
//! `2.0E23` prints `1.9999999999999998E23`, `1.0E23` prints `9.999999999999999E22`, `2^62`
//! prints `4.6116860184273879E18` (integers up to 2^63 keep up to two extra digits), and at
//! least two significant digits are generated in the E form.
//!
//! # Method
//!
//! Our own implementation of that documented procedure, checked against the JDK itself:
//! `bench/peers/DebeziumJsonProbe.java doubles` prints `Double.toString` for ~580 000 doubles
//! (random bit patterns, short and 17-digit decimals, powers of two and ten, integers), and the
//! replay test compares every one (see `replay_tests.rs`); the connector's own records carry
//! ~6 500 more. Three integer widths are used as in the JDK, because they need not behave
//! alike: the 32- and 64-bit paths wrap, and stop when the scaled margin overflows; their
//! "high" test is strict. The arbitrary-precision path is exact, with a non-strict "high" test
//! (`b + m >= 10s`): no double compared so far reaches that exact tie, so the replay cannot
//! tell the two readings apart there.

use std::cmp::Ordering;

use super::big::Big;

/// Decimal digits and exponent: the value is `0.d1d2…dn × 10^exponent`.
pub(crate) struct JavaDigits {
    digits: [u8; 32],
    len: usize,
    exponent: i32,
}

impl JavaDigits {
    /// The ASCII digits.
    pub(crate) fn digits(&self) -> &[u8] {
        &self.digits[..self.len]
    }

    /// The decimal exponent, with the point before the first digit.
    pub(crate) fn exponent(&self) -> i32 {
        self.exponent
    }

    fn push(&mut self, digit: u8) {
        // The stopping test ends the loop within 19 digits (the margin is at least one ulp);
        // the array has room for more.
        let slot = self
            .digits
            .get_mut(self.len)
            .expect("invariant: Double.toString generates at most 19 digits");
        *slot = b'0' + digit;
        self.len += 1;
    }

    /// Adds one unit in the last digit, carrying as the JDK does (trailing zeros are kept).
    fn round_up(&mut self) {
        let Some(mut i) = self.len.checked_sub(1) else {
            return;
        };
        while self.digits[i] == b'9' && i > 0 {
            self.digits[i] = b'0';
            i -= 1;
        }
        if self.digits[i] == b'9' {
            self.exponent += 1;
            self.digits[0] = b'1';
        } else {
            self.digits[i] += 1;
        }
    }
}

/// Bit length of 5^i for i in 1..27 (0 for i = 0), the JDK's size estimate; above the table
/// it uses `3 * i`.
const N_5_BITS: [i32; 27] = [
    0, 3, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28, 31, 33, 35, 38, 40, 42, 45, 47, 49, 52, 54, 56,
    59, 61,
];

fn n5_bits(i: i32) -> i32 {
    usize::try_from(i)
        .ok()
        .and_then(|i| N_5_BITS.get(i).copied())
        .unwrap_or(i * 3)
}

/// Decimal digits that cannot be told apart after a 53-bit integer is shifted left by
/// `p2 + 1` bits: floor(p2 × log10 2), for the 0..=8 that occur (2^53..2^63).
const INSIGNIFICANT_FOR_POW2: [u32; 9] = [0, 0, 0, 0, 1, 1, 1, 2, 2];

/// The digits and exponent JDK 17's `Double.toString` prints for the finite, non-zero value
/// with IEEE 754 `bits` (the sign bit is ignored).
pub(crate) fn java_digits(bits: u64) -> JavaDigits {
    const FRACTION_MASK: u64 = (1 << 52) - 1;
    let biased = ((bits >> 52) & 0x7FF) as i32;
    let mut fraction = bits & FRACTION_MASK;
    let (bin_exp, significant_bits) = if biased == 0 {
        // Subnormal: normalize so that the leading one sits at bit 52.
        let leading = fraction.leading_zeros() as i32;
        let shift = leading - 11;
        fraction <<= shift;
        (1 - shift - 1023, 64 - leading)
    } else {
        fraction |= 1 << 52;
        (biased - 1023, 53)
    };
    let tail_zeros = fraction.trailing_zeros() as i32;
    let fraction_bits = 53 - tail_zeros;
    let tiny_bits = (fraction_bits - bin_exp - 1).max(0);
    if (0..=62).contains(&bin_exp) && tiny_bits == 0 {
        // An integer below 2^63: print the long, minus the digits the double cannot resolve.
        let insignificant = if bin_exp > significant_bits {
            let p2 = (bin_exp - significant_bits - 1) as usize;
            INSIGNIFICANT_FOR_POW2.get(p2).copied().unwrap_or(0)
        } else {
            0
        };
        let value = if bin_exp >= 52 {
            fraction << (bin_exp - 52)
        } else {
            fraction >> (52 - bin_exp)
        };
        return long_digits(value, insignificant);
    }
    free_format(fraction, bin_exp, significant_bits, tail_zeros)
}

/// The integer fast path: `value` rounded to drop `insignificant` low digits (half up), then
/// its digits without trailing zeros.
fn long_digits(mut value: u64, insignificant: u32) -> JavaDigits {
    let mut exponent = 0;
    if insignificant != 0 {
        let pow10 = 10u64.pow(insignificant);
        let residue = value % pow10;
        value /= pow10;
        exponent += insignificant as i32;
        if residue >= pow10 / 2 {
            value += 1;
        }
    }
    let mut text = [0u8; 20];
    let mut start = text.len();
    while value > 0 {
        start -= 1;
        text[start] = (value % 10) as u8;
        value /= 10;
    }
    let all = &text[start..];
    exponent += all.len() as i32;
    let kept = all.len() - all.iter().rev().take_while(|&&d| d == 0).count();
    let mut out = JavaDigits {
        digits: [0; 32],
        len: 0,
        exponent,
    };
    for &d in &all[..kept] {
        out.push(d);
    }
    out
}

/// floor(log10(value)) estimated the JDK's way, in double arithmetic; may be one too high.
// The JDK's literals, rounded log10(2) included, are part of the result: keep them verbatim.
#[allow(clippy::approx_constant)]
fn estimate_dec_exp(fraction: u64, bin_exp: i32) -> i32 {
    let d2 = f64::from_bits(0x3FF0_0000_0000_0000 | (fraction & ((1 << 52) - 1)));
    let d = (d2 - 1.5) * 0.289529654 + 0.176091259 + f64::from(bin_exp) * 0.301029995663981;
    d.floor() as i32
}

/// Steele and White's digit generation with the JDK's scaling and stopping test.
fn free_format(fraction: u64, bin_exp: i32, significant_bits: i32, tail_zeros: i32) -> JavaDigits {
    let fraction_bits = 53 - tail_zeros;
    let tiny_bits = (fraction_bits - bin_exp - 1).max(0);
    let mut dec_exp = estimate_dec_exp(fraction, bin_exp);
    // value = b / s; half the gap to the neighbours is m / s (symmetric, as in the JDK).
    let b5 = (-dec_exp).max(0);
    let mut b2 = b5 + tiny_bits + bin_exp;
    let s5 = dec_exp.max(0);
    let mut s2 = s5 + tiny_bits;
    let m5 = b5;
    let mut m2 = b2 - significant_bits;
    let fraction = fraction >> tail_zeros;
    b2 -= fraction_bits - 1;
    let common = b2.min(s2);
    b2 -= common;
    s2 -= common;
    m2 -= common;
    if fraction_bits == 1 {
        m2 -= 1;
    }
    if m2 < 0 {
        b2 -= m2;
        s2 -= m2;
        m2 = 0;
    }
    let b_bits = fraction_bits + b2 + n5_bits(b5);
    let ten_s_bits = s2 + 1 + n5_bits(s5 + 1);
    let mut out = JavaDigits {
        digits: [0; 32],
        len: 0,
        exponent: 0,
    };
    // Two significant digits at least in the E form (the javadoc's "at least one digit after
    // the point"); the JDK tests the estimate's range [-3, 8), one wider than its layout's.
    let e_form = |dec_exp: i32| !(-3..8).contains(&dec_exp);
    let (high, low, low_digit_difference) = if b_bits < 64 && ten_s_bits < 64 {
        let small = b_bits < 32 && ten_s_bits < 32;
        let pow5 = |n: i32| 5i64.pow(n as u32);
        let b = ((fraction as i64) * pow5(b5)) << b2;
        let s = pow5(s5) << s2;
        let m = pow5(m5) << m2;
        let generate = if small { fixed::<i32> } else { fixed::<i64> };
        generate(b, s, m, &mut dec_exp, e_form, &mut out)
    } else {
        let s = Big::pow52(s5, s2);
        let b = Big::from(fraction).times_pow52(b5, b2);
        let m = Big::pow52(m5 + 1, m2 + 1);
        let ten_s = Big::pow52(s5 + 1, s2 + 1);
        big(b, &s, m, &ten_s, &mut dec_exp, e_form, &mut out)
    };
    out.exponent = dec_exp + 1;
    // Stopped by "high" alone: round up; by both: to the nearer, ties to an even digit.
    let odd_last = out.digits().last().is_some_and(|d| d % 2 == 1);
    let nearer_up = low_digit_difference > 0 || (low_digit_difference == 0 && odd_last);
    if high && (!low || nearer_up) {
        out.round_up();
    }
    out
}

/// A fixed-width two's-complement integer as the JDK's `int` and `long` paths use it
/// (wrapping multiplication and addition).
trait Word: Copy + PartialOrd {
    const ZERO: Self;
    fn from_i64(v: i64) -> Self;
    fn to_i64(self) -> i64;
    fn wrapping_add(self, other: Self) -> Self;
    fn wrapping_sub(self, other: Self) -> Self;
    fn wrapping_mul(self, other: Self) -> Self;
}

macro_rules! word {
    ($t:ty) => {
        impl Word for $t {
            const ZERO: Self = 0;
            fn from_i64(v: i64) -> Self {
                v as $t
            }
            fn to_i64(self) -> i64 {
                i64::from(self)
            }
            fn wrapping_add(self, other: Self) -> Self {
                <$t>::wrapping_add(self, other)
            }
            fn wrapping_sub(self, other: Self) -> Self {
                <$t>::wrapping_sub(self, other)
            }
            fn wrapping_mul(self, other: Self) -> Self {
                <$t>::wrapping_mul(self, other)
            }
        }
    };
}
word!(i32);
word!(i64);

/// The `int`/`long` digit loop; returns (high, low, sign of 2b − 10s).
fn fixed<W: Word>(
    b: i64,
    s: i64,
    m: i64,
    dec_exp: &mut i32,
    e_form: impl Fn(i32) -> bool,
    out: &mut JavaDigits,
) -> (bool, bool, i64) {
    let ten = W::from_i64(10);
    let (mut b, s, mut m) = (W::from_i64(b), W::from_i64(s), W::from_i64(m));
    let tens = s.wrapping_mul(ten);
    let step = |b: W| -> (i64, W) {
        let (b, s) = (b.to_i64(), s.to_i64());
        (b / s, W::from_i64(b % s).wrapping_mul(ten))
    };
    let (q, next) = step(b);
    b = next;
    m = m.wrapping_mul(ten);
    let mut low = b < m;
    let mut high = b.wrapping_add(m) > tens;
    if q == 0 && !high {
        *dec_exp -= 1;
    } else {
        out.push(q as u8);
    }
    if e_form(*dec_exp) {
        (low, high) = (false, false);
    }
    while !low && !high {
        let (q, next) = step(b);
        b = next;
        m = m.wrapping_mul(ten);
        if m > W::ZERO {
            low = b < m;
            high = b.wrapping_add(m) > tens;
        } else {
            // The margin overflowed: the JDK stops here.
            (low, high) = (true, true);
        }
        out.push(q as u8);
    }
    // In the word's own arithmetic, wrapping like the JDK's `(b << 1) - tens`.
    let difference = b.wrapping_mul(W::from_i64(2)).wrapping_sub(tens).to_i64();
    (high, low, difference.signum())
}

/// The arbitrary-precision digit loop (`m` and `ten_s` already multiplied by ten).
fn big(
    mut b: Big,
    s: &Big,
    mut m: Big,
    ten_s: &Big,
    dec_exp: &mut i32,
    e_form: impl Fn(i32) -> bool,
    out: &mut JavaDigits,
) -> (bool, bool, i64) {
    let q = b.quotient_digit(s);
    let mut low = b.cmp(&m) == Ordering::Less;
    let mut high = ten_s.cmp(&b.plus(&m)) != Ordering::Greater;
    if q == 0 && !high {
        *dec_exp -= 1;
    } else {
        out.push(q);
    }
    if e_form(*dec_exp) {
        (low, high) = (false, false);
    }
    while !low && !high {
        let q = b.quotient_digit(s);
        m.mul_small(10);
        low = b.cmp(&m) == Ordering::Less;
        high = ten_s.cmp(&b.plus(&m)) != Ordering::Greater;
        out.push(q);
    }
    let difference = if high && low {
        b.mul_small(2);
        b.cmp(ten_s) as i64
    } else {
        0
    };
    (high, low, difference)
}
