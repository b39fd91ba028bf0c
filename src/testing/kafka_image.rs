//! The Kafka image as the tests start it: testcontainers' Kafka module, with its start script
//! written by a command that must succeed, and the broker's readiness left to the caller.

use std::borrow::Cow;

use testcontainers_modules::kafka::apache::{Kafka, KAFKA_PORT};
use testcontainers_modules::testcontainers::core::{CmdWaitFor, ContainerPort, ContainerState, ExecCommand, WaitFor};
use testcontainers_modules::testcontainers::{Image, TestcontainersError};

/// Where the module's container command waits for its start script (the module's private
/// `START_SCRIPT`, testcontainers-modules 0.15).
const START_SCRIPT: &str = "/opt/kafka/testcontainers_start.sh";

/// testcontainers' Kafka module (`apache/kafka-native` unless the request names another image),
/// but for one step. The module writes its start script with a command whose failure nobody
/// reads, then waits for "Kafka Server started" in the container's log for the whole startup
/// timeout, so a script that was never written, a log that never came and a slow broker all end
/// as the same "container startup timeout" (every container of a CI run did, with no cause).
/// Here the script's command must exit 0, and the caller waits for the broker to answer.
#[derive(Debug, Clone, Default)]
pub(super) struct KafkaImage {
    module: Kafka,
}

impl Image for KafkaImage {
    fn name(&self) -> &str {
        self.module.name()
    }

    fn tag(&self) -> &str {
        self.module.tag()
    }

    fn ready_conditions(&self) -> Vec<WaitFor> {
        self.module.ready_conditions()
    }

    fn entrypoint(&self) -> Option<&str> {
        self.module.entrypoint()
    }

    fn env_vars(&self) -> impl IntoIterator<Item = (impl Into<Cow<'_, str>>, impl Into<Cow<'_, str>>)> {
        self.module.env_vars()
    }

    fn cmd(&self) -> impl IntoIterator<Item = impl Into<Cow<'_, str>>> {
        self.module.cmd()
    }

    fn expose_ports(&self) -> &[ContainerPort] {
        self.module.expose_ports()
    }

    /// The module's start script (the broker advertised at the host's port), written whole under
    /// another name and then moved into place, so the waiting command never runs half of it.
    fn exec_after_start(&self, state: ContainerState) -> Result<Vec<ExecCommand>, TestcontainersError> {
        let port = state.host_port_ipv4(KAFKA_PORT)?;
        let script = format!(
            "#!/usr/bin/env bash\nexport KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://127.0.0.1:{port},BROKER://localhost:9093\n/etc/kafka/docker/run\n"
        );
        // the script is $1; errors go to the container's stderr, which the start's error quotes
        // (written again without that where the container's stderr cannot be opened)
        let once = format!("printf '%s' \"$1\" > {START_SCRIPT}.new && mv {START_SCRIPT}.new {START_SCRIPT}");
        let write = format!("{{ {once}; }} 2>/proc/1/fd/2 || {{ {once}; }}");
        Ok(vec![ExecCommand::new([
            "sh".to_string(),
            "-c".to_string(),
            write,
            // $0, the name the shell's messages give
            "sh".to_string(),
            script,
        ])
        .with_cmd_ready_condition(CmdWaitFor::exit_code(0))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module's container command waits for the script at the path written here.
    #[test]
    fn the_script_is_written_where_the_module_s_command_waits_for_it() {
        let image = KafkaImage::default();
        let command: Vec<String> = image.cmd().into_iter().map(|part| part.into().into_owned()).collect();
        assert!(
            command.iter().any(|part| part.contains(START_SCRIPT)),
            "the module's command {command:?} waits for another script than {START_SCRIPT}"
        );
    }
}
