//! Field templates of the data generator: a tree of generator functions (sequence, uniform and
//! normal numbers, weighted choice, seeded UUIDs, stepped timestamps with jitter, `fake` strings,
//! nested objects) compiled once from the config. Record `i` is a pure function of `(seed, i)`:
//! one ChaCha8 stream per record, seeded from both, drawn in template order.

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
    pub const ALL: [(&'static str, FakeKind); 10] = [
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

/// Record `index`'s random stream, seeded at its first draw: a template that draws nothing
/// (constants, sequences, timestamps without jitter) seeds none. Seeding ChaCha8 for every
/// record was 3 % of the CPU of a generator of sequences into Kafka (`perf`, docs/performance.md).
pub struct RecordRng {
    seed: u64,
    index: u64,
    rng: Option<ChaCha8Rng>,
}

impl RecordRng {
    pub fn new(seed: u64, index: u64) -> Self {
        RecordRng { seed, index, rng: None }
    }

    /// The stream, seeded now if nothing drew from it before.
    fn draw(&mut self) -> &mut ChaCha8Rng {
        let (seed, index) = (self.seed, self.index);
        self.rng.get_or_insert_with(|| record_rng(seed, index))
    }
}

/// The random stream of record `index`.
fn record_rng(seed: u64, index: u64) -> ChaCha8Rng {
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
    pub fn generate(&self, index: u64, rng: &mut RecordRng) -> Value {
        match self {
            Gen::Const(v) => v.clone(),
            Gen::Sequence { start, step } => Value::from(start.wrapping_add(step.wrapping_mul(index as i64))),
            Gen::UniformInt { min, max } => Value::from(rng.draw().random_range(*min..=*max)),
            Gen::UniformFloat { min, max, round } => float(rounded(rng.draw().random_range(*min..*max), *round)),
            Gen::Normal {
                mean,
                stddev,
                round,
                min,
                max,
            } => {
                let d = rand_distr::Normal::new(*mean, *stddev).expect("validated at compile time");
                let mut x = d.sample(rng.draw());
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
                    Some(w) => w.sample(rng.draw()),
                    None => rng.draw().random_range(0..items.len()),
                };
                items[i].clone()
            }
            Gen::Uuid => {
                let bytes: [u8; 16] = rng.draw().random();
                Value::String(uuid::Builder::from_random_bytes(bytes).into_uuid().to_string())
            }
            Gen::Timestamp {
                start_ms,
                step_ms,
                jitter_ms,
                rfc3339,
            } => {
                let jitter = if *jitter_ms > 0 {
                    rng.draw().random_range(0..=*jitter_ms)
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
            Gen::Fake(kind) => Value::String(kind.generate(rng.draw())),
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::datagen::compile::{compile, compile_fields};
    use crate::datagen::text::TextTemplate;
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
        let one = |seed, i| g.generate(i, &mut RecordRng::new(seed, i));
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
            .filter(|i| g.generate(*i, &mut RecordRng::new(1, *i)) == json!("a"))
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
    fn unknown_keys_at_every_depth_are_errors_naming_the_valid_ones() {
        let cases = [
            (
                json!({"timestamp": {"start": 0, "step": "1s", "jiter": "1s"}}),
                "source.fields.x.timestamp.jiter",
                "jitter",
            ),
            (
                json!({"normal": {"mean": 1, "stddev": 1, "foo": 1}}),
                "source.fields.x.normal.foo",
                "stddev",
            ),
            (
                json!({"uniform": {"min": 1, "max": 2, "inclusive": true}}),
                "source.fields.x.uniform.inclusive",
                "max",
            ),
            (
                json!({"normal": {"mean": 1, "stddev": 1}, "rond": 2}),
                "source.fields.x.rond",
                "round",
            ),
            (
                json!({"sequence": {}, "weights": [1]}),
                "source.fields.x.weights",
                "sequence",
            ),
            // the same rule for normal as for uniform: min must not exceed max
            (
                json!({"normal": {"mean": 1, "stddev": 1}, "min": 5, "max": 1}),
                "source.fields.x",
                "exceed",
            ),
        ];
        for (spec, key, names) in cases {
            let map = BTreeMap::from([("x".to_string(), spec.clone())]);
            let (k, message) = compile_fields(&map, "source.fields").unwrap_err();
            assert_eq!(k, key, "{spec}: {message}");
            assert!(message.contains(names), "{spec}: {message}");
        }
    }

    #[test]
    fn text_templates_render_fields() {
        let g = fields(json!({"symbol": {"value": "AAPL"}, "n": {"value": 3}, "o": {"object": {"p": {"value": "x"}}}}));
        let record = g.generate(0, &mut RecordRng::new(0, 0));
        let t = TextTemplate::parse("{symbol}-{n}-{o.p}-{{lit}}", &g).unwrap();
        assert_eq!(t.render(&record), "AAPL-3-x-{lit}");
        assert!(TextTemplate::parse("{nope}", &g).is_err());
        assert!(TextTemplate::parse("{symbol", &g).is_err());
    }
}
