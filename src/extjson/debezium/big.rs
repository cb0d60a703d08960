//! A small non-negative arbitrary-precision integer for [`super::java_double`]'s exact digit
//! loop (values up to ~2^1100: 5^340 × 2^760 and the like). Only what that loop needs:
//! products with powers of five and two, ×10, comparison, sum, and a quotient digit by
//! repeated subtraction. No I/O, no unsafe, no panics on any input it is given there.

use std::cmp::Ordering;

/// A non-negative arbitrary-precision integer (little-endian 32-bit limbs, no leading zeros).
#[derive(Clone)]
pub(super) struct Big(Vec<u32>);

impl From<u64> for Big {
    fn from(v: u64) -> Self {
        let mut big = Big(vec![v as u32, (v >> 32) as u32]);
        big.trim();
        big
    }
}

impl Big {
    /// 5^p5 × 2^p2.
    pub(super) fn pow52(p5: i32, p2: i32) -> Self {
        Big::from(1).times_pow52(p5, p2)
    }

    pub(super) fn times_pow52(mut self, p5: i32, p2: i32) -> Self {
        let mut left = p5;
        while left > 0 {
            let n = left.min(13);
            self.mul_small(5u32.pow(n as u32));
            left -= n;
        }
        self.shl(p2 as u32);
        self
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    pub(super) fn mul_small(&mut self, factor: u32) {
        let mut carry = 0u64;
        for limb in &mut self.0 {
            let product = u64::from(*limb) * u64::from(factor) + carry;
            *limb = product as u32;
            carry = product >> 32;
        }
        if carry > 0 {
            self.0.push(carry as u32);
        }
    }

    fn shl(&mut self, bits: u32) {
        let (words, bits) = ((bits / 32) as usize, bits % 32);
        if bits > 0 {
            let mut carry = 0u32;
            for limb in &mut self.0 {
                let next = *limb >> (32 - bits);
                *limb = (*limb << bits) | carry;
                carry = next;
            }
            if carry > 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, words));
        self.trim();
    }

    pub(super) fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    pub(super) fn plus(&self, other: &Big) -> Big {
        let (long, short) = if self.0.len() >= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut sum = long.clone();
        let mut carry = 0u64;
        for (i, limb) in sum.0.iter_mut().enumerate() {
            let add = u64::from(*limb) + u64::from(short.0.get(i).copied().unwrap_or(0)) + carry;
            *limb = add as u32;
            carry = add >> 32;
        }
        if carry > 0 {
            sum.0.push(carry as u32);
        }
        sum
    }

    /// self −= other, for self ≥ other.
    fn minus_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let diff = i64::from(*limb) - i64::from(other.0.get(i).copied().unwrap_or(0)) - borrow;
            *limb = diff.rem_euclid(1 << 32) as u32;
            borrow = i64::from(diff < 0);
        }
        self.trim();
    }

    /// q = self / s (a digit: the scaling keeps it below 10), then self = (self mod s) × 10.
    pub(super) fn quotient_digit(&mut self, s: &Big) -> u8 {
        let mut q = 0;
        while self.cmp(s) != Ordering::Less {
            self.minus_assign(s);
            q += 1;
        }
        self.mul_small(10);
        q
    }
}
