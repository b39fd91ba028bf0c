//! serde's deserialization messages in a person's words: "expected an integer, found the text
//! \"two\"" rather than "invalid type: string \"two\", expected i64"; an unknown key or value with
//! the closest known one ("did you mean `topics`?", by edit distance), and the whole list only
//! when nothing is close; a missing key or table said as such. serde's messages are stable text
//! (serde::de::Error's impls), so this reads them rather than re-implementing a deserializer.

/// `message` (serde's, about the key `key`) as a person reads it.
pub fn humane(key: &str, message: &str) -> String {
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.rsplit_once(", expected ") {
            return format!("expected {}, found {}", expected_words(expected), found_words(found));
        }
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        if let Some((found, expected)) = rest.rsplit_once(", expected ") {
            return format!("expected {}, found {}", expected_words(expected), found_words(found));
        }
    }
    for (prefix, what) in [("unknown field `", "key"), ("unknown variant `", "value")] {
        if let Some(rest) = message.strip_prefix(prefix) {
            let (name, known) = rest.split_once('`').unwrap_or((rest, ""));
            return unknown(what, name, &names_in(known));
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let field = rest.split('`').next().unwrap_or(rest);
        // a whole section: its table
        if key == field && !key.contains('.') {
            return format!("is missing: add a [{field}] table");
        }
        return "is required".to_string();
    }
    message.to_string()
}

/// The backquoted names in serde's "expected one of `a`, `b`" tail.
fn names_in(known: &str) -> Vec<&str> {
    known.split('`').skip(1).step_by(2).collect()
}

/// An unknown key (or value) `name`: the closest of `known` when one is close, else all of them.
fn unknown(what: &str, name: &str, known: &[&str]) -> String {
    if known.is_empty() {
        return format!("unknown {what} `{name}`: this table takes none");
    }
    let closest = known
        .iter()
        .map(|k| (strsim::damerau_levenshtein(&name.to_lowercase(), &k.to_lowercase()), *k))
        .min();
    match closest {
        // a slip of a few letters: about a third of the name at most
        Some((distance, k)) if distance <= (name.chars().count() / 3).max(1) => {
            format!("unknown {what} `{name}`: did you mean `{k}`?")
        }
        _ => format!("unknown {what} `{name}`; the {what}s here are {}", known.join(", ")),
    }
}

/// serde's name of what a key takes, in words.
fn expected_words(expected: &str) -> String {
    let e = expected.trim();
    let integer = [
        "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize",
    ];
    if integer.contains(&e) {
        return if e.starts_with('u') {
            "a whole number, 0 or more".to_string()
        } else {
            "a whole number".to_string()
        };
    }
    match e {
        "f32" | "f64" => "a number".to_string(),
        "a string" | "a borrowed string" => "text".to_string(),
        "a boolean" => "true or false".to_string(),
        "a sequence" => "a list, like [\"a\", \"b\"]".to_string(),
        "a map" => "a table, like { key = \"value\" }".to_string(),
        "a character" => "one character".to_string(),
        other if other.starts_with("struct ") => "a table".to_string(),
        other if other.starts_with("enum ") => "one of its words".to_string(),
        other => other.to_string(),
    }
}

/// serde's description of a value found, in words.
fn found_words(found: &str) -> String {
    let f = found.trim();
    let strip = |prefix: &str| f.strip_prefix(prefix).map(|v| v.trim_matches('`').to_string());
    if let Some(text) = f.strip_prefix("string ") {
        return format!("the text {text}");
    }
    if let Some(v) = strip("integer ") {
        return format!("the number {v}");
    }
    if let Some(v) = strip("floating point ") {
        return format!("the number {v}");
    }
    if let Some(v) = strip("boolean ") {
        return v;
    }
    match f {
        "map" => "a table".to_string(),
        "sequence" => "a list".to_string(),
        "null" | "unit value" => "nothing".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::humane;

    #[test]
    fn types_are_named_in_words() {
        assert_eq!(
            humane("job.parallelism", "invalid type: string \"two\", expected i64"),
            "expected a whole number, found the text \"two\""
        );
        assert_eq!(
            humane("source.count", "invalid type: floating point `1.5`, expected u64"),
            "expected a whole number, 0 or more, found the number 1.5"
        );
        assert_eq!(
            humane("source.topics", "invalid type: string \"t\", expected a sequence"),
            "expected a list, like [\"a\", \"b\"], found the text \"t\""
        );
        assert_eq!(
            humane("sink.flush", "invalid type: map, expected a boolean"),
            "expected true or false, found a table"
        );
    }

    #[test]
    fn a_slip_gets_the_closest_key_and_a_stranger_the_list() {
        let message = "unknown field `topcis`, expected one of `bootstrap_servers`, `topics`, `topic_pattern`";
        assert_eq!(
            humane("source.topcis", message),
            "unknown key `topcis`: did you mean `topics`?"
        );
        let message = "unknown field `colour`, expected one of `bootstrap_servers`, `topics`";
        assert_eq!(
            humane("source.colour", message),
            "unknown key `colour`; the keys here are bootstrap_servers, topics"
        );
        assert_eq!(
            humane("x.y", "unknown variant `jsno`, expected one of `json`, `avro`"),
            "unknown value `jsno`: did you mean `json`?"
        );
        assert_eq!(
            humane("x.y", "unknown field `a`, there are no fields"),
            "unknown key `a`: this table takes none"
        );
    }

    #[test]
    fn a_missing_section_is_named_once() {
        assert_eq!(humane("sink", "missing field `sink`"), "is missing: add a [sink] table");
        assert_eq!(humane("source.type", "missing field `type`"), "is required");
        // anything else as serde said it
        assert_eq!(humane("k", "something else"), "something else");
    }
}
