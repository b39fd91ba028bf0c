//! The config reference (docs/config.md), generated from the raw config structs' doc comments
//! through their JSON schemas, so the documentation is written once, in the code. Sources and
//! sinks contribute their sections through the connector registry.

use schemars::JsonSchema;
use serde_json::Value;

use super::raw::*;
use crate::connector::registry::{SinkConfig, SourceConfig};

fn type_name(prop: &Value, defs: &Value) -> String {
    if let Some(r) = prop.get("$ref").and_then(Value::as_str) {
        let name = r.rsplit('/').next().unwrap_or(r);
        let variants = defs
            .get(name)
            .and_then(|d| d.get("oneOf").or_else(|| d.get("anyOf")))
            .and_then(Value::as_array);
        return match variants {
            // an enum of names: `topic`, `record` or …
            Some(v) if v.iter().all(|v| v.get("const").is_some()) => {
                let names: Vec<String> = v
                    .iter()
                    .filter_map(|v| v.get("const"))
                    .map(|c| format!("`{}`", c.as_str().unwrap_or_default()))
                    .collect();
                format!("one of {}", names.join(", "))
            }
            // an untagged choice: a URL or a table
            Some(v) => {
                let mut names: Vec<String> = Vec::new();
                for n in v.iter().map(|v| type_name(v, defs)) {
                    if !names.contains(&n) {
                        names.push(n);
                    }
                }
                names.join(" or ")
            }
            None => "table".into(),
        };
    }
    if let Some(any) = prop.get("anyOf").and_then(Value::as_array) {
        let names: Vec<String> = any
            .iter()
            .filter(|v| v.get("type").and_then(Value::as_str) != Some("null"))
            .map(|v| type_name(v, defs))
            .collect();
        return names.join(" or ");
    }
    let kinds: Vec<&str> = match prop.get("type") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).filter(|s| *s != "null").collect(),
        _ => return "any".into(),
    };
    kinds
        .iter()
        .map(|k| match *k {
            "string" => "text".to_string(),
            "integer" => "integer".to_string(),
            "number" => "number".to_string(),
            "boolean" => "bool".to_string(),
            "array" => format!(
                "list of {}",
                prop.get("items")
                    .map(|i| type_name(i, defs))
                    .unwrap_or_else(|| "any".into())
            ),
            "object" => "table".to_string(),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" or ")
}

fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A markdown table of an object schema's fields, then sections for nested tables.
fn section(out: &mut String, title: &str, prefix: &str, schema: &Value, defs: &Value, skip: &[&str]) {
    out.push_str(&format!("\n## `{title}`\n\n"));
    if let Some(d) = schema.get("description").and_then(Value::as_str) {
        out.push_str(&one_line(d));
        out.push_str("\n\n");
    }
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        out.push_str("No options.\n");
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    out.push_str("| key | type | default | meaning |\n|---|---|---|---|\n");
    let mut nested = Vec::new();
    for (name, prop) in props {
        if skip.contains(&name.as_str()) {
            continue;
        }
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let default = match prop.get("default") {
            Some(Value::Null) | None if required.contains(&name.as_str()) => "required".to_string(),
            Some(Value::Null) | None => "—".to_string(),
            Some(Value::Object(m)) if m.is_empty() => "—".to_string(),
            Some(v) => format!("`{v}`"),
        };
        let description = prop.get("description").and_then(Value::as_str).unwrap_or("");
        out.push_str(&format!(
            "| `{key}` | {} | {default} | {} |\n",
            type_name(prop, defs),
            one_line(description)
        ));
        let target = prop
            .get("$ref")
            .or_else(|| {
                prop.get("anyOf")
                    .and_then(|a| a.as_array())
                    .and_then(|a| a.iter().find_map(|v| v.get("$ref")))
            })
            .and_then(Value::as_str);
        if let Some(r) = target {
            let def_name = r.rsplit('/').next().unwrap_or(r);
            if let Some(def) = defs.get(def_name) {
                // a table, or a choice one of whose variants is a table (a URL or a table)
                let table = std::iter::once(def)
                    .chain(
                        def.get("anyOf")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .filter_map(|v| v.get("$ref").and_then(Value::as_str))
                            .filter_map(|r| defs.get(r.rsplit('/').next().unwrap_or(r))),
                    )
                    .find(|d| d.get("properties").is_some());
                if let Some(def) = table {
                    nested.push((key, def.clone()));
                }
            }
        }
    }
    for (key, def) in nested {
        section(out, &key, &key, &def, defs, &[]);
    }
}

fn schema_of<T: JsonSchema>() -> (Value, Value) {
    let schema = schemars::schema_for!(T).to_value();
    let defs = schema.get("$defs").cloned().unwrap_or(Value::Null);
    (schema, defs)
}

/// docs/config.md.
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration reference\n\n\
         Generated from the code by `tidegate config-reference`; a test keeps this file current.\n\n\
         A config is a TOML file. Any key can be overridden by an environment variable\n\
         `TIDEGATE__SECTION__KEY` (e.g. `TIDEGATE__JOB__PARALLELISM=4`) or by\n\
         `--set section.key=value` (the value is read as JSON when it parses, else as text; quote\n\
         segments that contain dots: `--set 'source.properties.\"fetch.min.bytes\"=1'`).\n\
         Durations are text like `\"250ms\"`, `\"5s\"`, `\"10m\"`. Unknown keys are errors.\n",
    );
    let (schema, defs) = schema_of::<RawConfig>();
    section(&mut out, "top level", "", &schema, &defs, &[]);
    for s in SourceConfig::reference().into_iter().chain(SinkConfig::reference()) {
        let (schema, defs) = &s.schema;
        section(&mut out, &s.title, s.prefix, schema, defs, &[]);
    }
    out
}
