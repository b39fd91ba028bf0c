//! Throughput of the runtime's hot path, without Kafka: fetcher thread -> bounded queue ->
//! SourceReaderBase -> emitter -> sink channel -> sink, on the number-sequence source; and the
//! element queue alone between two threads.
//!
//!   cargo bench --bench runtime

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tidegate::core::number_sequence::NumberSequenceSource;
use tidegate::core::queue::ElementQueue;
use tidegate::core::{Job, JobOptions, Sink};

struct Discard;

impl Sink<u64> for Discard {
    fn write(&mut self, records: Vec<u64>) -> tidegate::Result<()> {
        std::hint::black_box(records);
        Ok(())
    }
    fn prepare_commit(&mut self, _checkpoint_id: u64) -> tidegate::Result<Option<serde_json::Value>> {
        Ok(None)
    }
}

fn job_throughput(c: &mut Criterion) {
    const N: u64 = 2_000_000;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("job");
    group.throughput(Throughput::Elements(N));
    group.sample_size(10);
    for parallelism in [1usize, 2] {
        group.bench_function(format!("number_sequence_to_null/p{parallelism}"), |b| {
            b.iter(|| {
                let mut source = NumberSequenceSource::new(0, N, parallelism);
                source.batch_size = 4096;
                let job = Job::new(source, JobOptions::new("bench", parallelism));
                runtime.block_on(job.run(Box::new(Discard))).expect("job")
            })
        });
    }
    group.finish();
}

fn queue_throughput(c: &mut Criterion) {
    const BATCHES: u64 = 20_000;
    const BATCH: usize = 1024;
    let mut group = c.benchmark_group("queue");
    group.throughput(Throughput::Elements(BATCHES * BATCH as u64));
    group.sample_size(10);
    group.bench_function("put_poll_batches_of_1024", |b| {
        b.iter(|| {
            let q = Arc::new(ElementQueue::new(2));
            let producer = {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    let wake = AtomicBool::new(false);
                    for i in 0..BATCHES {
                        let batch: Vec<u64> = vec![i; BATCH];
                        if tidegate::core::block_on(q.put(batch, &wake)).is_err() {
                            return;
                        }
                    }
                })
            };
            let mut seen = 0u64;
            while seen < BATCHES {
                match q.poll() {
                    Some(batch) => {
                        std::hint::black_box(&batch);
                        seen += 1;
                    }
                    None => std::hint::spin_loop(),
                }
            }
            producer.join().expect("producer");
        })
    });
    group.finish();
}

criterion_group!(benches, job_throughput, queue_throughput);
criterion_main!(benches);
