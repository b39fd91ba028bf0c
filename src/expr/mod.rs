//! Record expressions: CEL (the `cel` crate) over a record's `key`, `value`, `headers`, `topic`,
//! `partition`, `offset` and `timestamp`, compiled once and evaluated per record: the end of
//! stream (FLIP-208's `EofOnRecordEvaluator`, written as an expression) and the source's filter
//! (`source.where`).

mod direct;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use cel::{Context, Env, Program, Value};
use tracing::warn;

use crate::core::EofOnRecordEvaluator;
use crate::record::{Record, ValueFormat};

/// The variables an expression may use.
pub const VARIABLES: [&str; 7] = ["key", "value", "headers", "topic", "partition", "offset", "timestamp"];

/// What a role calls an expression in its log lines.
const EOF_ROLE: &str = "end-of-stream expression";

/// A compiled CEL expression over records.
pub struct RecordExpression {
    source: String,
    program: Program,
    env: Arc<Env>,
    /// The fields of `value` the expression selects, when it only ever uses `value.<field>`:
    /// then only those are converted to CEL, not the whole value (most of the evaluation cost).
    value_fields: Option<Vec<String>>,
    /// The expression as a direct check, when it is a simple one (`value.type == "X"`).
    direct: Option<direct::DirectCheck>,
    /// It uses `value` (so the value must be decoded before it is evaluated).
    reads_value: bool,
    /// It uses `key` (so a key with a `key_format` must be decoded before it is evaluated).
    reads_key: bool,
    /// What it is, for the warning on its first failure.
    role: &'static str,
    /// Evaluations that failed (a missing map key, a non-boolean result); they count as "no match".
    errors: AtomicU64,
    /// The metric the failures are counted in.
    failures: metrics::Counter,
}

impl std::fmt::Debug for RecordExpression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordExpression")
            .field("source", &self.source)
            .finish()
    }
}

impl RecordExpression {
    /// Compile `source`; the error says where it is wrong, or which variable is unknown.
    pub fn compile(source: &str) -> Result<Self, String> {
        let env = Arc::new(Env::stdlib());
        let program = env.compile(source).map_err(|e| e.to_string().trim().to_string())?;
        let references = program.references();
        // the variables a comprehension binds (`x` in `list.exists(x, x > 1)`) are its own
        let mut bound = Vec::new();
        comprehension_variables(&program.expression().expr, &mut bound);
        let mut unknown: Vec<&str> = references
            .variables()
            .into_iter()
            .filter(|v| !VARIABLES.contains(v) && !bound.iter().any(|b| b == v))
            .collect();
        unknown.sort_unstable();
        if !unknown.is_empty() {
            return Err(format!(
                "unknown variable {} (an expression may use {})",
                unknown.join(", "),
                VARIABLES.join(", ")
            ));
        }
        let mut unknown_functions: Vec<&str> = references
            .functions()
            .into_iter()
            .filter(|f| !is_operator(f) && !STANDARD_FUNCTIONS.contains(f))
            .collect();
        unknown_functions.sort_unstable();
        if let Some(f) = unknown_functions.first() {
            return Err(format!(
                "unknown function {f} (CEL's functions: {})",
                STANDARD_FUNCTIONS.join(", ")
            ));
        }
        if let Some(what) = not_a_condition(&program.expression().expr) {
            return Err(format!(
                "gives {what}, not true or false: the expression must be a condition"
            ));
        }
        // a comprehension variable named `value` counts as a use too: decoded first, to be safe
        let (reads_value, reads_key) = (references.has_variable("value"), references.has_variable("key"));
        let value_fields = selected_fields(program.expression(), "value");
        let direct = direct::DirectCheck::compile(&program.expression().expr);
        Ok(RecordExpression {
            source: source.to_string(),
            program,
            env,
            value_fields,
            direct,
            reads_value,
            reads_key,
            role: EOF_ROLE,
            errors: AtomicU64::new(0),
            failures: metrics::Counter::noop(),
        })
    }

    /// Count failed evaluations in `counter` (`tidegate_eof_evaluation_errors_total`).
    pub fn counting_failures_in(mut self, counter: metrics::Counter) -> Self {
        self.failures = counter;
        self
    }

    /// Name it `role` in its warning ("filter"); an end-of-stream expression by default.
    pub fn in_role(mut self, role: &'static str) -> Self {
        self.role = role;
        self
    }

    /// Whether it uses `value`: when not, it is evaluated before the value is decoded.
    pub fn reads_value(&self) -> bool {
        self.reads_value
    }

    /// Whether it uses `key` (decoded first when the source has a `key_format`).
    pub fn reads_key(&self) -> bool {
        self.reads_key
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The fields of `value` the expression selects, when it uses `value` only that way.
    pub fn value_fields(&self) -> Option<&[String]> {
        self.value_fields.as_deref()
    }

    /// Evaluations that failed so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Evaluate against `record`: `Ok(true)` only for a boolean `true` result.
    pub fn evaluate(&self, record: &Record) -> Result<bool, String> {
        if let Some(direct) = &self.direct {
            let fields = direct::Fields {
                value: match &record.decoded {
                    Some(serde_json::Value::Object(object)) => Some(object),
                    _ => None,
                },
                headers: &record.headers,
            };
            if let Some(result) = direct.evaluate(&fields) {
                return Ok(result);
            }
        }
        self.evaluate_with_cel(record)
    }

    /// Whether it is a condition only where the data makes it one: a bare variable, field or
    /// index (`value.done`), true or false only on records where it holds a boolean.
    pub fn is_condition_only_on_some_data(&self) -> bool {
        use cel::common::ast::Expr;
        match &self.program.expression().expr {
            Expr::Ident(_) | Expr::Select(_) => true,
            Expr::Call(call) => call.func_name == "_[_]",
            _ => false,
        }
    }

    /// Whether the expression has a direct form (it is evaluated without CEL where it decides).
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Evaluate with the CEL program alone.
    fn evaluate_with_cel(&self, record: &Record) -> Result<bool, String> {
        let resolver = RecordVariables {
            record,
            value_fields: self.value_fields.as_deref(),
        };
        let mut context = Context::with_env(Arc::clone(&self.env));
        context.set_variable_resolver(&resolver);
        match self.program.execute(&context) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("the expression returned {other:?}, not a boolean")),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl RecordExpression {
    /// Whether `record` matches: a failed evaluation counts as no match, is counted, and the
    /// first one is logged.
    pub fn matches(&self, record: &Record) -> bool {
        match self.evaluate(record) {
            Ok(matched) => matched,
            Err(e) => {
                // The first failure is worth a warning (often a field missing from some records:
                // guard it with has()); later ones are only counted, never per record in the log.
                if self.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    let at = format!(
                        "{}:{}@{}",
                        record.topic.as_deref().unwrap_or("-"),
                        record.partition.map_or("-".to_string(), |p| p.to_string()),
                        record.offset.map_or("-".to_string(), |o| o.to_string())
                    );
                    warn!(expression = %self.source, record = %at, error = %e, role = self.role,
                          "an expression failed on a record; treated as no match (further failures are counted, not logged)");
                }
                self.failures.increment(1);
                false
            }
        }
    }
}

impl EofOnRecordEvaluator<Record> for RecordExpression {
    fn is_end_of_stream(&self, record: &Record) -> bool {
        self.matches(record)
    }
}

/// CEL's standard functions and macros (the language definition's list; cel-rust's `Env` does not
/// say which names it declares, and an unknown function would otherwise fail on every record at
/// run time, counting as "no match", so the job would read everything).
const STANDARD_FUNCTIONS: &[&str] = &[
    "all",
    "bool",
    "bytes",
    "contains",
    "double",
    "duration",
    "dyn",
    "endsWith",
    "exists",
    "exists_one",
    "filter",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getFullYear",
    "getHours",
    "getMilliseconds",
    "getMinutes",
    "getMonth",
    "getSeconds",
    "has",
    "int",
    "map",
    "matches",
    "max",
    "min",
    "size",
    "startsWith",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// The variables comprehensions (`all`, `exists`, `map`, `filter`) bind anywhere in `expr`.
fn comprehension_variables(expr: &cel::common::ast::Expr, out: &mut Vec<String>) {
    use cel::common::ast::{EntryExpr, Expr};
    match expr {
        Expr::Comprehension(c) => {
            out.push(c.iter_var.clone());
            out.extend(c.iter_var2.clone());
            out.push(c.accu_var.clone());
            for e in [&c.iter_range, &c.accu_init, &c.loop_cond, &c.loop_step, &c.result] {
                comprehension_variables(&e.expr, out);
            }
        }
        Expr::Call(call) => {
            for e in call.target.iter().map(|t| &**t).chain(call.args.iter()) {
                comprehension_variables(&e.expr, out);
            }
        }
        Expr::Select(s) => comprehension_variables(&s.operand.expr, out),
        Expr::List(l) => l.elements.iter().for_each(|e| comprehension_variables(&e.expr, out)),
        Expr::Map(m) => {
            for entry in &m.entries {
                if let EntryExpr::MapEntry(e) = &entry.expr {
                    comprehension_variables(&e.key.expr, out);
                    comprehension_variables(&e.value.expr, out);
                }
            }
        }
        _ => {}
    }
}

/// Operators are calls too in CEL's tree (`_==_`, `!_`, `@in`).
fn is_operator(name: &str) -> bool {
    name.starts_with(['_', '@', '!', '-'])
}

/// What an expression certainly gives when that is not a boolean ("a number", "a list"), or
/// `None` when it is a boolean or only known when evaluated (a field may hold a boolean).
fn not_a_condition(expr: &cel::common::ast::Expr) -> Option<&'static str> {
    use cel::common::ast::{Expr, LiteralValue};
    match expr {
        Expr::Literal(LiteralValue::Boolean(_)) => None,
        Expr::Literal(LiteralValue::String(_)) => Some("text"),
        Expr::Literal(LiteralValue::Null) => Some("null"),
        Expr::Literal(LiteralValue::Bytes(_)) => Some("bytes"),
        Expr::Literal(_) => Some("a number"),
        Expr::List(_) => Some("a list"),
        Expr::Map(_) | Expr::Struct(_) => Some("a map"),
        Expr::Call(call) => match call.func_name.as_str() {
            "_+_" | "_-_" | "_*_" | "_/_" | "_%_" | "-_" | "size" | "int" | "uint" | "double" => Some("a number"),
            "string" => Some("text"),
            "_?_:_" => call.args.get(1).and_then(|a| not_a_condition(&a.expr)),
            _ => None,
        },
        _ => None,
    }
}

/// The fields selected on the identifier `name` (`name.a`, `has(name.b)`), if the expression uses
/// `name` in no other way (not whole, not as a comprehension variable); `None` otherwise.
fn selected_fields(root: &cel::IdedExpr, name: &str) -> Option<Vec<String>> {
    use cel::common::ast::{EntryExpr, Expr};
    fn walk(e: &Expr, name: &str, out: &mut Vec<String>) -> bool {
        match e {
            Expr::Ident(id) => id != name, // the whole value is used
            Expr::Select(s) => match &s.operand.expr {
                Expr::Ident(id) if id == name => {
                    if !out.contains(&s.field) {
                        out.push(s.field.clone());
                    }
                    true
                }
                other => walk(other, name, out),
            },
            Expr::Call(c) => {
                c.target.as_ref().is_none_or(|t| walk(&t.expr, name, out))
                    && c.args.iter().all(|a| walk(&a.expr, name, out))
            }
            Expr::List(l) => l.elements.iter().all(|x| walk(&x.expr, name, out)),
            Expr::Map(m) => m.entries.iter().all(|en| match &en.expr {
                EntryExpr::MapEntry(me) => walk(&me.key.expr, name, out) && walk(&me.value.expr, name, out),
                EntryExpr::StructField(f) => walk(&f.value.expr, name, out),
            }),
            Expr::Struct(st) => st.entries.iter().all(|en| match &en.expr {
                EntryExpr::MapEntry(me) => walk(&me.key.expr, name, out) && walk(&me.value.expr, name, out),
                EntryExpr::StructField(f) => walk(&f.value.expr, name, out),
            }),
            Expr::Comprehension(c) => {
                // a comprehension variable named like the root would shadow it: be conservative
                c.iter_var != name
                    && c.iter_var2.as_deref() != Some(name)
                    && c.accu_var != name
                    && walk(&c.iter_range.expr, name, out)
                    && walk(&c.accu_init.expr, name, out)
                    && walk(&c.loop_cond.expr, name, out)
                    && walk(&c.loop_step.expr, name, out)
                    && walk(&c.result.expr, name, out)
            }
            Expr::Literal(_) | Expr::Unspecified => true,
        }
    }
    let mut out = Vec::new();
    walk(&root.expr, name, &mut out).then_some(out)
}

/// Resolves the record variables on demand, so an expression over `offset` never converts the value.
struct RecordVariables<'r> {
    record: &'r Record,
    value_fields: Option<&'r [String]>,
}

impl RecordVariables<'_> {
    fn value(&self) -> Value {
        let r = self.record;
        match (&r.decoded, r.format, &r.value) {
            (Some(serde_json::Value::Object(map)), _, _) if self.value_fields.is_some() => {
                let fields = self.value_fields.unwrap_or_default();
                let entries: HashMap<cel::objects::Key, Value> = fields
                    .iter()
                    .filter_map(|f| {
                        map.get(f)
                            .map(|v| (cel::objects::Key::String(Arc::new(f.clone())), json_to_cel(v)))
                    })
                    .collect();
                Value::Map(cel::objects::Map { map: Arc::new(entries) })
            }
            (Some(decoded), _, _) => json_to_cel(decoded),
            (None, _, None) => Value::Null,
            (None, ValueFormat::String, Some(bytes)) => match std::str::from_utf8(bytes) {
                Ok(s) => Value::String(Arc::new(s.to_string())),
                Err(_) => Value::Bytes(Arc::new(bytes.to_vec())),
            },
            (None, _, Some(bytes)) => Value::Bytes(Arc::new(bytes.to_vec())),
        }
    }
}

fn bytes_or_string(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(s) => Value::String(Arc::new(s.to_string())),
        Err(_) => Value::Bytes(Arc::new(bytes.to_vec())),
    }
}

/// JSON to CEL: objects become maps, integers `int` (or `uint` beyond i64), other numbers `double`.
pub fn json_to_cel(value: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::String(Arc::new(s.clone())),
        J::Array(items) => Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        J::Object(map) => {
            let entries: HashMap<cel::objects::Key, Value> = map
                .iter()
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), json_to_cel(v)))
                .collect();
            Value::Map(cel::objects::Map { map: Arc::new(entries) })
        }
    }
}

impl VariableResolver for RecordVariables<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        let r = self.record;
        let value = match variable {
            "value" => self.value(),
            "key" => match (&r.decoded_key, r.key.as_deref()) {
                (Some(decoded), _) => json_to_cel(decoded),
                (None, key) => key.map(bytes_or_string).unwrap_or(Value::Null),
            },
            "topic" => r
                .topic
                .as_deref()
                .map(|t| Value::String(Arc::new(t.to_string())))
                .unwrap_or(Value::Null),
            "partition" => r.partition.map(|p| Value::Int(i64::from(p))).unwrap_or(Value::Null),
            "offset" => r.offset.map(Value::Int).unwrap_or(Value::Null),
            "timestamp" => r.timestamp.map(Value::Int).unwrap_or(Value::Null),
            "headers" => {
                // as in the JSON-lines envelope: a header's value, or the list of its values when
                // the name is repeated
                let mut grouped: Vec<(&str, Vec<Value>)> = Vec::new();
                for h in &r.headers {
                    let v = h.value.as_deref().map(bytes_or_string).unwrap_or(Value::Null);
                    match grouped.iter_mut().find(|(k, _)| *k == h.key) {
                        Some((_, values)) => values.push(v),
                        None => grouped.push((&h.key, vec![v])),
                    }
                }
                let entries: HashMap<cel::objects::Key, Value> = grouped
                    .into_iter()
                    .map(|(k, mut values)| {
                        let v = if values.len() == 1 {
                            values.remove(0)
                        } else {
                            Value::List(Arc::new(values))
                        };
                        (cel::objects::Key::String(Arc::new(k.to_string())), v)
                    })
                    .collect();
                Value::Map(cel::objects::Map { map: Arc::new(entries) })
            }
            _ => return None,
        };
        let boxed: Box<dyn Val> = value.try_into().ok()?;
        Some(CowVal::Owned(boxed))
    }
}

#[cfg(test)]
mod tests;
