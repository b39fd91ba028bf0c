//! Configuration: a TOML file loaded with the `config` crate and overridden by `TIDEGATE__…`
//! environment variables and `--set key.path=value`, deserialized into the raw structs of
//! [`raw`], then validated once into typed settings. The `[source]` and `[sink]` tables are
//! validated by their connectors (see [`crate::connector`]); every error names the offending key.

mod clients;
mod group;
pub mod raw;
pub mod reference;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

pub use crate::connector::registry::{SinkConfig, SourceConfig};
use crate::connector::values::{duration_at, keyword, optional_duration, positive, typed};
pub use crate::connector::JobConfig;
use crate::core::{FetcherMode, Instance};
use crate::error::{Error, Result};
pub use crate::metrics::MetricsConfig;
use raw::*;

/// A validated job configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub job: JobConfig,
    pub source: SourceConfig,
    pub sink: SinkConfig,
    pub checkpoint: CheckpointConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
}

#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub path: Option<PathBuf>,
    pub interval: Duration,
    /// `checkpoint.store`: the state file, or a Kafka topic.
    pub store: crate::checkpoint_store::StoreConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone)]
pub struct LogConfig {
    pub format: LogFormat,
}

/// Load, override and validate a config file.
pub fn load(path: &Path, sets: &[String]) -> Result<Config> {
    let (tree, overrides) = load_tree(path, sets)?;
    validate(path, tree).map_err(|e| name_the_override(e, &overrides))
}

/// A key the environment or `--set` gave, and which of them gave it.
struct Override {
    key: String,
    origin: String,
}

/// An error about a key an override gave says which one: the file may not even have the key.
fn name_the_override(e: Error, overrides: &[Override]) -> Error {
    let Error::Config { key, message } = e else {
        return e;
    };
    let given = |o: &&Override| {
        key == o.key || key.starts_with(&format!("{}.", o.key)) || o.key.starts_with(&format!("{key}."))
    };
    // the last override of a key is the one that counts
    match overrides.iter().rev().find(given) {
        Some(o) => Error::config(key, format!("{message} (set by {})", o.origin)),
        None => Error::config(key, message),
    }
}

/// The merged config tree (file, environment, `--set`), before validation, and the keys the
/// environment and `--set` gave.
fn load_tree(path: &Path, sets: &[String]) -> Result<(Value, Vec<Override>)> {
    if !path.is_file() {
        return Err(Error::config(
            "--config",
            format!("{} does not exist or is not a file", path.display()),
        ));
    }
    let file = ::config::File::from(path).format(::config::FileFormat::Toml);
    merge(file, path, path.parent().unwrap_or(Path::new("")), sets)
}

/// Load, override and validate a config given as TOML text (a one-liner's, see
/// [`crate::oneliner`]): the same path as a file, with `origin` naming it in errors and relative
/// paths relative to the working directory.
pub fn load_text(origin: &Path, text: &str, sets: &[String]) -> Result<Config> {
    let source = ::config::File::from_str(text, ::config::FileFormat::Toml);
    let (tree, overrides) = merge(source, origin, Path::new(""), sets)?;
    validate(origin, tree).map_err(|e| name_the_override(e, &overrides))
}

/// A TOML source merged with the environment and `--set`; relative paths it holds are made
/// relative to `folder`.
fn merge<S>(source: S, origin: &Path, folder: &Path, sets: &[String]) -> Result<(Value, Vec<Override>)>
where
    S: ::config::Source + Send + Sync + 'static,
{
    let built = ::config::Config::builder()
        .add_source(source)
        .build()
        .map_err(|e| Error::config(origin.display().to_string(), e.to_string()))?;
    let mut tree: Value = built
        .try_deserialize()
        .map_err(|e| Error::config(origin.display().to_string(), e.to_string()))?;
    resolve_paths(&mut tree, folder);
    let mut env: Vec<(String, String)> = std::env::vars().filter(|(k, _)| k.starts_with("TIDEGATE__")).collect();
    env.sort();
    let mut overrides = Vec::new();
    for (name, value) in env {
        let key = env_path(&name);
        set_value(&mut tree, &key, &value, &name)?;
        overrides.push(Override {
            key: key.join("."),
            origin: format!("the environment variable {name}"),
        });
    }
    for set in sets {
        let key = apply_set(&mut tree, set)?;
        overrides.push(Override {
            key: key.join("."),
            origin: format!("--set {set}"),
        });
    }
    Ok((tree, overrides))
}

/// Relative paths written in the config file are relative to the file's folder (as in a
/// compose file), so a config runs the same from anywhere; paths given with `--set` or the
/// environment stay relative to the working directory (they are applied after this).
pub fn resolve_paths(tree: &mut Value, folder: &Path) {
    let kind = |section: &str| {
        tree.get(section)
            .and_then(|s| s.get("type"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut keys: Vec<String> = vec!["checkpoint.path".to_string()];
    if let Some(k) = kind("source") {
        keys.extend(SourceConfig::path_keys(&k).iter().map(|p| format!("source.{p}")));
    }
    if let Some(k) = kind("sink") {
        keys.extend(SinkConfig::path_keys(&k).iter().map(|p| format!("sink.{p}")));
    }
    for key in keys {
        let mut node = Some(&mut *tree);
        for segment in key.split('.') {
            node = node.and_then(|n| n.get_mut(segment));
        }
        if let Some(Value::String(text)) = node {
            let written = Path::new(text.as_str());
            if written.is_relative() {
                *text = lexically_normal(&folder.join(written)).display().to_string();
            }
        }
    }
}

/// `a/b/../c` as `a/c`, without touching the file system (the file may not exist yet).
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir if matches!(out.components().next_back(), Some(Component::Normal(_))) => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The config path of a `TIDEGATE__SECTION__KEY` variable: `__` separates the levels, names are
/// lowercased. Inside a `properties` table the rest is one librdkafka property, whose dots are
/// written as `_`: `TIDEGATE__SOURCE__PROPERTIES__FETCH_MIN_BYTES` is `fetch.min.bytes`.
/// (Handled here rather than by the `config` crate's environment source, which can set neither
/// lists nor dotted keys.)
fn env_path(name: &str) -> Vec<String> {
    let parts: Vec<String> = name
        .trim_start_matches("TIDEGATE__")
        .split("__")
        .map(str::to_lowercase)
        .collect();
    match parts.iter().position(|p| p == "properties") {
        Some(i) if i + 1 < parts.len() => {
            let mut path = parts[..=i].to_vec();
            path.push(parts[i + 1..].join(".").replace('_', "."));
            path
        }
        _ => parts,
    }
}

/// Split a `--set` path on dots, keeping quoted segments whole: `source.properties."fetch.min.bytes"`.
fn set_path(path: &str) -> std::result::Result<Vec<String>, String> {
    let mut segments = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in path.chars() {
        match c {
            '"' => quoted = !quoted,
            '.' if !quoted => segments.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    if quoted {
        return Err("unclosed quote".into());
    }
    segments.push(current);
    if segments.iter().any(String::is_empty) {
        return Err("empty segment".into());
    }
    Ok(segments)
}

/// Apply one `key.path=value` override; the value is JSON if it parses as JSON, else text.
/// Returns the key's path.
pub fn apply_set(tree: &mut Value, set: &str) -> Result<Vec<String>> {
    let Some((path, value)) = set.split_once('=') else {
        return Err(Error::config("--set", format!("{set:?} is not key.path=value")));
    };
    let segments = set_path(path.trim()).map_err(|e| Error::config("--set", format!("{path:?}: {e}")))?;
    if let Some(i) = segments.iter().position(|s| s == "properties") {
        if segments.len() > i + 2 {
            let table = segments[..=i].join(".");
            let name = segments[i + 1..].join(".");
            return Err(Error::config(
                table.clone(),
                format!(
                    "librdkafka property names contain dots, so quote the name: --set '{table}.\"{name}\"={value}'"
                ),
            ));
        }
    }
    set_value(tree, &segments, value, "--set")?;
    Ok(segments)
}

/// Set `segments` to `text`, read as JSON when it parses (numbers, lists, tables), else as text.
fn set_value(tree: &mut Value, segments: &[String], text: &str, origin: &str) -> Result<()> {
    let value: Value = serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()));
    let mut node = tree;
    for (i, seg) in segments.iter().enumerate() {
        if !node.is_object() {
            return Err(Error::config(
                segments[..i].join("."),
                format!("is not a table, so {origin} cannot go inside it"),
            ));
        }
        let map = node.as_object_mut().expect("checked");
        if i + 1 == segments.len() {
            map.insert(seg.clone(), value);
            return Ok(());
        }
        node = map
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    Ok(())
}

/// Validate a merged tree into a [`Config`].
pub fn validate(path: &Path, tree: Value) -> Result<Config> {
    let raw: RawConfig = typed("", tree)?;
    let job = validate_job(path, raw.job)?;
    let (kind, body) = tagged("source", raw.source, SourceConfig::TYPES)?;
    let source = SourceConfig::validate(&kind, body, &job)?;
    let (kind, body) = tagged("sink", raw.sink, SinkConfig::TYPES)?;
    let sink = SinkConfig::validate(&kind, body)?;
    let store = crate::checkpoint_store::validate(&raw.checkpoint, &job, &neighbours(&source, &sink))?;
    group::validate(&job, &source, &sink, &store)?;
    clients::check(&job, &source, &sink, &store)?;
    let checkpoint = CheckpointConfig {
        store,
        path: raw.checkpoint.path.map(PathBuf::from),
        interval: duration_at("checkpoint.interval", &raw.checkpoint.interval)?,
    };
    if checkpoint.interval.is_zero() {
        return Err(Error::config("checkpoint.interval", "must be more than 0"));
    }
    sink.check_checkpoint_interval(checkpoint.interval)?;
    let metrics = MetricsConfig::from_raw(raw.metrics)?;
    let log = LogConfig {
        format: keyword(
            "log.format",
            raw.log.format.as_deref(),
            LogFormat::Text,
            &[("text", LogFormat::Text), ("json", LogFormat::Json)],
        )?,
    };
    Ok(Config {
        job,
        source,
        sink,
        checkpoint,
        metrics,
        log,
    })
}

/// What the checkpoint store may take from the job's source and sink.
fn neighbours<'a>(source: &'a SourceConfig, sink: &'a SinkConfig) -> crate::checkpoint_store::Neighbours<'a> {
    let source_cluster = match source {
        SourceConfig::Kafka(k) => Some((k.settings.bootstrap_servers.as_str(), &k.settings.properties)),
        _ => None,
    };
    let (sink_cluster, exactly_once_sink) = match sink {
        SinkConfig::Kafka(k) => (
            Some((k.settings.bootstrap_servers.as_str(), &k.settings.properties)),
            (k.settings.delivery == crate::client::exactly_once::Delivery::ExactlyOnce)
                .then_some(k.settings.bootstrap_servers.as_str()),
        ),
        _ => (None, None),
    };
    crate::checkpoint_store::Neighbours {
        source_cluster,
        sink_cluster,
        exactly_once_sink,
    }
}

fn validate_job(path: &Path, raw: RawJob) -> Result<JobConfig> {
    let name = raw.name.unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "tidegate".into())
    });
    let instance_set = raw.instance.is_some();
    let instance = match raw.instance {
        None => Instance::default(),
        Some(i) => {
            let count = positive("job.instance.count", i.count)?;
            if i.index < 0 || i.index as usize >= count {
                return Err(Error::config(
                    "job.instance.index",
                    format!("must be in 0..{count}, not {}", i.index),
                ));
            }
            Instance {
                index: i.index as usize,
                count,
            }
        }
    };
    let static_member = raw.member.is_some();
    let member = match raw.coordination.as_deref().unwrap_or("static") {
        "static" => {
            if raw.member.is_some() {
                return Err(Error::config(
                    "job.member",
                    "only used with job.coordination = \"group\"",
                ));
            }
            None
        }
        "group" => {
            if instance_set {
                return Err(Error::config(
                    "job.instance",
                    "not used with job.coordination = \"group\" (the consumer group assigns the partitions): remove it",
                ));
            }
            Some(member_name(raw.member)?)
        }
        other => {
            return Err(Error::config(
                "job.coordination",
                format!("unknown coordination {other:?}; one of static, group"),
            ))
        }
    };
    Ok(JobConfig {
        static_member: static_member && member.is_some(),
        member,
        name,
        parallelism: positive("job.parallelism", raw.parallelism)?,
        max_duration: optional_duration("job.max_duration", raw.max_duration.as_deref())?,
        instance,
        fetcher_mode: keyword(
            "job.fetcher_mode",
            raw.fetcher_mode.as_deref(),
            FetcherMode::Single,
            &[("single", FetcherMode::Single), ("per_split", FetcherMode::PerSplit)],
        )?,
        queue_capacity: positive("job.queue_capacity", raw.queue_capacity)?,
    })
}

/// `job.member`, or the host name: letters, digits, `.`, `_` and `-` (it names state records and
/// transactional ids).
fn member_name(configured: Option<String>) -> Result<String> {
    let name = match configured {
        Some(name) => name,
        None => std::env::var("HOSTNAME")
            .ok()
            .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Error::config("job.member", "required: no host name to default to"))?,
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(Error::config(
            "job.member",
            format!("{name:?} must be letters, digits, '.', '_' and '-' only"),
        ));
    }
    Ok(name)
}

/// Split a `source`/`sink` table into its `type` and the rest.
fn tagged(section: &str, value: Value, types: &[&str]) -> Result<(String, Value)> {
    let Value::Object(mut map) = value else {
        return Err(Error::config(section, "must be a table"));
    };
    let key = format!("{section}.type");
    let kind = match map.remove("type") {
        Some(Value::String(s)) => s,
        Some(other) => return Err(Error::config(key, format!("must be text, not {other}"))),
        None => return Err(Error::config(key, format!("is required: one of {}", types.join(", ")))),
    };
    if !types.contains(&kind.as_str()) {
        return Err(Error::config(
            key,
            format!("unknown type {kind:?}; one of {}", types.join(", ")),
        ));
    }
    Ok((kind, Value::Object(map)))
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_checks;
#[cfg(test)]
mod tests_docs;
