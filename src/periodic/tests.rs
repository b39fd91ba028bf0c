//! The periodic source's enumerator and its checkpoints: a stop while events are being handed
//! out keeps every assigned event in the checkpoint, so a restart fires it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::schedule::{CatchUp, Schedule};
use super::settings::PeriodicSettings;
use super::source::PeriodicSource;
use super::supplier::{EventDef, Supplier};
use crate::core::{EnumeratorContext, ReaderCommand, Source, SourceSplit, SplitEnumerator};
use crate::metrics::PeriodicMetrics;
use crate::record::ValueFormat;

fn source(events: usize) -> PeriodicSource {
    let events = (0..events)
        .map(|i| EventDef {
            id: format!("event-{i}"),
            key: None,
            value: Value::String(format!("fire {i}")),
            headers: Default::default(),
            schedule: Schedule {
                wall_time: false,
                initial_delay_ms: 3_600_000,
                period_ms: 3_600_000,
            },
            count: None,
        })
        .collect();
    PeriodicSource {
        settings: Arc::new(PeriodicSettings {
            supplier: Supplier::Inline(events),
            discover_interval: Duration::from_secs(60),
            initial_delay: Duration::from_millis(5),
            catch_up: CatchUp::Skip,
            format: ValueFormat::Json,
            avro: None,
            wire_schema: None,
            encoder: None,
            keep_decoded: false,
            instance: Default::default(),
        }),
        metrics: PeriodicMetrics::register(),
    }
}

/// Events the supplier hands out after a stop go nowhere: they must stay in the checkpoint, so
/// the restarted job fires them (the enumerator kept them waiting, but its checkpoint held only
/// their assignment, and a restart, finding them assigned, never fired them again).
#[tokio::test]
async fn events_handed_out_after_a_stop_are_in_the_checkpoint_and_fire_after_a_restart() {
    let source = source(5);
    let (mut ctx, _readers) = EnumeratorContext::detached(2);
    let mut enumerator = source.create_enumerator().expect("an enumerator");
    enumerator.start(&mut ctx).expect("start");
    for reader in 0..2 {
        ctx.register_reader(reader);
        enumerator.add_reader(&mut ctx, reader).expect("a reader");
    }
    // a stop, then the supplier's answer (the job gives back what went to stopped readers)
    for reader in 0..2 {
        ctx.close_reader(reader);
    }
    let events = source.settings.supplier.events().expect("events");
    enumerator
        .handle_call_result(&mut ctx, Ok(Ok(events)))
        .expect("the events");
    let back = ctx.take_undeliverable();
    enumerator.add_splits_back(&mut ctx, back).expect("given back");
    let state = enumerator.snapshot_state(1).expect("a snapshot");
    assert_eq!(state.assignments.len(), 5, "every event is assigned");

    // the restart, from that checkpoint (no reader had a split)
    let mut restored = source.restore_enumerator(state).expect("restored");
    let (mut ctx, mut readers) = EnumeratorContext::detached(1);
    restored.start(&mut ctx).expect("start");
    ctx.register_reader(0);
    restored.add_reader(&mut ctx, 0).expect("a reader");
    let mut fired = BTreeSet::new();
    while let Ok(command) = readers[0].try_recv() {
        if let ReaderCommand::AddSplits(splits) = command {
            fired.extend(splits.iter().map(|s| s.split_id().to_string()));
        }
    }
    let expected: BTreeSet<String> = (0..5).map(|i| format!("event-{i}")).collect();
    assert_eq!(
        fired, expected,
        "every assigned event goes to a reader after the restart"
    );
}
