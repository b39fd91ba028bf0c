//! The docs against the code: every config key a page names (in backticks, or in a TOML block)
//! exists in the reference that `tidegate config-reference` generates.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::reference;

/// The pages a user reads, less the generated reference itself.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") && !path.ends_with("config.md") {
            pages.push(path);
        }
    }
    pages.sort();
    pages
}

/// Every key of the reference (`source.eof`, `job.instance.count`, …), and each section's `type`.
fn reference_keys() -> BTreeSet<String> {
    let markdown = reference::markdown();
    let mut keys: BTreeSet<String> = markdown
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .map(str::to_string)
        .collect();
    keys.extend(["source.type".to_string(), "sink.type".to_string()]);
    keys
}

/// Whether `key` is in the reference, or lies under a key that takes a table of any names
/// (`source.properties."fetch.min.bytes"`, `source.fields.price`).
fn known(key: &str, keys: &BTreeSet<String>) -> bool {
    let parts: Vec<&str> = key.split('.').collect();
    (2..=parts.len()).any(|n| keys.contains(&parts[..n].join(".")))
}

const SECTIONS: &[&str] = &["job", "source", "sink", "checkpoint", "metrics", "log"];

/// Names written like a key that are not config keys: the crash points of
/// docs/reliability.md, and Kafka's own settings that share a section's name.
fn not_keys() -> BTreeSet<&'static str> {
    let mut names: BTreeSet<&str> = crate::core::failpoint::POINTS.iter().copied().collect();
    names.insert("log.retention.ms");
    names
}

/// `section.key.more` at the start of a code span, up to the first character a key does not
/// hold (a quoted property name ends it: what follows is Kafka's).
fn key_in_span(span: &str) -> Option<&str> {
    let end = span
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(span.len());
    let key = span[..end].trim_end_matches('.');
    let (section, rest) = key.split_once('.')?;
    (SECTIONS.contains(&section) && !rest.is_empty()).then_some(key)
}

/// The dotted keys of a TOML fragment's sections (`[source]` … `eof = …` gives `source.eof`).
fn keys_in_toml(toml: &str) -> Result<Vec<String>, String> {
    let parsed: Value = config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()
        .and_then(|c| c.try_deserialize())
        .map_err(|e| e.to_string())?;
    fn walk(prefix: &str, v: &Value, out: &mut Vec<String>) {
        out.push(prefix.to_string());
        if let Value::Object(fields) = v {
            for (k, v) in fields {
                walk(&format!("{prefix}.{k}"), v, out);
            }
        }
    }
    let mut out = Vec::new();
    for section in SECTIONS {
        if let Some(Value::Object(fields)) = parsed.get(*section) {
            for (k, v) in fields {
                walk(&format!("{section}.{k}"), v, &mut out);
            }
        }
    }
    Ok(out)
}

#[test]
fn every_config_key_the_docs_name_is_in_the_reference() {
    let keys = reference_keys();
    let not_keys = not_keys();
    let mut unknown = Vec::new();
    let mut seen = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("a page");
        let name = page.file_name().unwrap_or_default().to_string_lossy().into_owned();
        for span in text.split('`').skip(1).step_by(2).filter(|s| !s.contains('\n')) {
            if let Some(key) = key_in_span(span).filter(|k| !not_keys.contains(k)) {
                seen += 1;
                if !known(key, &keys) {
                    unknown.push(format!("{name}: `{span}`"));
                }
            }
        }
        for block in text.split("```toml\n").skip(1) {
            let toml = block.split("```").next().unwrap_or_default();
            match keys_in_toml(toml) {
                Ok(found) => {
                    for key in found {
                        seen += 1;
                        if !known(&key, &keys) {
                            unknown.push(format!("{name}: {key} in a TOML block"));
                        }
                    }
                }
                Err(e) => unknown.push(format!("{name}: a TOML block that does not parse ({e}):\n{toml}")),
            }
        }
    }
    assert!(seen > 200, "only {seen} keys found in the docs: is the scan broken?");
    assert!(
        unknown.is_empty(),
        "keys the reference does not have:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_scan_finds_keys_and_refuses_unknown_ones() {
    let keys = reference_keys();
    assert_eq!(
        key_in_span(r#"source.properties."fetch.max.bytes" = "1000""#),
        Some("source.properties")
    );
    assert_eq!(key_in_span("metrics.linger = \"30s\""), Some("metrics.linger"));
    assert_eq!(key_in_span("sources.eof"), None);
    assert!(known("source.fields.price", &keys) && known("sink.type", &keys));
    assert!(!known("source.eoff", &keys) && !known("metrics.lingering", &keys));
    let found = keys_in_toml("[source]\neof = 'x'\nproperties = { \"a.b\" = \"1\" }\n").unwrap();
    assert!(
        found.contains(&"source.eof".to_string()) && found.contains(&"source.properties".to_string()),
        "{found:?}"
    );
}
