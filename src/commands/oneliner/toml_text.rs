//! A one-liner's config tree written as a TOML file a person would write: `[job]`, `[source]`,
//! `[sink]`, `[checkpoint]` sections with `type` first, small tables inline, and notes as
//! comments on top.

use serde_json::Value;

/// The sections in the order a config file lists them; any other comes after.
const SECTIONS: [&str; 6] = ["job", "source", "sink", "checkpoint", "metrics", "log"];

/// The tree as TOML text, `notes` as `#` lines above it.
pub fn render(tree: &Value, notes: &[String]) -> String {
    let mut out = String::new();
    for note in notes {
        for line in note.lines() {
            out.push_str(&format!("# {line}\n"));
        }
    }
    let Some(map) = tree.as_object() else {
        return out;
    };
    for (key, value) in map.iter().filter(|(_, v)| !v.is_object() && !v.is_null()) {
        out.push_str(&format!("{} = {}\n", key_text(key), value_text(value)));
    }
    let mut names: Vec<&String> = map.keys().filter(|k| map[k.as_str()].is_object()).collect();
    names.sort_by_key(|k| SECTIONS.iter().position(|s| s == k).unwrap_or(SECTIONS.len()));
    for name in names {
        section(&mut out, &key_text(name), &map[name.as_str()], true);
    }
    out
}

/// `[name]` with its keys (`type` first); in a top-level section, its tables of tables follow
/// as `[name.key]` (`[source.fields]`), deeper ones stay inline. An empty section is left out.
fn section(out: &mut String, name: &str, value: &Value, top: bool) {
    let Some(map) = value.as_object() else {
        return;
    };
    if map.values().all(Value::is_null) {
        return;
    }
    out.push_str(&format!("\n[{name}]\n"));
    let mut keys: Vec<&String> = map.keys().filter(|k| !map[k.as_str()].is_null()).collect();
    keys.sort_by_key(|k| k.as_str() != "type");
    let nested = |v: &Value| top && v.as_object().is_some_and(|m| m.values().any(Value::is_object));
    for key in keys.iter().filter(|k| !nested(&map[k.as_str()])) {
        out.push_str(&format!("{} = {}\n", key_text(key), value_text(&map[key.as_str()])));
    }
    for key in keys.iter().filter(|k| nested(&map[k.as_str()])) {
        section(out, &format!("{name}.{}", key_text(key)), &map[key.as_str()], false);
    }
}

/// A bare key where TOML allows one, else a quoted one.
fn key_text(key: &str) -> String {
    let bare = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        Value::String(key.to_string()).to_string()
    }
}

/// A string as a TOML literal string ('…', nothing escaped: CEL reads best so) where it can be
/// one, else as a basic string (JSON's escapes are TOML's).
fn string_text(s: &str) -> String {
    if !s.contains('\'') && !s.chars().any(char::is_control) {
        format!("'{s}'")
    } else {
        // JSON leaves DEL as it is, which TOML forbids in a string
        Value::String(s.to_string()).to_string().replace('\u{7f}', "\\u007F")
    }
}

/// A value on one line: inline arrays and tables.
fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => string_text(s),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Array(items) => format!("[{}]", items.iter().map(value_text).collect::<Vec<_>>().join(", ")),
        Value::Object(map) if map.is_empty() => "{}".to_string(),
        Value::Object(map) => {
            let entries: Vec<String> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", key_text(k), value_text(v)))
                .collect();
            format!("{{ {} }}", entries.join(", "))
        }
        // TOML has no null; keys holding one are left out above
        Value::Null => "''".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sections_in_order_type_first_small_tables_inline() {
        let tree = json!({
            "sink": { "type": "stdout" },
            "source": {
                "topics": ["a", "b"],
                "type": "kafka",
                "eof": "value.type == \"CLOSE\"",
                "where": "it's",
                "replay_speed": 60.0,
                "starting_offsets": { "timestamp": "2026-11-27T16:00:00.000Z" },
                "stopping_offsets": { "offsets": { "a:0": 5 } },
                "properties": { "fetch.min.bytes": 1 },
            },
            "job": { "name": "replay-a" },
            "checkpoint": {},
        });
        let text = render(&tree, &["made by a test".to_string()]);
        let expected = r#"# made by a test

[job]
name = 'replay-a'

[source]
type = 'kafka'
eof = 'value.type == "CLOSE"'
properties = { "fetch.min.bytes" = 1 }
replay_speed = 60.0
starting_offsets = { timestamp = '2026-11-27T16:00:00.000Z' }
topics = ['a', 'b']
where = "it's"

[source.stopping_offsets]
offsets = { "a:0" = 5 }

[sink]
type = 'stdout'
"#;
        assert_eq!(text, expected);
    }

    #[test]
    fn tables_nest_one_level_below_a_section() {
        let tree = json!({ "source": { "fields": { "id": { "uuid": {} }, "seq": { "sequence": { "start": 0 } } } } });
        let text = render(&tree, &[]);
        assert_eq!(
            text,
            "\n[source]\n\n[source.fields]\nid = { uuid = {} }\nseq = { sequence = { start = 0 } }\n"
        );
    }

    #[test]
    fn del_is_escaped() {
        // TOML forbids DEL raw in any string; JSON's encoder leaves it so
        assert_eq!(string_text("a\u{7f}b'"), "\"a\\u007Fb'\"");
    }

    #[test]
    fn control_characters_are_escaped() {
        let text = render(&json!({ "job": { "name": "a\nb\t'" } }), &[]);
        assert_eq!(text, "\n[job]\nname = \"a\\nb\\t'\"\n");
    }
}
