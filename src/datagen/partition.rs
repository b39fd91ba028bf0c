//! Which partition a generated record belongs to (`source.partitions`): the partition Kafka's
//! Java producer picks for its key (`BuiltInPartitioner`: murmur2 of the key bytes, made
//! positive, modulo the partition count), so a symbol stays in one partition as on an exchange
//! feed; a record without a key goes by its index.

/// Kafka's `Utils.murmur2` (seed `0x9747b28c`), on the key's bytes.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M) ^ k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u32::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `partitions` a record with `key` (or, keyless, `index`) is written to.
pub fn partition_of(key: Option<&[u8]>, index: u64, partitions: u32) -> u32 {
    let n = partitions.max(1);
    match key {
        Some(k) => (murmur2(k) as u32 & 0x7fff_ffff) % n,
        None => (index % u64::from(n)) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas() {
        // Kafka's UtilsTest.testMurmur2
        for (data, hash) in [
            (&b"21"[..], -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58_897_971),
            (b"abc", 479_470_107),
        ] {
            assert_eq!(murmur2(data), hash, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn keys_stay_in_one_partition_and_keyless_records_go_round() {
        let p = partition_of(Some(b"AAPL"), 0, 3);
        assert!((0..100).all(|i| partition_of(Some(b"AAPL"), i, 3) == p));
        assert_eq!(
            (0..4).map(|i| partition_of(None, i, 3)).collect::<Vec<_>>(),
            [0, 1, 2, 0]
        );
    }
}
