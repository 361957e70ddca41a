//! Kafka's primitive encodings, read from a byte slice (big-endian integers, unsigned varints,
//! classic and compact strings, arrays and records, tagged-field sections) and written back.

use std::fmt;

/// A frame the proxy cannot read: the connection that sent it is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError(pub String);

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ProtoError {}

pub type Proto<T> = Result<T, ProtoError>;

pub fn malformed<T>(what: &str) -> Proto<T> {
    Err(ProtoError(format!("malformed frame: {what}")))
}

/// The rules of Kafka's primitive types, shared by the two readers of a frame: [`Cursor`] (a
/// frame held whole) and `walk` (a frame still arriving). Each reader reads the bytes; what they
/// mean is decided here, once.
pub mod rules {
    use super::{malformed, Proto};

    /// The most bytes a uvarint takes (an unsigned 32-bit value).
    pub const UVARINT_MAX_BYTES: u32 = 5;

    /// Adds uvarint byte `b` at position `i` (0-based) to `value`: `Ok(Some(v))` once the last
    /// byte is read, `Ok(None)` when more follow, an error past [`UVARINT_MAX_BYTES`].
    #[inline]
    pub fn uvarint_step(value: &mut u64, i: u32, b: u8) -> Proto<Option<u64>> {
        *value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            Ok(Some(*value))
        } else if i + 1 >= UVARINT_MAX_BYTES {
            malformed("varint longer than 5 bytes")
        } else {
            Ok(None)
        }
    }

    /// A compact length's meaning: uvarint n + 1, 0 = null.
    #[inline]
    pub fn compact_length(n: u64) -> Option<usize> {
        n.checked_sub(1).map(|n| n as usize)
    }

    /// A classic length's meaning (int16 for strings, int32 for bytes and arrays): -1 = null.
    #[inline]
    pub fn classic_length(n: i32) -> Proto<Option<usize>> {
        match n {
            -1 => Ok(None),
            n if n < 0 => malformed("negative length"),
            n => Ok(Some(n as usize)),
        }
    }

    /// An array's element count (null: none), no more than the frame's bytes left (each
    /// element takes at least one).
    #[inline]
    pub fn array_len(n: Option<usize>, remaining: usize) -> Proto<usize> {
        let n = n.unwrap_or(0);
        if n > remaining {
            return malformed("array longer than its frame");
        }
        Ok(n)
    }
}

/// A forward reader over one frame.
pub struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8], pos: usize) -> Self {
        Cursor { buf, pos }
    }

    pub fn take(&mut self, n: usize) -> Proto<&'a [u8]> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.buf.len() => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            _ => malformed("truncated"),
        }
    }

    pub fn skip(&mut self, n: usize) -> Proto<()> {
        self.take(n).map(|_| ())
    }

    pub fn i8(&mut self) -> Proto<i8> {
        Ok(self.take(1)?[0] as i8)
    }

    pub fn i16(&mut self) -> Proto<i16> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Proto<i32> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn uvarint(&mut self) -> Proto<u64> {
        let mut value = 0u64;
        let mut i = 0;
        loop {
            let b = self.take(1)?[0];
            if let Some(v) = rules::uvarint_step(&mut value, i, b)? {
                return Ok(v);
            }
            i += 1;
        }
    }

    /// The length of a string, bytes or array: compact (uvarint n+1, 0 = null) or classic
    /// (`classic` bytes: 2 for strings, 4 for bytes and arrays; -1 = null). `None` for null.
    pub fn length(&mut self, compact: bool, classic: usize) -> Proto<Option<usize>> {
        if compact {
            return Ok(rules::compact_length(self.uvarint()?));
        }
        let n = if classic == 2 {
            i32::from(self.i16()?)
        } else {
            self.i32()?
        };
        rules::classic_length(n)
    }

    /// Skips a (nullable) string.
    pub fn skip_string(&mut self, compact: bool) -> Proto<()> {
        let n = self.length(compact, 2)?.unwrap_or(0);
        self.skip(n)
    }

    /// The element count of a (nullable) array.
    pub fn array_len(&mut self, compact: bool) -> Proto<usize> {
        let n = self.length(compact, 4)?;
        rules::array_len(n, self.buf.len() - self.pos)
    }

    /// Skips a tagged-field section (only in flexible versions).
    pub fn skip_tags(&mut self, flexible: bool) -> Proto<()> {
        if flexible {
            for _ in 0..self.uvarint()? {
                self.uvarint()?;
                let n = self.uvarint()? as usize;
                self.skip(n)?;
            }
        }
        Ok(())
    }

    /// The (tag, value) pairs of a tagged-field section.
    pub fn tags(&mut self) -> Proto<Vec<(u64, &'a [u8])>> {
        let count = self.uvarint()?;
        let mut out = Vec::new();
        for _ in 0..count {
            let tag = self.uvarint()?;
            let n = self.uvarint()? as usize;
            out.push((tag, self.take(n)?));
        }
        Ok(out)
    }
}

pub fn put_uvarint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn uvarint_len(v: u64) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

pub fn put_compact_string(out: &mut Vec<u8>, s: Option<&[u8]>) {
    match s {
        None => out.push(0),
        Some(s) => {
            put_uvarint(out, s.len() as u64 + 1);
            out.extend_from_slice(s);
        }
    }
}

pub fn read_i32(buf: &[u8], at: usize) -> Option<i32> {
    buf.get(at..at + 4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

pub fn read_i16(buf: &[u8], at: usize) -> Option<i16> {
    buf.get(at..at + 2).map(|b| i16::from_be_bytes([b[0], b[1]]))
}

pub fn write_i32(buf: &mut [u8], at: usize, v: i32) {
    buf[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

/// Raises `ThrottleTimeMs` at `at` (in a prefixed frame) to `throttle` if lower.
pub fn patch_throttle(buf: &mut [u8], at: usize, throttle: i32) {
    if let Some(old) = read_i32(buf, at) {
        if old < throttle {
            write_i32(buf, at, throttle);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uvarint_round_trip() {
        for v in [0u64, 1, 127, 128, 300, 16_383, 16_384, u32::MAX as u64] {
            let mut out = Vec::new();
            put_uvarint(&mut out, v);
            assert_eq!(out.len(), uvarint_len(v));
            assert_eq!(Cursor::new(&out, 0).uvarint().unwrap(), v);
        }
    }

    #[test]
    fn truncated_and_overlong_are_errors() {
        assert!(Cursor::new(&[0, 1], 0).i32().is_err());
        assert!(Cursor::new(&[0xff; 6], 0).uvarint().is_err());
        // An array claiming more elements than bytes left.
        assert!(Cursor::new(&[0, 0, 0, 9], 0).array_len(false).is_err());
        assert_eq!(Cursor::new(&[0xff, 0xff], 0).length(false, 2).unwrap(), None);
    }
}
