//! Which partition a generated record belongs to (`source.partitions`): the one the Kafka sink's
//! producer picks for its key by default (librdkafka's `consistent_random` partitioner: CRC-32 of
//! the key bytes modulo the partition count), so a symbol stays in one partition as on an
//! exchange feed, and the stamped partition is where the key would go anyway; a record without a
//! key goes by its index.

/// The partition of `partitions` a record with `key` (or, keyless, `index`) is written to.
pub fn partition_of(key: Option<&[u8]>, index: u64, partitions: u32) -> u32 {
    let n = partitions.max(1);
    match key {
        Some(k) => crc32fast::hash(k) % n,
        None => (index % u64::from(n)) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_go_by_their_crc32_as_librdkafka_puts_them() {
        // CRC-32 (IEEE) of "123456789" is the standard check value 0xCBF43926
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(partition_of(Some(b"123456789"), 7, 1000), 0xCBF4_3926 % 1000);
        let p = partition_of(Some(b"AAPL"), 0, 3);
        assert!((0..100).all(|i| partition_of(Some(b"AAPL"), i, 3) == p));
    }

    #[test]
    fn keyless_records_go_round() {
        assert_eq!(
            (0..4).map(|i| partition_of(None, i, 3)).collect::<Vec<_>>(),
            [0, 1, 2, 0]
        );
    }
}
