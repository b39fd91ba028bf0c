//! Direct checks for the simple record expressions (the end of stream, the filter):
//! `value.f == "lit"`, `value.f != lit`, `has(value.f)`, and the same on `headers.h` (a header
//! filter evaluated before decoding), combined with `&&`, `||` and `!`, evaluated on the decoded
//! JSON object and the record's headers without building CEL values (a CEL evaluation allocates
//! a context, a map and the converted fields on every record; this is a comparison).
//!
//! A check answers only where it is sure to agree with CEL: a field holding a value of the
//! literal's own type (a string, a boolean, an integer). Anything else (a missing field, another
//! type, a value that is not an object) answers `None`, and the CEL program decides, with its own
//! errors counted; so the results are CEL's by construction, which `expr::tests` also checks on
//! generated records.

use cel::common::ast::{operators, Expr, LiteralValue, SelectExpr};
use serde_json::{Map, Value};

use crate::record::Header;

/// A field a check reads: of the decoded value, or a header.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Field {
    Value(String),
    Header(String),
}

/// What a direct check looks at: the decoded value when it is an object, and the headers.
pub(super) struct Fields<'r> {
    pub(super) value: Option<&'r Map<String, Value>>,
    pub(super) headers: &'r [Header],
}

/// A header's value as CEL sees it, when a check can compare it: the only one of its name, and
/// text (a repeated name is a list, a null value null, other bytes bytes: left to CEL).
enum HeaderValue<'r> {
    Absent,
    Text(&'r str),
    Other,
}

impl Fields<'_> {
    fn header(&self, name: &str) -> HeaderValue<'_> {
        let mut found = self.headers.iter().filter(|h| h.key == name);
        match (found.next(), found.next()) {
            (None, _) => HeaderValue::Absent,
            (Some(h), None) => match h.value.as_deref().map(std::str::from_utf8) {
                Some(Ok(text)) => HeaderValue::Text(text),
                _ => HeaderValue::Other,
            },
            (Some(_), Some(_)) => HeaderValue::Other,
        }
    }
}

/// A literal a field is compared with.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Literal {
    String(String),
    Bool(bool),
    Int(i64),
}

impl Literal {
    fn of(literal: &LiteralValue) -> Option<Literal> {
        match literal {
            LiteralValue::String(s) => Some(Literal::String(s.inner().to_string())),
            LiteralValue::Boolean(b) => Some(Literal::Bool(*b.inner())),
            LiteralValue::Int(i) => Some(Literal::Int(*i.inner())),
            // doubles, unsigned, bytes and null compare across types in CEL: left to it
            _ => None,
        }
    }

    /// `Some(field == literal)` when the field holds a value of the literal's type.
    fn equals(&self, field: &Value) -> Option<bool> {
        match (self, field) {
            (Literal::String(l), Value::String(f)) => Some(l == f),
            (Literal::Bool(l), Value::Bool(f)) => Some(l == f),
            // only integers JSON wrote as integers: 3.0 is a double, for CEL to compare
            (Literal::Int(l), Value::Number(n)) if n.is_i64() => n.as_i64().map(|f| *l == f),
            _ => None,
        }
    }
}

/// A compiled simple expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum DirectCheck {
    /// `value.field == literal` or `headers.name == "text"` (or `!=` when `negated`).
    Equals {
        field: Field,
        literal: Literal,
        negated: bool,
    },
    /// `has(value.field)`, `has(headers.name)`.
    Has(Field),
    Not(Box<DirectCheck>),
    And(Box<DirectCheck>, Box<DirectCheck>),
    Or(Box<DirectCheck>, Box<DirectCheck>),
}

impl DirectCheck {
    /// The direct form of `expr`, when all of it is made of the forms above.
    pub(super) fn compile(expr: &Expr) -> Option<DirectCheck> {
        match expr {
            Expr::Select(s) if s.test => selected_value_field(s).map(DirectCheck::Has),
            Expr::Call(call) if call.target.is_none() => {
                let args: Vec<&Expr> = call.args.iter().map(|a| &a.expr).collect();
                match (call.func_name.as_str(), args.as_slice()) {
                    (operators::LOGICAL_NOT, [a]) => Some(DirectCheck::Not(Box::new(Self::compile(a)?))),
                    (operators::LOGICAL_AND, [a, b]) => Some(DirectCheck::And(
                        Box::new(Self::compile(a)?),
                        Box::new(Self::compile(b)?),
                    )),
                    (operators::LOGICAL_OR, [a, b]) => Some(DirectCheck::Or(
                        Box::new(Self::compile(a)?),
                        Box::new(Self::compile(b)?),
                    )),
                    (op @ (operators::EQUALS | operators::NOT_EQUALS), [a, b]) => {
                        let (field, literal) = match (a, b) {
                            (Expr::Literal(l), other) | (other, Expr::Literal(l)) => {
                                (value_field(other)?, Literal::of(l)?)
                            }
                            _ => return None,
                        };
                        if matches!(field, Field::Header(_)) && !matches!(literal, Literal::String(_)) {
                            return None; // a header is text (or bytes): other literals left to CEL
                        }
                        Some(DirectCheck::Equals {
                            field,
                            literal,
                            negated: op == operators::NOT_EQUALS,
                        })
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The result CEL would give on a value decoded to `object`, or `None` where only CEL can say
    /// (including where CEL would fail). `&&` and `||` absorb an undecided side as CEL absorbs an
    /// error: `false && x` is false and `true || x` true whatever `x` is.
    pub(super) fn evaluate(&self, fields: &Fields<'_>) -> Option<bool> {
        match self {
            DirectCheck::Equals {
                field: Field::Value(field),
                literal,
                negated,
            } => literal.equals(fields.value?.get(field)?).map(|eq| eq != *negated),
            DirectCheck::Equals {
                field: Field::Header(name),
                literal: Literal::String(text),
                negated,
            } => match fields.header(name) {
                HeaderValue::Text(value) => Some((value == text) != *negated),
                HeaderValue::Absent | HeaderValue::Other => None,
            },
            DirectCheck::Equals { .. } => None,
            DirectCheck::Has(Field::Value(field)) => Some(fields.value?.contains_key(field)),
            DirectCheck::Has(Field::Header(name)) => Some(fields.headers.iter().any(|h| &h.key == name)),
            DirectCheck::Not(a) => a.evaluate(fields).map(|b| !b),
            DirectCheck::And(a, b) => match (a.evaluate(fields), b.evaluate(fields)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            DirectCheck::Or(a, b) => match (a.evaluate(fields), b.evaluate(fields)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
        }
    }
}

/// The field when `expr` is `value.f` or `headers.h`.
fn value_field(expr: &Expr) -> Option<Field> {
    match expr {
        Expr::Select(s) if !s.test => selected_value_field(s),
        _ => None,
    }
}

/// The field `select` selects on `value` or `headers` (`value.f`, or `has(value.f)` when it tests).
fn selected_value_field(select: &SelectExpr) -> Option<Field> {
    match &select.operand.expr {
        Expr::Ident(id) if id == "value" => Some(Field::Value(select.field.clone())),
        Expr::Ident(id) if id == "headers" => Some(Field::Header(select.field.clone())),
        _ => None,
    }
}
