#!/usr/bin/env bash
# The official image's health probe (used by docker/compose.yml): Kafka's own tool.
exec java -Xmx128m -cp "/opt/kafka/libs/*" org.apache.kafka.tools.BrokerApiVersionsCommand "$@"
