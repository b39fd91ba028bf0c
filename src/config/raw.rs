//! The config file as written: serde structs with a doc comment on every field (the source of
//! docs/config.md) and upstream defaults. `config::validate` turns them into typed settings; the
//! `[source]` and `[sink]` tables belong to their connectors.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

fn one() -> i64 {
    1
}
fn two() -> i64 {
    2
}

/// A tidegate job: one source, one sink, checkpoints to a state file.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// How the job runs.
    #[serde(default)]
    pub job: RawJob,
    /// Where records come from: a table with `type = "kafka"`, `"datagen"` or `"periodic"` and the
    /// fields of that source (see the sections below).
    pub source: Value,
    /// Where records go: a table with `type = "kafka"`, `"file"`, `"stdout"` or `"null"` and the
    /// fields of that sink (see the sections below).
    pub sink: Value,
    /// Checkpoints and the state file.
    #[serde(default)]
    pub checkpoint: crate::checkpoint_store::RawCheckpoint,
    /// The Prometheus endpoint.
    #[serde(default)]
    pub metrics: crate::metrics::settings::RawMetrics,
    /// Logging.
    #[serde(default)]
    pub log: RawLog,
}

/// `[job]`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawJob {
    /// Name in logs and the state file. Default: the config file's name without extension.
    pub name: Option<String>,
    /// Number of parallel source readers.
    #[serde(default = "one")]
    pub parallelism: i64,
    /// Stop gracefully (final checkpoint, exit 0) after this long, e.g. "30s". Default: run until
    /// the input ends or a signal arrives.
    pub max_duration: Option<String>,
    /// This process's share of the splits when one job runs as several processes:
    /// `{ index = 0, count = 3 }`. Each instance needs its own state file (or keeps its own keys
    /// in the Kafka store, where the count may change between runs).
    pub instance: Option<RawInstance>,
    /// Fetcher threads per reader: "single" (one for all its splits) or "per_split".
    #[serde(default)]
    pub fetcher_mode: Option<String>,
    /// Capacity of each reader's queue of fetched batches (Flink's default is 2).
    #[serde(default = "two")]
    pub queue_capacity: i64,
    /// How the processes of a job share its splits: "static" (the default: `job.instance`) or
    /// "group" (a Kafka source's partitions assigned by the consumer group `tidegate-<job>`,
    /// which every process of the job joins; processes may come and go while it runs; needs
    /// checkpoint.store = "kafka" and a Kafka sink: see docs/scaling.md).
    pub coordination: Option<String>,
    /// With coordination = "group": this process's name in the group, unique among the job's
    /// processes (its state records' keys and transactional ids). Set, it makes the process a
    /// static member (`group.instance.id`): stopped and started again within the broker's
    /// session timeout, it is dealt its partitions back with no rebalance (docs/scaling.md).
    /// Default: the host name (a dynamic member).
    pub member: Option<String>,
}

impl Default for RawJob {
    fn default() -> Self {
        RawJob {
            name: None,
            parallelism: 1,
            max_duration: None,
            instance: None,
            fetcher_mode: None,
            queue_capacity: 2,
            coordination: None,
            member: None,
        }
    }
}

/// `job.instance`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawInstance {
    /// This instance, from 0.
    pub index: i64,
    /// How many instances share the job.
    pub count: i64,
}

/// `[log]`
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    /// "text" (default) or "json". The level comes from `RUST_LOG` (default `info`).
    pub format: Option<String>,
}
