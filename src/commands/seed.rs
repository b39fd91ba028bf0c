//! `tidegate seed`: a Kafka topic seeded with generated records in one line (the data
//! generator source).

use serde_json::{json, Value};

use super::oneliner::{bootstrap, checkpoint, finish, positive_number, OneLinerArgs};
use crate::error::{Error, Result};

pub(crate) const SEED_EXAMPLES: &str = "\
Examples:
  tidegate seed people --count 1000 --rate 100               # {\"seq\":0,\"id\":\"…\"}, … at 100/s
  tidegate seed orders --count 10 --key '{seq}' --value 'order {seq}'
  tidegate seed orders --count 10 --set 'source.fields.price={\"uniform\":{\"min\":1,\"max\":99}}'
  tidegate seed trades-2026-11-27 --example trading-day      # config/trading-day-seed.toml
  tidegate seed people --count 1000 --print-config > seed.toml";

#[derive(Debug, clap::Args)]
pub(crate) struct SeedArgs {
    /// The topic to write (created if missing, with --partitions partitions).
    pub(crate) topic: String,
    /// Brokers [default: $KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092].
    #[arg(short = 'b', long, value_name = "HOST:PORT[,…]")]
    pub(crate) bootstrap_servers: Option<String>,
    /// Records to write; without it, --rate R writes until Ctrl-C [default with --example: its count].
    #[arg(long, value_name = "N")]
    pub(crate) count: Option<u64>,
    /// Records per second [default: as fast as possible].
    #[arg(long, value_name = "R", value_parser = positive_number)]
    pub(crate) rate: Option<f64>,
    /// Partitions of the topic, each written in record order by one reader [default: 1 when created].
    #[arg(long, value_name = "N")]
    pub(crate) partitions: Option<u32>,
    /// Key template over the fields, e.g. '{seq}' [default: no key].
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) key: Option<String>,
    /// Value template over the fields, written as a string, e.g. 'order {seq}' [default: the
    /// fields as a JSON object; fields are seq (0, 1, …) and id (a UUID); add more with
    /// --set source.fields.NAME=JSON].
    #[arg(long, value_name = "TEMPLATE")]
    pub(crate) value: Option<String>,
    /// Seed of the generator: the same seed writes the same records [default: 0, or the example's].
    #[arg(long, value_name = "N")]
    pub(crate) seed: Option<u64>,
    /// Start from a worked example instead of the seq/id fields: trading-day (the config
    /// config/trading-day-seed.toml, into TOPIC).
    #[arg(long, value_name = "NAME", value_parser = ["trading-day"], conflicts_with = "value")]
    pub(crate) example: Option<String>,
    /// Write through Kafka transactions, each record once (needs --state to resume).
    #[arg(long)]
    pub(crate) exactly_once: bool,
    #[command(flatten)]
    pub(crate) common: OneLinerArgs,
}

/// `tidegate seed`.
pub(crate) fn seed(args: SeedArgs) -> Result<()> {
    let tree = seed_tree(&args)?;
    finish(tree, Vec::new(), &args.common, "tidegate seed")
}

/// The fields of a seed without `--example`: a sequence and a UUID.
fn default_fields() -> Value {
    json!({
        "seq": { "sequence": { "start": 0 } },
        "id": { "uuid": {} },
    })
}

/// The config tree of a seed.
pub(crate) fn seed_tree(args: &SeedArgs) -> Result<Value> {
    if args.count.is_none() && args.rate.is_none() && args.example.is_none() {
        // an unbounded stream as fast as the broker takes it is never what a bare `seed t` meant
        return Err(Error::config(
            "--count",
            "give --count N, or --rate R for an endless stream at R records/s",
        ));
    }
    let servers = bootstrap(args.bootstrap_servers.as_deref());
    let mut tree = match args.example.as_deref() {
        Some(name) => example(name)?,
        None => json!({
            "job": { "name": format!("seed-{}", args.topic) },
            "source": {
                "type": "datagen",
                "format": if args.value.is_some() { "string" } else { "json" },
                "fields": default_fields(),
            },
            "sink": { "type": "kafka" },
        }),
    };
    let source = &mut tree["source"];
    if let Some(seed) = args.seed {
        source["seed"] = json!(seed);
    }
    if let Some(count) = args.count {
        source["count"] = json!(count);
    }
    if let Some(rate) = args.rate {
        source["rate"] = json!(rate);
    }
    if let Some(key) = &args.key {
        source["key"] = json!(key);
    }
    if let Some(value) = &args.value {
        source["value"] = json!(value);
    }
    if let Some(p) = args.partitions {
        source["partitions"] = json!(p);
    }
    let partitions = source["partitions"].as_u64();
    let sink = &mut tree["sink"];
    sink["bootstrap_servers"] = json!(servers);
    sink["topic"] = json!(args.topic);
    sink["create_topic"] = json!({ "partitions": partitions.unwrap_or(1) });
    if partitions.is_some() {
        // each record to the partition its generator stamped (see `source.partitions`)
        sink["preserve_partition"] = json!(true);
    }
    if args.exactly_once {
        sink["delivery"] = json!("exactly_once");
    }
    // an example's own state file would be a surprise beside the working directory: `--state`
    let mut kept = tree["checkpoint"].as_object().cloned().unwrap_or_default();
    kept.remove("path");
    if let Value::Object(state) = checkpoint(&args.common)? {
        kept.extend(state);
    }
    tree["checkpoint"] = Value::Object(kept);
    Ok(tree)
}

/// A worked example's config tree, its state file left to `--state`.
fn example(name: &str) -> Result<Value> {
    let text = match name {
        "trading-day" => include_str!("../../config/trading-day-seed.toml"),
        other => {
            return Err(Error::config(
                "--example",
                format!("no example {other:?}; one of: trading-day"),
            ))
        }
    };
    let built = ::config::Config::builder()
        .add_source(::config::File::from_str(text, ::config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize::<Value>())
        .map_err(|e| Error::config("--example", e.to_string()))?;
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use crate::commands::oneliner::toml_text;
    use clap::Parser;
    use std::path::Path;

    fn parse(args: &[&str]) -> Command {
        Cli::try_parse_from([&["tidegate"], args].concat()).unwrap().command
    }

    #[test]
    fn the_trading_day_example_keeps_its_seed_and_leaves_the_state_file_to_state() {
        let Command::Seed(args) = parse(&["seed", "day", "-b", "k:1", "--example", "trading-day", "--count", "30"])
        else {
            panic!("not a seed");
        };
        let tree = seed_tree(&args).unwrap();
        assert_eq!(tree["source"]["seed"], json!(20261127));
        assert_eq!(tree["source"]["count"], json!(30));
        assert_eq!(tree["source"]["end_marker"]["key"], json!("CLOSE"));
        assert_eq!(tree["sink"]["topic"], json!("day"));
        assert_eq!(tree["sink"]["create_topic"], json!({ "partitions": 3 }));
        assert_eq!(
            tree["checkpoint"],
            json!({ "interval": "2s" }),
            "no state file without --state"
        );
        let text = toml_text::render(&tree, &[]);
        crate::config::load_text(Path::new("seed"), &text, &[]).unwrap();
    }
}
