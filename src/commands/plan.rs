//! `tidegate plan`: what a Kafka replay will read, resolved as a run would resolve it, read
//! without reading the records (or, `--exact`, counting them).

use std::io::Write;
use std::path::PathBuf;

use crate::connector::registry::SourceConfig;
use crate::connector::SourceConnector;
use crate::error::{Error, Result};

#[derive(Debug, clap::Args)]
pub(crate) struct PlanArgs {
    /// The job's TOML config.
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// The state file to resume from (overrides `checkpoint.path`); it is only read.
    #[arg(long)]
    pub(crate) state: Option<PathBuf>,
    /// Override a config key, e.g. `--set source.stopping_offsets=latest` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub(crate) sets: Vec<String>,
    /// Print the plan as one JSON document.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also count the records exactly, by reading the ranges as a run would (read_committed),
    /// without the sink; the default shows only offsets, an upper bound.
    #[arg(long)]
    pub(crate) exact: bool,
}

/// `tidegate plan`: what a Kafka replay will read, resolved as a run would resolve it.
pub(crate) fn plan(args: PlanArgs) -> Result<()> {
    let config = crate::config::load(&args.config, &args.sets)?;
    crate::assembly::logging::init(config.log.format);
    let SourceConfig::Kafka(kafka) = &config.source else {
        return Err(Error::config(
            "source.type",
            format!(
                "`plan` shows what a Kafka source will read; a {} source writes what `tidegate validate` describes",
                config.source.kind()
            ),
        ));
    };
    let source = kafka.build(&crate::assembly::source_context(&config))?;
    let state_path = args.state.clone().or_else(|| config.checkpoint.path.clone());
    // only read: a running job may hold the state file's lock
    let restored = match (&config.checkpoint.store, &state_path) {
        // read only, as a running job's store is (its transactional id is not taken over)
        (crate::checkpoint_store::StoreConfig::Kafka(k), _) => match crate::checkpoint_store::kafka::read_only(k)? {
            Some(raw) => {
                let location = PathBuf::from(format!("kafka topic {} at {}", k.topic, k.bootstrap_servers));
                Some(crate::core::checkpoint_of(&source, &config.job.name, &location, raw)?)
            }
            None => None,
        },
        (_, Some(path)) => match crate::core::state::read_state::<serde_json::Value>(path)? {
            Some(raw) => Some(crate::core::checkpoint_of(&source, &config.job.name, path, raw)?),
            None => None,
        },
        (_, None) => None,
    };
    let checkpoint_id = restored.as_ref().map(|c| c.checkpoint_id);
    let may_resume_from_previous = restored.as_ref().is_some_and(|c| c.previous.is_some());
    let mut partitions = crate::kafka::plan::plan(&source, restored)?;
    if args.exact {
        crate::kafka::plan_exact::count_records(&source, &mut partitions)?;
    }
    let total_records = partitions
        .iter()
        .map(|p| p.records)
        .sum::<Option<u64>>()
        .filter(|_| args.exact);
    let report = crate::kafka::plan::PlanReport {
        job: config.job.name.clone(),
        state: checkpoint_id.and(state_path.map(|p| p.display().to_string())),
        checkpoint_id,
        may_resume_from_previous,
        eof: kafka.eof.clone(),
        eof_scope: kafka.eof.as_ref().map(|_| {
            if kafka.event_time.source_wide_stop {
                "source"
            } else {
                "partition"
            }
        }),
        replay_speed: kafka.event_time.speed,
        paced_seconds: kafka
            .event_time
            .speed
            .and_then(|speed| crate::kafka::plan::paced_seconds(&partitions, speed)),
        total_offsets: crate::kafka::plan::total_offsets(&partitions),
        total_records,
        partitions,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report).map_err(|e| Error::runtime("printing the plan", e.to_string()))? + "\n"
    } else {
        report.text()
    };
    // a closed pipe (`plan | head`) ends the output; it is not a failure
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
    Ok(())
}
