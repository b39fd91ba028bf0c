//! Field templates of the data generator: a tree of generator functions (sequence, uniform and
//! normal numbers, weighted choice, seeded UUIDs, stepped timestamps with jitter, `fake` strings,
//! nested objects) compiled once from the config. Record `i` is a pure function of `(seed, i)`:
//! one ChaCha8 stream per record, seeded from both, drawn in template order.

use std::collections::BTreeMap;

use fake::Fake;
use rand::distr::weighted::WeightedIndex;
use rand::distr::Distribution;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Map, Number, Value};

/// A compiled generator function for one field.
#[derive(Debug, Clone)]
pub enum Gen {
    Const(Value),
    Sequence {
        start: i64,
        step: i64,
    },
    UniformInt {
        min: i64,
        max: i64,
    },
    UniformFloat {
        min: f64,
        max: f64,
        round: Option<u32>,
    },
    Normal {
        mean: f64,
        stddev: f64,
        round: Option<u32>,
        min: Option<f64>,
        max: Option<f64>,
    },
    Choice {
        items: Vec<Value>,
        weights: Option<WeightedIndex<f64>>,
    },
    Uuid,
    Timestamp {
        start_ms: i64,
        step_ms: i64,
        jitter_ms: i64,
        rfc3339: bool,
    },
    Fake(FakeKind),
    Object(Vec<(String, Gen)>),
}

/// The `fake` generators on offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FakeKind {
    Name,
    FirstName,
    LastName,
    Email,
    Company,
    City,
    Country,
    Word,
    Sentence,
    Phone,
}

impl FakeKind {
    const ALL: [(&'static str, FakeKind); 10] = [
        ("name", FakeKind::Name),
        ("first_name", FakeKind::FirstName),
        ("last_name", FakeKind::LastName),
        ("email", FakeKind::Email),
        ("company", FakeKind::Company),
        ("city", FakeKind::City),
        ("country", FakeKind::Country),
        ("word", FakeKind::Word),
        ("sentence", FakeKind::Sentence),
        ("phone", FakeKind::Phone),
    ];

    fn generate(self, rng: &mut ChaCha8Rng) -> String {
        use fake::faker::address::en::{CityName, CountryName};
        use fake::faker::company::en::CompanyName;
        use fake::faker::internet::en::SafeEmail;
        use fake::faker::lorem::en::{Sentence, Word};
        use fake::faker::name::en::{FirstName, LastName, Name};
        use fake::faker::phone_number::en::PhoneNumber;
        match self {
            FakeKind::Name => Name().fake_with_rng(rng),
            FakeKind::FirstName => FirstName().fake_with_rng(rng),
            FakeKind::LastName => LastName().fake_with_rng(rng),
            FakeKind::Email => SafeEmail().fake_with_rng(rng),
            FakeKind::Company => CompanyName().fake_with_rng(rng),
            FakeKind::City => CityName().fake_with_rng(rng),
            FakeKind::Country => CountryName().fake_with_rng(rng),
            FakeKind::Word => Word().fake_with_rng(rng),
            FakeKind::Sentence => Sentence(3..8).fake_with_rng(rng),
            FakeKind::Phone => PhoneNumber().fake_with_rng(rng),
        }
    }
}

/// The random stream of record `index`.
pub fn record_rng(seed: u64, index: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(splitmix64(seed ^ splitmix64(index.wrapping_add(0x9E37_79B9_7F4A_7C15))))
}

/// SplitMix64's finalizer: spreads nearby integers over the whole range.
fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn rounded(x: f64, places: Option<u32>) -> f64 {
    match places {
        Some(p) => {
            let f = 10f64.powi(p as i32);
            (x * f).round() / f
        }
        None => x,
    }
}

fn float(x: f64) -> Value {
    Number::from_f64(x).map(Value::Number).unwrap_or(Value::Null)
}

impl Gen {
    /// The value of this field for record `index`.
    pub fn generate(&self, index: u64, rng: &mut ChaCha8Rng) -> Value {
        match self {
            Gen::Const(v) => v.clone(),
            Gen::Sequence { start, step } => Value::from(start.wrapping_add(step.wrapping_mul(index as i64))),
            Gen::UniformInt { min, max } => Value::from(rng.random_range(*min..=*max)),
            Gen::UniformFloat { min, max, round } => float(rounded(rng.random_range(*min..*max), *round)),
            Gen::Normal {
                mean,
                stddev,
                round,
                min,
                max,
            } => {
                let d = rand_distr::Normal::new(*mean, *stddev).expect("validated at compile time");
                let mut x = d.sample(rng);
                if let Some(lo) = min {
                    x = x.max(*lo);
                }
                if let Some(hi) = max {
                    x = x.min(*hi);
                }
                float(rounded(x, *round))
            }
            Gen::Choice { items, weights } => {
                let i = match weights {
                    Some(w) => w.sample(rng),
                    None => rng.random_range(0..items.len()),
                };
                items[i].clone()
            }
            Gen::Uuid => {
                let bytes: [u8; 16] = rng.random();
                Value::String(uuid::Builder::from_random_bytes(bytes).into_uuid().to_string())
            }
            Gen::Timestamp {
                start_ms,
                step_ms,
                jitter_ms,
                rfc3339,
            } => {
                let jitter = if *jitter_ms > 0 {
                    rng.random_range(0..=*jitter_ms)
                } else {
                    0
                };
                let ms = start_ms + step_ms.saturating_mul(index as i64) + jitter;
                if *rfc3339 {
                    match chrono::DateTime::from_timestamp_millis(ms) {
                        Some(t) => Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
                        None => Value::Null,
                    }
                } else {
                    Value::from(ms)
                }
            }
            Gen::Fake(kind) => Value::String(kind.generate(rng)),
            Gen::Object(fields) => {
                let mut map = Map::with_capacity(fields.len());
                for (name, g) in fields {
                    map.insert(name.clone(), g.generate(index, rng));
                }
                Value::Object(map)
            }
        }
    }
}

/// Compile the `fields` table of a datagen source; errors name the field path.
pub fn compile_fields(fields: &BTreeMap<String, Value>, path: &str) -> Result<Gen, (String, String)> {
    let mut out = Vec::with_capacity(fields.len());
    for (name, spec) in fields {
        out.push((name.clone(), compile(spec, &format!("{path}.{name}"))?));
    }
    Ok(Gen::Object(out))
}

fn err<T>(path: &str, message: impl Into<String>) -> Result<T, (String, String)> {
    Err((path.to_string(), message.into()))
}

fn num(v: Option<&Value>, path: &str, what: &str) -> Result<Option<f64>, (String, String)> {
    match v {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| (format!("{path}.{what}"), format!("must be a number, not {v}"))),
    }
}

fn int(v: Option<&Value>, path: &str, what: &str) -> Result<Option<i64>, (String, String)> {
    match v {
        None => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| (format!("{path}.{what}"), format!("must be an integer, not {v}"))),
    }
}

fn duration_ms(v: Option<&Value>, path: &str, what: &str) -> Result<i64, (String, String)> {
    match v {
        None => Ok(0),
        Some(Value::Number(n)) => n.as_i64().filter(|x| *x >= 0).ok_or_else(|| {
            (
                format!("{path}.{what}"),
                "must be a non-negative number of milliseconds".into(),
            )
        }),
        Some(Value::String(s)) => crate::config::parse_duration(s)
            .map(|d| d.as_millis() as i64)
            .map_err(|e| (format!("{path}.{what}"), e)),
        Some(other) => err(
            &format!("{path}.{what}"),
            format!("must be a duration like \"150ms\", not {other}"),
        ),
    }
}

const KINDS: &str = "value, sequence, uniform, normal, choice, uuid, timestamp, fake, object";

/// Compile one generator spec, like `{ uniform = { min = 1, max = 9 } }`.
pub fn compile(spec: &Value, path: &str) -> Result<Gen, (String, String)> {
    let Value::Object(map) = spec else {
        return err(path, format!("must be a table naming a generator ({KINDS})"));
    };
    let round = int(map.get("round"), path, "round")?.map(|r| r.clamp(0, 12) as u32);
    let kind_keys: Vec<&String> = map
        .keys()
        .filter(|k| !matches!(k.as_str(), "round" | "weights" | "min" | "max"))
        .collect();
    if kind_keys.len() != 1 {
        return err(path, format!("must name exactly one generator ({KINDS})"));
    }
    let kind = kind_keys[0].as_str();
    let arg = &map[kind];
    let at = format!("{path}.{kind}");
    let args = arg.as_object();
    let get = |k: &str| args.and_then(|a| a.get(k));
    Ok(match kind {
        "value" => Gen::Const(arg.clone()),
        "sequence" => Gen::Sequence {
            start: int(get("start"), &at, "start")?.unwrap_or(0),
            step: int(get("step"), &at, "step")?.unwrap_or(1),
        },
        "uniform" => {
            let (min, max) = (get("min"), get("max"));
            let (Some(lo), Some(hi)) = (min, max) else {
                return err(&at, "needs min and max");
            };
            if lo.is_i64() && hi.is_i64() && round.is_none() {
                let (lo, hi) = (lo.as_i64().unwrap_or(0), hi.as_i64().unwrap_or(0));
                if lo > hi {
                    return err(&at, "min must not exceed max");
                }
                Gen::UniformInt { min: lo, max: hi }
            } else {
                let lo = num(Some(lo), &at, "min")?.unwrap_or(0.0);
                let hi = num(Some(hi), &at, "max")?.unwrap_or(0.0);
                if lo >= hi {
                    return err(&at, "min must be below max");
                }
                Gen::UniformFloat {
                    min: lo,
                    max: hi,
                    round,
                }
            }
        }
        "normal" => {
            let mean = num(get("mean"), &at, "mean")?.ok_or_else(|| (at.clone(), "needs mean".to_string()))?;
            let stddev = num(get("stddev"), &at, "stddev")?.ok_or_else(|| (at.clone(), "needs stddev".to_string()))?;
            if !(stddev >= 0.0 && stddev.is_finite()) {
                return err(&format!("{at}.stddev"), "must be a non-negative number");
            }
            Gen::Normal {
                mean,
                stddev,
                round,
                min: num(map.get("min"), path, "min")?,
                max: num(map.get("max"), path, "max")?,
            }
        }
        "choice" => {
            let Some(items) = arg.as_array().filter(|a| !a.is_empty()) else {
                return err(&at, "must be a non-empty list");
            };
            let weights = match map.get("weights") {
                None => None,
                Some(Value::Array(w)) if w.len() == items.len() => {
                    let w: Option<Vec<f64>> = w.iter().map(Value::as_f64).collect();
                    let w = w.ok_or_else(|| (format!("{path}.weights"), "must be numbers".to_string()))?;
                    Some(WeightedIndex::new(w).map_err(|e| (format!("{path}.weights"), e.to_string()))?)
                }
                Some(_) => {
                    return err(
                        &format!("{path}.weights"),
                        format!("must be a list of {} numbers", items.len()),
                    )
                }
            };
            Gen::Choice {
                items: items.clone(),
                weights,
            }
        }
        "uuid" => Gen::Uuid,
        "timestamp" => {
            let start_ms = match get("start") {
                Some(Value::String(s)) => parse_time(s).map_err(|e| (format!("{at}.start"), e))?,
                Some(v) if v.is_i64() => v.as_i64().unwrap_or(0),
                _ => {
                    return err(
                        &format!("{at}.start"),
                        "needs a start: RFC 3339 text or epoch milliseconds",
                    )
                }
            };
            let rfc3339 = match get("format").and_then(Value::as_str) {
                None | Some("rfc3339") => true,
                Some("epoch_millis") => false,
                Some(other) => {
                    return err(
                        &format!("{at}.format"),
                        format!("is rfc3339 or epoch_millis, not {other:?}"),
                    )
                }
            };
            Gen::Timestamp {
                start_ms,
                step_ms: duration_ms(get("step"), &at, "step")?,
                jitter_ms: duration_ms(get("jitter"), &at, "jitter")?,
                rfc3339,
            }
        }
        "fake" => {
            let name = arg.as_str().unwrap_or_default();
            match FakeKind::ALL.iter().find(|(n, _)| *n == name) {
                Some((_, k)) => Gen::Fake(*k),
                None => {
                    let names: Vec<&str> = FakeKind::ALL.iter().map(|(n, _)| *n).collect();
                    return err(&at, format!("is one of {}", names.join(", ")));
                }
            }
        }
        "object" => {
            let Some(fields) = args else {
                return err(&at, "must be a table of fields");
            };
            let fields: BTreeMap<String, Value> = fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            compile_fields(&fields, &at)?
        }
        other => return err(path, format!("unknown generator {other:?} (one of {KINDS})")),
    })
}

/// RFC 3339 text or integer epoch milliseconds, to epoch milliseconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    if let Ok(ms) = s.trim().parse::<i64>() {
        return Ok(ms);
    }
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{s:?} is not an RFC 3339 time or epoch milliseconds: {e}"))
}

/// A `{field}` template over the generated fields: a key, a header, a string value.
/// Hand-rolled: a single substitution form does not justify a template engine.
#[derive(Debug, Clone)]
pub struct TextTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone)]
enum Part {
    Text(String),
    Field(Vec<String>),
}

impl TextTemplate {
    /// Parse `{a.b}` references (`{{` and `}}` are literal braces); fields must exist.
    pub fn parse(text: &str, known: &Gen) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(format!("unclosed {{ in {text:?}")),
                        }
                    }
                    let path: Vec<String> = name.trim().split('.').map(str::to_string).collect();
                    if !has_path(known, &path) {
                        return Err(format!("{{{name}}} names no generated field"));
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Field(path));
                }
                '}' => return Err(format!("unmatched }} in {text:?}")),
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(TextTemplate { parts })
    }

    /// Render against a generated record (an object).
    pub fn render(&self, record: &Value) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Field(path) => {
                    let mut v = record;
                    for seg in path {
                        v = v.get(seg).unwrap_or(&Value::Null);
                    }
                    match v {
                        Value::String(s) => out.push_str(s),
                        Value::Null => {}
                        other => out.push_str(&other.to_string()),
                    }
                }
            }
        }
        out
    }
}

fn has_path(g: &Gen, path: &[String]) -> bool {
    match (g, path.split_first()) {
        (_, None) => true,
        (Gen::Object(fields), Some((head, rest))) => fields.iter().any(|(n, f)| n == head && has_path(f, rest)),
        (Gen::Const(Value::Object(_)), Some(_)) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Gen {
        let map: BTreeMap<String, Value> = serde_json::from_value(v).unwrap();
        compile_fields(&map, "source.fields").unwrap()
    }

    #[test]
    fn records_are_a_pure_function_of_seed_and_index() {
        let g = fields(json!({
            "id": {"uuid": {}},
            "seq": {"sequence": {"start": 10, "step": 2}},
            "price": {"normal": {"mean": 100.0, "stddev": 5.0}, "round": 2},
            "size": {"uniform": {"min": 1, "max": 9}},
            "side": {"choice": ["BUY", "SELL"], "weights": [1, 3]},
            "who": {"fake": "name"},
            "ts": {"timestamp": {"start": "2026-11-27T09:30:00-05:00", "step": "1s", "jitter": "100ms"}},
            "nested": {"object": {"x": {"value": 1}}}
        }));
        let one = |seed, i| g.generate(i, &mut record_rng(seed, i));
        assert_eq!(one(7, 42), one(7, 42));
        assert_ne!(one(7, 42), one(8, 42));
        assert_ne!(one(7, 42), one(7, 43));
        let r = one(7, 5);
        assert_eq!(r["seq"], json!(20));
        assert_eq!(r["nested"], json!({"x": 1}));
        let size = r["size"].as_i64().unwrap();
        assert!((1..=9).contains(&size));
        let ts = r["ts"].as_str().unwrap();
        assert!(ts.starts_with("2026-11-27T14:30:05."), "{ts}");
    }

    #[test]
    fn weights_shape_the_distribution() {
        let g = compile(&json!({"choice": ["a", "b"], "weights": [9, 1]}), "f").unwrap();
        let a = (0..10_000u64)
            .filter(|i| g.generate(*i, &mut record_rng(1, *i)) == json!("a"))
            .count();
        assert!((8_700..9_300).contains(&a), "{a}");
    }

    #[test]
    fn errors_name_the_field() {
        let bad = [
            (json!({"uniform": {"min": 5, "max": 1}}), "source.fields.x.uniform"),
            (json!({"choice": []}), "source.fields.x.choice"),
            (json!({"normal": {"mean": 1}}), "source.fields.x.normal"),
            (json!({"fake": "unicorn"}), "source.fields.x.fake"),
            (json!({"bogus": 1}), "source.fields.x"),
            (
                json!({"timestamp": {"start": "yesterday"}}),
                "source.fields.x.timestamp.start",
            ),
            (json!("just text"), "source.fields.x"),
        ];
        for (spec, key) in bad {
            let map = BTreeMap::from([("x".to_string(), spec.clone())]);
            let (k, message) = compile_fields(&map, "source.fields").unwrap_err();
            assert_eq!(k, key, "{spec}: {message}");
        }
    }

    #[test]
    fn text_templates_render_fields() {
        let g = fields(json!({"symbol": {"value": "AAPL"}, "n": {"value": 3}, "o": {"object": {"p": {"value": "x"}}}}));
        let record = g.generate(0, &mut record_rng(0, 0));
        let t = TextTemplate::parse("{symbol}-{n}-{o.p}-{{lit}}", &g).unwrap();
        assert_eq!(t.render(&record), "AAPL-3-x-{lit}");
        assert!(TextTemplate::parse("{nope}", &g).is_err());
        assert!(TextTemplate::parse("{symbol", &g).is_err());
    }
}
