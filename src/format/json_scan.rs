//! A single pass over a JSON document that checks its grammar and lends out the raw bytes of the
//! top-level fields a caller asks for, allocating nothing: the trading-day path's JSON work.
//!
//! Hand-rolled because the crates on offer do one half each: serde_json checks a document fully
//! but builds what it hands out (its borrowed `RawValue` needs a map or a visitor per record, and
//! was a quarter of the trading-day path's CPU with the visitor), simd-json needs a mutable copy
//! of every value, and sonic-rs's lazy field lookup does not check the rest of the document. The
//! grammar is serde_json's for the values it skips (`IgnoredAny`: no nesting limit, escapes checked
//! for their form only); wherever this scan and serde_json could disagree it answers
//! [`Scan::Unsure`] and the caller asks serde_json. `tests` compares both on generated documents.

/// What a scan found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scan {
    /// A valid document whose top level is an object; the wanted fields it has are filled in.
    Object,
    /// Not a document this scan answers for (not an object, invalid, or a case serde_json must
    /// decide: a wanted key twice, an escaped key, a wanted value that is an object or array).
    Unsure,
}

/// Where a wanted field's value is in the document.
pub(crate) type Span = std::ops::Range<usize>;

/// Scans `bytes` (checking their UTF-8 too) and sets `found[i]` to where the value of the
/// top-level field `wanted[i]` is (untouched where absent). `stack` is scratch space for the
/// nesting of skipped values, reused across calls.
pub(crate) fn scan_fields(bytes: &[u8], wanted: &[String], found: &mut [Option<Span>], stack: &mut Vec<u8>) -> Scan {
    let mut s = Scanner { b: bytes, i: 0 };
    match s.object(wanted, found, stack) {
        Some(()) => {
            s.ws();
            if s.i == bytes.len() {
                Scan::Object
            } else {
                Scan::Unsure
            }
        }
        None => Scan::Unsure,
    }
}

/// Whether a byte ends a run of plain string bytes: a quote, a backslash or a control character.
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Whether none of sixteen string bytes is a quote, a backslash or a control character, and
/// whether any is non-ASCII: at 1 KiB values, skipping plain string bytes is most of the
/// trading-day path's JSON work. SSE2 is part of x86-64's baseline (every target with an
/// operating system), so no detection is needed; the compiler did not vectorize the portable
/// loop (below, for other targets) as well.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
fn plain_sixteen(chunk: &[u8; 16]) -> (bool, bool) {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is enabled (the cfg above), and the unaligned load reads exactly the sixteen
    // bytes `chunk` borrows.
    unsafe {
        let v = _mm_loadu_si128(chunk.as_ptr().cast());
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        // unsigned: min(byte, 0x1f) == byte ⇔ byte ≤ 0x1f
        let control = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        let stop = _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(quote, backslash), control));
        (stop == 0, _mm_movemask_epi8(v) != 0)
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
fn plain_sixteen(chunk: &[u8; 16]) -> (bool, bool) {
    let stop = chunk.iter().any(|&byte| STRING_STOP[byte as usize]);
    (!stop, chunk.iter().any(|&byte| byte >= 0x80))
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.i += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.i += 1)
    }

    /// The top-level object; `None` where the answer is [`Scan::Unsure`].
    fn object(&mut self, wanted: &[String], found: &mut [Option<Span>], stack: &mut Vec<u8>) -> Option<()> {
        self.ws();
        self.eat(b'{')?;
        self.ws();
        if self.eat(b'}').is_some() {
            return Some(());
        }
        loop {
            let key_start = self.i + 1;
            if self.string()? {
                return None; // an escaped key: serde_json unescapes it
            }
            let key = &self.b[key_start..self.i - 1];
            self.ws();
            self.eat(b':')?;
            self.ws();
            let value_start = self.i;
            match wanted.iter().position(|w| w.as_bytes() == key) {
                Some(k) => {
                    if found[k].is_some() || matches!(self.peek(), Some(b'{' | b'[')) {
                        return None;
                    }
                    self.value(stack)?;
                    found[k] = Some(value_start..self.i);
                }
                None => self.value(stack)?,
            }
            self.ws();
            match self.peek()? {
                b',' => {
                    self.i += 1;
                    self.ws();
                }
                b'}' => {
                    self.i += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string from its opening quote; whether it has escapes. Its bytes must be UTF-8 (checked
    /// here, where a string has any byte over 0x7f: outside strings the grammar allows none).
    fn string(&mut self) -> Option<bool> {
        self.eat(b'"')?;
        let start = self.i;
        let mut escaped = false;
        let mut seen = 0u64; // every byte skipped, or-ed together: bit 7 set for a non-ASCII one
        loop {
            seen |= self.skip_plain_words();
            loop {
                let byte = *self.b.get(self.i)?;
                if STRING_STOP[byte as usize] {
                    break;
                }
                seen |= u64::from(byte);
                self.i += 1;
            }
            match self.b[self.i] {
                b'"' => {
                    if seen & 0x80 != 0 {
                        std::str::from_utf8(&self.b[start..self.i]).ok()?;
                    }
                    self.i += 1;
                    return Some(escaped);
                }
                b'\\' => {
                    escaped = true;
                    self.i += 1;
                    match self.peek()? {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.i += 1,
                        b'u' => {
                            let hex = self.b.get(self.i + 1..self.i + 5)?;
                            if !hex.iter().all(u8::is_ascii_hexdigit) {
                                return None;
                            }
                            self.i += 5;
                        }
                        _ => return None,
                    }
                }
                _ => return None, // a control character
            }
        }
    }

    /// Skips string bytes sixteen ([`plain_sixteen`]), then eight, at a time while none of them is
    /// a quote, a backslash or a control character (serde_json's `skip_to_escape` does the same
    /// with words); returns bit 7 set when any skipped byte was non-ASCII.
    fn skip_plain_words(&mut self) -> u64 {
        const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
        const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
        const QUOTE: u64 = u64::from_ne_bytes([b'"'; 8]);
        const BACKSLASH: u64 = u64::from_ne_bytes([b'\\'; 8]);
        const SPACE: u64 = u64::from_ne_bytes([0x20; 8]);
        let mut non_ascii = false;
        while let Some(chunk) = self.b.get(self.i..).and_then(<[u8]>::first_chunk::<16>) {
            let (plain, high) = plain_sixteen(chunk);
            if !plain {
                break;
            }
            non_ascii |= high;
            self.i += 16;
        }
        let mut seen = if non_ascii { 0x80 } else { 0 };
        while let Some(chunk) = self.b.get(self.i..self.i + 8) {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            let v = u64::from_ne_bytes(word);
            // a byte of x is zero ⇔ its high bit is set in (x - 1) & !x (bytes below 0x80);
            // v - 0x20 sets the high bit of every byte below 0x20; bytes ≥ 0x80 are masked by !v
            let quote = (v ^ QUOTE).wrapping_sub(ONES) & !(v ^ QUOTE);
            let backslash = (v ^ BACKSLASH).wrapping_sub(ONES) & !(v ^ BACKSLASH);
            let control = v.wrapping_sub(SPACE) & !v;
            if (quote | backslash | control) & HIGH != 0 {
                break;
            }
            seen |= v;
            self.i += 8;
        }
        // one bit per word is enough for the caller: fold the high bits down to bit 7
        if seen & HIGH != 0 {
            0x80
        } else {
            0
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        self.i - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let _ = self.eat(b'-');
        match self.peek()? {
            b'0' => self.i += 1,
            b'1'..=b'9' => {
                self.digits();
            }
            _ => return None,
        }
        if self.eat(b'.').is_some() && self.digits() == 0 {
            return None;
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.i += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
        }
        Some(())
    }

    fn literal(&mut self, text: &[u8]) -> Option<()> {
        (self.b.get(self.i..self.i + text.len())? == text).then(|| self.i += text.len())
    }

    /// Any value, nested as deep as it likes (the open containers on `stack`).
    fn value(&mut self, stack: &mut Vec<u8>) -> Option<()> {
        stack.clear();
        loop {
            // a value
            match self.peek()? {
                b'"' => {
                    self.string()?;
                }
                b'-' | b'0'..=b'9' => self.number()?,
                b't' => self.literal(b"true")?,
                b'f' => self.literal(b"false")?,
                b'n' => self.literal(b"null")?,
                open @ (b'{' | b'[') => {
                    self.i += 1;
                    self.ws();
                    let close = if open == b'{' { b'}' } else { b']' };
                    if self.eat(close).is_none() {
                        stack.push(close);
                        if close == b'}' {
                            self.key()?;
                        }
                        continue;
                    }
                }
                _ => return None,
            }
            // what follows it in its containers
            loop {
                let Some(&close) = stack.last() else {
                    return Some(());
                };
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.ws();
                        if close == b'}' {
                            self.key()?;
                        }
                        break;
                    }
                    c if c == close => {
                        self.i += 1;
                        stack.pop();
                    }
                    _ => return None,
                }
            }
        }
    }

    /// A member's key and colon, up to its value.
    fn key(&mut self) -> Option<()> {
        self.string()?;
        self.ws();
        self.eat(b':')?;
        self.ws();
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(doc: &str, wanted: &[&str]) -> (Scan, Vec<Option<String>>) {
        let wanted: Vec<String> = wanted.iter().map(|w| w.to_string()).collect();
        let mut found = vec![None; wanted.len()];
        let r = scan_fields(doc.as_bytes(), &wanted, &mut found, &mut Vec::new());
        let found = found.into_iter().map(|f| f.map(|span| doc[span].to_string())).collect();
        (r, found)
    }

    #[test]
    fn lends_the_wanted_fields_raw() {
        let (r, f) = scan(
            r#" {"type" : "MARKET_CLOSE", "skip":{"a":[1,-2.5e+3,{"b":null}],"c":"\u00e9\n"}, "n":-0.5E3 , "t":true} "#,
            &["type", "n", "t", "absent"],
        );
        assert_eq!(r, Scan::Object);
        assert_eq!(
            f,
            vec![
                Some(r#""MARKET_CLOSE""#.into()),
                Some("-0.5E3".into()),
                Some("true".into()),
                None
            ]
        );
    }

    #[test]
    fn every_stop_and_non_ascii_byte_is_seen_at_every_place_in_a_long_string() {
        // a string long enough for the sixteen- and eight-byte skips, with one byte sequence put
        // at each place and tails of every length (so the string ends at every offset of the
        // blocks, and the sequence falls in either skip or the byte loop): the scan must agree
        // with serde_json on whether the document is valid, and lend the field after the string
        let inserts: [&[u8]; 15] = [
            b"\x01",
            b"\x1f",
            b"\x00",
            b"\\n",
            b"\\u00e9",
            b"\\\"", // an escaped quote: a scan blind to backslashes ends the string there
            b"\\x",  // not an escape
            "é".as_bytes(),
            b"\xff",
            b"\xc0\xaf",     // overlong
            b"\xed\xa0\x80", // a surrogate
            b"\xc3",         // truncated
            b"\x7f",
            b" ",
            b"\"",
        ];
        let wanted = vec!["n".to_string()];
        for at in 0..48 {
            for tail in 0..24 {
                for insert in inserts {
                    let mut doc = br#"{"type":""#.to_vec();
                    doc.extend(std::iter::repeat_n(b'a', at));
                    doc.extend_from_slice(insert);
                    doc.extend(std::iter::repeat_n("é".as_bytes(), tail % 3).flatten());
                    doc.extend(std::iter::repeat_n(b'b', tail));
                    doc.extend_from_slice(br#"","n":1}"#);
                    let valid = serde_json::from_slice::<serde_json::Value>(&doc).is_ok();
                    let mut found = vec![None];
                    let scan = scan_fields(&doc, &wanted, &mut found, &mut Vec::new());
                    let text = String::from_utf8_lossy(&doc);
                    assert_eq!(scan == Scan::Object, valid, "at {at}, tail {tail}: {text}");
                    if valid {
                        assert_eq!(found[0].clone().map(|span| &doc[span]), Some(&b"1"[..]), "{text}");
                    }
                }
            }
        }
        // a long string the buffer ends inside
        let open = format!(r#"{{"type":"{}"#, "a".repeat(40));
        assert_eq!(scan(&open, &["type"]).0, Scan::Unsure);
    }

    #[test]
    fn is_unsure_of_what_serde_json_must_decide() {
        for doc in [
            r#"[1,2]"#,
            r#""text""#,
            r#"{"type":"a","type":"b"}"#,
            r#"{"ty\u0070e":"a"}"#,
            r#"{"type":{"nested":1}}"#,
            r#"{"type":"a",}"#,
            r#"{"type":"a"} x"#,
            r#"{"a":[1,]}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":1e}"#,
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12g4"}"#,
            "{\"a\":\"\u{1}\"}",
            r#"{"a":tru}"#,
            r#"{"a" 1}"#,
            r#"{"a":1"#,
            r#"{"a":{"b":1}"#,
            r#"{"a":[}"#,
            r#"{"a":{1:2}}"#,
        ] {
            assert_eq!(scan(doc, &["type"]).0, Scan::Unsure, "{doc}");
        }
    }
}
