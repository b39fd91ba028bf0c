//! The source's context and the sink, built from a config: what every way of running a job
//! (a process, a group member, `tidegate plan`, the testing API) builds them with.

use crate::config::Config;
use crate::connector::{SinkContext, SourceContext};
use crate::core::Sink;
use crate::error::Result;
use crate::record::Record;

/// What the configured source is built with.
pub fn source_context(config: &Config) -> SourceContext<'_> {
    SourceContext {
        job: &config.job,
        sink_prints_values: config.sink.prints_values(),
        sink_topic: config.sink.topic(),
        sink_check: config.sink.record_check(),
    }
}

/// The configured sink, as the source wants it (its end marker written at the end of input,
/// undecodable records diverted to a dead-letter topic); `resuming`: a state file is restored;
/// `state_slot`: the open store's [`crate::checkpoint_store::OpenStore::sink_slot`].
pub fn sink_of(
    config: &Config,
    resuming: bool,
    state_slot: Option<crate::client::exactly_once::SinkTransactionSlot>,
) -> Result<Box<dyn Sink<Record>>> {
    let end_marker = config.source.end_marker(&source_context(config))?;
    let sink = config.sink.build(SinkContext {
        job: &config.job,
        resuming,
        end_marker,
        state_in_transaction: state_slot,
        source_layout: &|| config.source.topic_layout(),
    })?;
    config.source.wrap_sink(sink)
}
