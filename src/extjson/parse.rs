//! Reading BSON's own encoding while transcoding: lengths, strings, C strings, subdocuments,
//! fixed-size values, each checked against its container.
//!
//! Invariant: malformed input is an error naming its offset, never a panic or an
//! out-of-bounds read.

use super::{ExtJsonError, Res};

/// Error helper.
pub(super) fn malformed(offset: usize, reason: &'static str) -> ExtJsonError {
    ExtJsonError::Malformed { offset, reason }
}

/// Reads a little-endian `i32` at the start of `b`, if it has 4 bytes.
pub(super) fn le_i32(b: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(..4)?.try_into().ok()?))
}

/// The first `N` bytes of `b`, or a "truncated" error at `offset`.
pub(super) fn fixed<const N: usize>(b: &[u8], offset: usize) -> Res<[u8; N]> {
    b.get(..N)
        .and_then(|s| s.try_into().ok())
        .ok_or_else(|| malformed(offset, "value truncated"))
}

/// A BSON `string` (int32 length incl. NUL, bytes, NUL) at the start of `b`: returns its
/// bytes without the NUL.
pub(super) fn lstring(b: &[u8], offset: usize) -> Res<&[u8]> {
    let len = le_i32(b).ok_or_else(|| malformed(offset, "string length truncated"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l >= 1)
        .ok_or_else(|| malformed(offset, "string length below 1"))?;
    let total = len
        .checked_add(4)
        .filter(|&t| t <= b.len())
        .ok_or_else(|| malformed(offset, "string longer than its container"))?;
    if b[total - 1] != 0 {
        return Err(malformed(offset + total - 1, "string not NUL-terminated"));
    }
    Ok(&b[4..total - 1])
}

/// A nested document at the start of `b`: returns exactly its bytes (length prefix through
/// terminator).
pub(super) fn subdocument(b: &[u8], offset: usize) -> Res<&[u8]> {
    let len = le_i32(b).ok_or_else(|| malformed(offset, "document length truncated"))?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l >= 5)
        .ok_or_else(|| malformed(offset, "document length below 5"))?;
    let doc = b
        .get(..len)
        .ok_or_else(|| malformed(offset, "document longer than its container"))?;
    if doc[len - 1] != 0 {
        return Err(malformed(offset + len - 1, "document not NUL-terminated"));
    }
    Ok(doc)
}

/// A NUL-terminated C string starting at `doc[start]` that must end before `doc[end]`.
pub(super) fn cstring(doc: &[u8], start: usize, end: usize, base: usize) -> Res<&[u8]> {
    let region = doc
        .get(start..end)
        .ok_or_else(|| malformed(base + start, "value truncated"))?;
    let nul = region
        .iter()
        .position(|&c| c == 0)
        .ok_or_else(|| malformed(base + start, "C string not NUL-terminated"))?;
    Ok(&region[..nul])
}
