//! What a restored Kafka state must agree with: the settings it was written with (its
//! fingerprint, stored in the enumerator's state), checked against the config at a restart.

use tracing::info;

use super::enumerator::{EndRule, SettingsFingerprint};
use super::source::KafkaSource;
use crate::error::{Error, Result};

impl KafkaSource {
    /// Check the settings a state was written with against the config: a changed subscription,
    /// start or format is an error (the state's positions belong to the old one). Returns
    /// whether the stopping offsets changed (they then apply to the unfinished splits).
    pub fn check_restored_settings(&self, then: Option<&SettingsFingerprint>) -> Result<bool> {
        let Some(then) = then else {
            return Ok(false);
        };
        let now = self.fingerprint();
        for (key, old, new) in [
            ("source.topics", &then.subscription, &now.subscription),
            ("source.starting_offsets", &then.starting, &now.starting),
            ("source.format", &then.format, &now.format),
        ] {
            if old != new {
                return Err(Error::config(
                    key,
                    format!(
                        "changed since the last checkpoint was written (was {old}, now {new}): the saved positions \
                         belong to the old setting; restore it, or start over with --reset-state"
                    ),
                ));
            }
        }
        if let (Some(was), Some(is)) = (&then.end, &now.end) {
            for (key, old, new) in [
                ("source.eof", was.eof.clone(), is.eof.clone()),
                ("source.eof_scope", was.eof_scope.clone(), is.eof_scope.clone()),
                (
                    "source.eof_emit_marker",
                    was.eof_emit_marker.to_string(),
                    is.eof_emit_marker.to_string(),
                ),
            ] {
                if old != new {
                    return Err(Error::config(
                        key,
                        format!(
                            "changed since the last checkpoint was written (was {old}, now {new}): the state's \
                             finished splits (and a source-wide stop it found) were judged by the old rule, and \
                             the records written so far with it; finish with the old setting, or start over \
                             with --reset-state"
                        ),
                    ));
                }
            }
        }
        if let (Some(was), Some(is)) = (&then.replay_speed, &now.replay_speed) {
            if was != is {
                info!(was = %was, now = %is, "replay_speed changed since the last checkpoint was written: the new pace applies from here");
            }
        }
        let changed = then.stopping != now.stopping;
        if changed {
            info!(was = %then.stopping, now = %now.stopping, "stopping_offsets changed since the last checkpoint was written: they apply to the unfinished splits");
        }
        Ok(changed)
    }

    /// The settings a state depends on, in words (stored with each checkpoint).
    pub fn fingerprint(&self) -> SettingsFingerprint {
        let s = &self.settings;
        SettingsFingerprint {
            subscription: s.subscription.to_string(),
            starting: s.starting.to_string(),
            stopping: s.stopping.to_string(),
            format: self.format.to_string(),
            end: Some(EndRule {
                eof: match (&self.eof_text, &self.eof) {
                    (Some(text), _) => text.clone(),
                    (None, Some(_)) => "a Rust evaluator".to_string(),
                    (None, None) => "none".to_string(),
                },
                eof_emit_marker: self.eof_emit_marker,
                eof_scope: if self.event_time.source_wide_stop {
                    "source"
                } else {
                    "partition"
                }
                .to_string(),
            }),
            replay_speed: Some(
                self.event_time
                    .speed
                    .map_or_else(|| "none".to_string(), |s| s.to_string()),
            ),
        }
    }
}
