//! The clients a group member makes besides its job's: its membership's (which the job assembly
//! joins with), and all of them for `validate` to create once.

/// A member's consumer in the job's group `group` (its client is `job.member`'s), subscribed to
/// the source's topics: the source's cluster and properties, with the group's settings; a
/// static member (`group.instance.id`) when `job.member` was set.
pub(crate) fn member_spec<'a>(
    source: &'a crate::kafka::config::KafkaSourceConfig,
    group: String,
    member: String,
    static_member: bool,
) -> (
    crate::client::cluster::ClientSpec<'a>,
    crate::client::cluster::GroupSpec,
) {
    let settings = &source.settings;
    (
        crate::client::cluster::ClientSpec::new(&settings.bootstrap_servers, &settings.properties, "group"),
        crate::client::cluster::GroupSpec {
            group,
            instance: static_member.then(|| member.clone()),
            member,
            topics: super::topics(&settings.subscription),
            // checked by validate (crate::config::group::protocol)
            protocol: crate::client::cluster::native::protocol_of(&settings.properties).unwrap_or_default(),
            assignor: settings.properties.get("group.remote.assignor").cloned(),
        },
    )
}

/// Every client a group member makes besides its job's (for `validate`): its membership, the
/// clients that list the group's members, read its committed positions and count partitions, and
/// with a source-wide stop, the event-time link's (on the store's cluster, and the source's).
pub(crate) fn probes(
    source: &crate::kafka::config::KafkaSourceConfig,
    store: &crate::checkpoint_store::KafkaStoreConfig,
    member: &str,
    static_member: bool,
) -> Vec<crate::client::probe::Probe> {
    use crate::client::probe::Probe;
    let settings = &source.settings;
    let group = super::group_id(&store.job);
    let (spec, membership) = member_spec(source, group.clone(), member.to_string(), static_member);
    let mut probes = vec![
        Probe::member("source", &spec, &membership),
        Probe::consumer("source", &super::twins::members_spec(settings)),
        Probe::consumer("source", &super::progress::offsets_spec(settings, &group)),
        Probe::consumer("source", &super::progress::partitions_spec(settings)),
    ];
    if source.event_time.source_wide_stop {
        let [publisher, tail, lister] =
            super::event_time::specs(store, &settings.bootstrap_servers, &settings.properties);
        probes.push(Probe::producer(store.properties_of, &publisher));
        probes.push(Probe::consumer(store.properties_of, &tail));
        probes.push(Probe::consumer("source", &lister));
    }
    probes
}
