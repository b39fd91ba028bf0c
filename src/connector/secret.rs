//! Secrets that need not sit in config files: a value given as `{ file = "/run/secrets/x" }` (the
//! file's content) or `{ env = "NAME" }` (an environment variable), read when the config is
//! loaded, with errors naming the key and the file or variable.

use std::path::PathBuf;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::error::{Error, Result};

/// Where a secret's value comes from when it is not written in the config.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged, deny_unknown_fields)]
pub enum SecretRef {
    /// `{ file = "/run/secrets/kafka" }`: the file's content, without one trailing line break (as
    /// Docker and Kubernetes secrets and `echo > file` leave it).
    File { file: PathBuf },
    /// `{ env = "KAFKA_PASSWORD" }`: the environment variable's value.
    Env { env: String },
}

impl SecretRef {
    /// The secret's value; `key` names the config key in errors. An empty value is refused: an
    /// unset variable exported empty or an empty file is a mistake, not a password.
    pub fn resolve(&self, key: &str) -> Result<String> {
        let (value, source) = match self {
            SecretRef::File { file } => {
                let text = std::fs::read_to_string(file)
                    .map_err(|e| Error::config(key, format!("cannot read the secret file {}: {e}", file.display())))?;
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text).to_string();
                (text, format!("the secret file {}", file.display()))
            }
            SecretRef::Env { env } => {
                let value = std::env::var(env).map_err(|e| match e {
                    std::env::VarError::NotPresent => {
                        Error::config(key, format!("the environment variable {env} is not set"))
                    }
                    std::env::VarError::NotUnicode(_) => {
                        Error::config(key, format!("the environment variable {env} is not UTF-8"))
                    }
                })?;
                (value, format!("the environment variable {env}"))
            }
        };
        if value.is_empty() {
            return Err(Error::config(key, format!("{source} is empty")));
        }
        Ok(value)
    }
}

/// A value that may be secret: written in the config, or a [`SecretRef`].
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum SecretValue {
    Text(String),
    Ref(SecretRef),
}

impl SecretValue {
    /// The value; `key` names the config key in errors.
    pub fn resolve(&self, key: &str) -> Result<String> {
        match self {
            SecretValue::Text(t) => Ok(t.clone()),
            SecretValue::Ref(r) => r.resolve(key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value as the config loader hands it over (TOML read into JSON).
    fn parse(json: serde_json::Value) -> std::result::Result<SecretValue, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_secret_comes_from_a_file_without_its_line_break() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kafka");
        std::fs::write(&path, "s3cret\n").unwrap();
        let v = parse(serde_json::json!({ "file": path })).unwrap();
        assert_eq!(v.resolve("source.properties.\"sasl.password\"").unwrap(), "s3cret");
        std::fs::write(&path, "").unwrap();
        let e = v.resolve("k").unwrap_err().to_string();
        assert!(e.contains("k: the secret file") && e.contains("is empty"), "{e}");
        let missing = parse(serde_json::json!({ "file": "/nonexistent/secret" })).unwrap();
        let e = missing.resolve("schema_registry.password").unwrap_err().to_string();
        assert!(
            e.contains("schema_registry.password: cannot read the secret file /nonexistent/secret"),
            "{e}"
        );
    }

    #[test]
    fn a_secret_comes_from_the_environment_and_an_unset_variable_is_named() {
        // a variable every test process has (setting one would race with the config tests)
        let v = parse(serde_json::json!({ "env": "PATH" })).unwrap();
        assert_eq!(v.resolve("k").unwrap(), std::env::var("PATH").unwrap());
        let v = parse(serde_json::json!({ "env": "TIDEGATE_SECRET_TEST_UNSET" })).unwrap();
        let e = v.resolve("sink.properties.\"sasl.password\"").unwrap_err().to_string();
        assert!(
            e.contains(
                "sink.properties.\"sasl.password\": the environment variable TIDEGATE_SECRET_TEST_UNSET is not set"
            ),
            "{e}"
        );
    }

    #[test]
    fn plain_text_stays_and_a_table_with_both_or_other_keys_is_refused() {
        assert_eq!(
            parse(serde_json::json!("plain")).unwrap().resolve("k").unwrap(),
            "plain"
        );
        assert!(parse(serde_json::json!({ "file": "a", "env": "B" })).is_err());
        assert!(parse(serde_json::json!({ "path": "a" })).is_err());
    }
}
