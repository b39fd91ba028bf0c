//! Integration tests against a real Apache Kafka broker (see `common`): one test binary, so the
//! crate and librdkafka are linked once.

mod broker;
mod cluster;
mod common;
mod containers;
mod control;
mod copies;
mod daemon;
mod daemon_exit;
mod daemon_util;
mod datagen;
mod event_time;
mod event_time_stop;
mod exactly_once;
mod examples;
mod faults;
mod filters;
mod formats;
mod instances;
mod kafka_source;
mod kubernetes;
mod own_broker;
mod own_cluster;
mod periodic;
mod plan;
mod recreated;
mod registry;
mod registry_double;
mod registry_formats;
mod restore;
mod routing;
mod security;
mod status_page;
mod testing_api;
mod tls;
