//! Two processes running as the same member of a group (the same `job.member`, the host name by
//! default, on two machines) share its transactional ids and fence each other, one restart after
//! the other, for ever. Before it joins, a member looks for a member of its name in the group:
//! one that died a moment ago leaves when its session expires; one still there after that is a
//! twin, and this process refuses to start, naming `job.member`.

use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use crate::client::cluster::{self, ClientSpec, Consumer};
use crate::core::sim;
use crate::error::{Error, Result};
use crate::kafka::config::KafkaSourceConfig;

/// librdkafka's default `session.timeout.ms`.
const SESSION_TIMEOUT_MS: u64 = 45_000;
/// What a session may run over before its member is dropped (a heartbeat's round trip).
const MARGIN: Duration = Duration::from_secs(3);

/// Wait until no member of `group` runs under `member`'s name, at most one session; an error
/// naming `job.member` if one still does.
pub(crate) async fn none_running(source: &KafkaSourceConfig, group: &str, member: &str) -> Result<()> {
    let settings = &source.settings;
    let session = Duration::from_millis(
        settings
            .properties
            .get("session.timeout.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(SESSION_TIMEOUT_MS),
    );
    let client = format!("{group}@{member}");
    let spec = members_spec(settings);
    let consumer: Arc<dyn Consumer> = Arc::from(cluster::of(&settings.bootstrap_servers).consumer(&spec)?);
    let deadline = sim::now() + session + MARGIN;
    let mut said = false;
    loop {
        let asking = Arc::clone(&consumer);
        let name = group.to_string();
        let members = match crate::core::unblock(move || asking.group_members(&name, Duration::from_secs(10))).await? {
            Ok(members) => members,
            Err(e) => {
                // a lookup that fails is no reason not to start: the fencing still stops a twin
                warn!(group, error = %e, "listing the group's members failed; joining without checking for a twin");
                return Ok(());
            }
        };
        let Some((_, host)) = members.into_iter().find(|(id, _)| *id == client) else {
            return Ok(());
        };
        if sim::now() >= deadline {
            return Err(Error::config(
                "job.member",
                format!(
                    "another process runs as member {member:?} of consumer group {group} (on {host}), and still did \
                     after a session timeout ({}): two members of one name share their transactional ids and fence \
                     each other; give each member a name of its own (job.member, the host name by default)",
                    humantime::format_duration(session)
                ),
            ));
        }
        if !said {
            info!(group, member, host = %host, "a member of this name is in the group: waiting up to a session timeout for it to leave (a process that died a moment ago) before joining");
            said = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The members of the job's consumer group `group` now, each as `client id on host` (`tidegate
/// state set` refuses to move the state of a job that has any).
pub(crate) fn running_members(source: &KafkaSourceConfig, group: &str) -> Result<Vec<String>> {
    let settings = &source.settings;
    let spec = members_spec(settings);
    let consumer = cluster::of(&settings.bootstrap_servers).consumer(&spec)?;
    let members = consumer
        .group_members(group, Duration::from_secs(10))
        .map_err(|e| crate::error::kafka(format!("listing the members of consumer group {group}"), e))?;
    Ok(members
        .into_iter()
        .map(|(id, host)| format!("{id} on {host}"))
        .collect())
}

/// The client that lists the group's members.
pub(crate) fn members_spec(settings: &crate::kafka::KafkaSourceSettings) -> ClientSpec<'_> {
    ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "group-members")
}
