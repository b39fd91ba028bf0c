//! The `tidegate` binary: the command line of [`tidegate::cli::main`], on jemalloc.

/// jemalloc, for Rust's allocations and (unprefixed) for librdkafka's `malloc`s too. Records are
/// allocated by one thread and freed by another (generator → sink, librdkafka's broker thread →
/// the delivery-report thread), and glibc's arenas serialize such frees on a lock: on glibc the
/// data generator into Kafka ran at 0.37× kcat and spent a third of its CPU in `malloc`/`free`
/// (docs/performance.md, "The allocator").
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's settings, read before its first allocation (`MALLOC_CONF` in the environment still
/// overrides them): freed pages go back to the system after 100 ms rather than 10 s, so the peak
/// RSS is what the job holds (the bound of docs/performance.md's memory table). jemalloc purges
/// as it allocates and frees (no background thread): an idle process keeps what it freed last.
#[cfg(feature = "jemalloc")]
#[allow(non_upper_case_globals)]
#[export_name = "malloc_conf"]
static malloc_conf: &[u8; 36] = b"dirty_decay_ms:100,muzzy_decay_ms:0\0";

fn main() {
    tidegate::cli::main()
}
