//! `tidegate validate`: a config checked, and what it would run said in its own words.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::Result;

/// `tidegate validate`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct ValidateArgs {
    /// The job's TOML config.
    #[arg(long)]
    pub(crate) config: PathBuf,
    /// Override a config key, e.g. `--set job.parallelism=4` (repeatable).
    #[arg(long = "set", value_name = "KEY.PATH=VALUE")]
    pub(crate) sets: Vec<String>,
    /// Also connect to the Kafka clusters the job reads and writes, as the job would (TLS,
    /// SASL), and the schema registries it uses: a refusal or an unreachable service exits 1.
    #[arg(long)]
    pub(crate) connect: bool,
}

/// `tidegate validate`: the config as it would run, in its own words.
pub(crate) fn validate(args: ValidateArgs) -> Result<()> {
    let (config, sets, connect): (&Path, &[String], bool) = (&args.config, &args.sets, args.connect);
    let c = crate::config::load(config, sets)?;
    let mut out = std::io::stdout().lock();
    let job = &c.job;
    let mut lines = vec![format!("config {} is valid", config.display())];
    let instance = if job.instance.count > 1 {
        format!(", instance {} of {}", job.instance.index, job.instance.count)
    } else {
        String::new()
    };
    let state = match (&c.checkpoint.store, &c.checkpoint.path) {
        (crate::checkpoint_store::StoreConfig::Kafka(k), _) => format!(
            " to kafka topic {} at {} (keys {}/…, from {}.bootstrap_servers)",
            k.topic, k.bootstrap_servers, k.owner, k.cluster_of
        ),
        (_, Some(p)) => format!(" to {}", p.display()),
        (_, None) => " (no state file: every run starts from scratch)".to_string(),
    };
    lines.push(format!(
        "  job {}: {} reader{}{instance}, a checkpoint every {}{state}",
        job.name,
        job.parallelism,
        if job.parallelism == 1 { "" } else { "s" },
        humantime::format_duration(c.checkpoint.interval)
    ));
    if let Some(d) = job.max_duration {
        lines.push(format!("  stops after {}", humantime::format_duration(d)));
    }
    lines.extend(
        c.source
            .describe()
            .into_iter()
            .chain(c.source.unbounded_hint().map(|h| format!("  {h}")))
            .chain(c.sink.describe())
            .map(|l| format!("  {l}")),
    );
    lines.push(match c.metrics.listen {
        Some(addr) => format!("  metrics on http://{addr}/metrics"),
        None => "  no metrics endpoint".to_string(),
    });
    if connect {
        crate::assembly::logging::init(c.log.format);
        lines.extend(
            c.source
                .check_connection()?
                .into_iter()
                .chain(c.sink.check_connection()?)
                .map(|l| format!("  {l}")),
        );
        // the registry is contacted (reachable, credentials accepted, certificate trusted): a
        // mistake there would otherwise show only at the first record
        for registry in c.source.schema_registries() {
            let subjects = crate::format::registry::check(registry)?;
            let plural = if subjects == 1 { "" } else { "s" };
            lines.push(format!(
                "  schema registry {registry}: reachable, {subjects} subject{plural}"
            ));
        }
    }
    for line in lines {
        // a closed pipe (`validate | head`) ends the output, it is not a failure
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    Ok(())
}
