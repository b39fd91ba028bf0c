//! Where the Kafka sink writes each record and with which headers: `sink.topic` as a literal or a
//! template over the record (`"{headers.tidegate-source-topic}"`, `"{topic}-replay"`), and the
//! `[sink.headers]` rules (drop, then rename, then set), with their validation.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::connector::RecordCheck;
use crate::error::{Error, Result};
use crate::record::{Header, Record};

/// `[sink.headers]`: applied in this order: `drop`, then `rename`, then `set`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHeaders {
    /// Header names to remove, each a name or a pattern where `*` stands for any run of
    /// characters (`"x-replicator-*"`); every header matching one is removed.
    #[serde(default)]
    pub drop: Vec<String>,
    /// Headers to rename, `{ "old" = "new" }`: every header named `old` (after `drop`) is named
    /// `new`, in place; each header is renamed once, by its name as read.
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    /// Headers to set, `{ "x-replayed-by" = "tidegate" }`: every header of that name (after
    /// `drop` and `rename`) is removed and one with this UTF-8 value is added at the end.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
}

/// The validated header rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderRules {
    drop: Vec<String>,
    rename: BTreeMap<String, String>,
    set: BTreeMap<String, String>,
}

/// Whether `name` matches `pattern`, where `*` in the pattern matches any run of characters.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty(); // no `*`: the whole name
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl HeaderRules {
    /// Check the raw rules; every error names its key (`sink.headers.rename."old"`).
    pub fn validate(raw: RawHeaders) -> Result<Self> {
        let dropped = |name: &str| raw.drop.iter().find(|p| glob_matches(p, name));
        for (i, p) in raw.drop.iter().enumerate() {
            if p.is_empty() {
                return Err(Error::config(format!("sink.headers.drop[{i}]"), "must not be empty"));
            }
        }
        for (old, new) in &raw.rename {
            let key = format!("sink.headers.rename.\"{old}\"");
            if old.is_empty() || new.is_empty() {
                return Err(Error::config(key, "names must not be empty"));
            }
            if old == new {
                return Err(Error::config(key, "renames a header to its own name"));
            }
            if let Some(p) = dropped(old) {
                return Err(Error::config(
                    key,
                    format!("{old:?} is dropped first (sink.headers.drop {p:?}): the rename could never apply"),
                ));
            }
            if let Some(p) = dropped(new) {
                return Err(Error::config(
                    key,
                    format!("renames into {new:?}, a name sink.headers.drop removes ({p:?})"),
                ));
            }
            if raw.set.contains_key(new) {
                return Err(Error::config(
                    key,
                    format!("renames into {new:?}, which sink.headers.set replaces"),
                ));
            }
        }
        for name in raw.set.keys() {
            let key = format!("sink.headers.set.\"{name}\"");
            if name.is_empty() {
                return Err(Error::config(key, "names must not be empty"));
            }
            if let Some(p) = dropped(name) {
                return Err(Error::config(
                    key,
                    format!("sets {name:?}, a name sink.headers.drop removes ({p:?})"),
                ));
            }
        }
        Ok(HeaderRules {
            drop: raw.drop,
            rename: raw.rename,
            set: raw.set,
        })
    }

    /// No rule: headers go out as read.
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.rename.is_empty() && self.set.is_empty()
    }

    /// `headers` after the rules: drop, rename, set.
    pub fn apply(&self, headers: &[Header]) -> Vec<Header> {
        let mut out: Vec<Header> = headers
            .iter()
            .filter(|h| !self.drop.iter().any(|p| glob_matches(p, &h.key)))
            .map(|h| match self.rename.get(&h.key) {
                Some(new) => Header {
                    key: new.clone(),
                    value: h.value.clone(),
                },
                None => h.clone(),
            })
            .filter(|h| !self.set.contains_key(&h.key))
            .collect();
        out.extend(self.set.iter().map(|(k, v)| Header {
            key: k.clone(),
            value: Some(v.clone().into_bytes()),
        }));
        out
    }

    /// For the sink's fingerprint and `validate`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({ "drop": self.drop, "rename": self.rename, "set": self.set })
    }
}

/// One piece of a topic template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Topic,
    Partition,
    Key,
    Header(String),
}

/// `sink.topic`: a topic name, or a template resolved per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicTemplate {
    text: String,
    /// `None` for a literal topic.
    parts: Option<Vec<Part>>,
}

/// Kafka's rule for a topic name: 1 to 249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn check_topic_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("the topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("{name:?} is not a valid topic name"));
    }
    if name.len() > 249 {
        return Err(format!("topic name {name:?} is longer than 249 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{name:?} is not a valid topic name ({c:?}: only ASCII letters, digits, '.', '_' and '-')"
        ));
    }
    Ok(())
}

impl TopicTemplate {
    /// Parse `sink.topic`: `{topic}`, `{partition}`, `{key}` and `{headers.NAME}` are replaced
    /// per record; text without braces is a literal topic (which must be a valid name).
    pub fn parse(text: &str) -> Result<Self> {
        let key = "sink.topic";
        if text.trim().is_empty() {
            return Err(Error::config(key, "must not be empty"));
        }
        if !text.contains(['{', '}']) {
            check_topic_name(text).map_err(|e| Error::config(key, e))?;
            return Ok(TopicTemplate {
                text: text.to_string(),
                parts: None,
            });
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                Some(i) if rest.as_bytes()[i] == b'}' => {
                    return Err(Error::config(key, format!("{text:?}: a '}}' without its '{{'")));
                }
                Some(i) => {
                    if i > 0 {
                        parts.push(Part::Text(rest[..i].to_string()));
                    }
                    let Some(end) = rest[i..].find('}') else {
                        return Err(Error::config(key, format!("{text:?}: a '{{' without its '}}'")));
                    };
                    let field = &rest[i + 1..i + end];
                    parts.push(match field {
                        "topic" => Part::Topic,
                        "partition" => Part::Partition,
                        "key" => Part::Key,
                        _ => match field.strip_prefix("headers.") {
                            Some(name) if !name.is_empty() => Part::Header(name.to_string()),
                            _ => {
                                return Err(Error::config(
                                    key,
                                    format!(
                                        "{text:?}: unknown field {{{field}}}; one of {{topic}}, {{partition}}, \
                                         {{key}}, {{headers.NAME}}"
                                    ),
                                ))
                            }
                        },
                    });
                    rest = &rest[i + end + 1..];
                }
                None => {
                    parts.push(Part::Text(rest.to_string()));
                    rest = "";
                }
            }
        }
        Ok(TopicTemplate {
            text: text.to_string(),
            parts: Some(parts),
        })
    }

    /// As written in the config.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The topic when it is not a template.
    pub fn literal(&self) -> Option<&str> {
        self.parts.is_none().then_some(self.text.as_str())
    }

    /// The topic `record` goes to; an error says why it has none (a missing header, a key that
    /// is not UTF-8, an invalid name).
    pub fn resolve<'a>(&'a self, record: &Record) -> std::result::Result<Cow<'a, str>, String> {
        let Some(parts) = &self.parts else {
            return Ok(Cow::Borrowed(&self.text));
        };
        let utf8 = |what: &str, bytes: &[u8]| {
            std::str::from_utf8(bytes)
                .map(str::to_string)
                .map_err(|_| format!("{what} is not UTF-8"))
        };
        let mut out = String::new();
        for part in parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Topic => out.push_str(record.topic.as_deref().ok_or("the record has no topic")?),
                Part::Partition => out.push_str(&record.partition.ok_or("the record has no partition")?.to_string()),
                Part::Key => out.push_str(&utf8("the key", record.key.as_deref().ok_or("the record has no key")?)?),
                Part::Header(name) => {
                    let header = record
                        .headers
                        .iter()
                        .find(|h| h.key == *name)
                        .ok_or_else(|| format!("the record has no header {name:?}"))?;
                    let value = header
                        .value
                        .as_deref()
                        .ok_or_else(|| format!("header {name:?} is null"))?;
                    out.push_str(&utf8(&format!("header {name:?}"), value)?);
                }
            }
        }
        check_topic_name(&out)?;
        Ok(Cow::Owned(out))
    }

    /// The check the source runs on each record (templates only).
    pub fn record_check(&self) -> Option<RecordCheck> {
        self.parts.as_ref()?;
        let template = self.clone();
        Some(Arc::new(move |record: &Record| {
            template
                .resolve(record)
                .map(|_| ())
                .map_err(|e| format!("sink.topic {:?}: {e}", template.text))
        }))
    }
}

#[cfg(test)]
mod tests;
