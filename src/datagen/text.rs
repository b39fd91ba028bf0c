//! `{field}` templates over the generated fields: a key, a header, a string value.

use serde_json::Value;

use super::template::Gen;

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

/// The template as written.
impl std::fmt::Display for TextTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for part in &self.parts {
            match part {
                Part::Text(t) => f.write_str(&t.replace('{', "{{").replace('}', "}}"))?,
                Part::Field(path) => write!(f, "{{{}}}", path.join("."))?,
            }
        }
        Ok(())
    }
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

    /// Render against a generated record (an object): what the generator's own rendering
    /// ([`TextTemplate::render_with`]) is checked against.
    #[cfg(test)]
    pub fn render(&self, record: &Value) -> String {
        self.render_with(|path| {
            let mut v = record;
            for seg in path {
                v = v.get(seg)?;
            }
            Some(v)
        })
    }

    /// Render with the value of each `{a.b}` from `field` (given `["a", "b"]`); a field it has
    /// no value for renders as nothing, as does `null`.
    pub fn render_with<'v>(&self, field: impl Fn(&[String]) -> Option<&'v Value>) -> String {
        use std::fmt::Write;
        // the literal text, and room for the fields (one allocation for most records)
        let literal: usize = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.len(),
                Part::Field(_) => 24,
            })
            .sum();
        let mut out = String::with_capacity(literal);
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Field(path) => match field(path) {
                    Some(Value::String(s)) => out.push_str(s),
                    Some(Value::Null) | None => {}
                    // written in place (a `String` cannot fail to take it)
                    Some(other) => {
                        let _ = write!(out, "{other}");
                    }
                },
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
