//! The suite against an in-memory plugin that keeps every promise (every check passes, none
//! is skipped), then against the same plugin with one promise broken at a time: the check that
//! tests that promise must fail, so no check is one that can never fail.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests: a panic is a failed assertion"
)]

mod plugin;

use std::time::Duration;

use plugin::{Breakage, TestPlugin};
use provider_conformance::{ALL, Config, Outcome, Report};
use provider_sdk::Endpoint;
use provider_sdk::serve::{Listener, serve};
use tokio::sync::oneshot;

/// Runs the suite against the test plugin broken by `breakage`.
async fn run(breakage: Breakage) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let endpoint = Endpoint::Unix(dir.path().join("plugin.sock"));
    let listener = Listener::bind(&endpoint).await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let plugin = TestPlugin::new(breakage);
    let server = tokio::spawn(serve(listener, None, plugin.clone(), plugin, async {
        let _ = stopped.await;
    }));
    let mut config = Config::new(endpoint);
    config.ready_timeout = Duration::from_millis(200);
    config.settle_timeout = Duration::from_secs(2);
    config.poll_interval = Duration::from_millis(10);
    let report = provider_conformance::run(config).await.unwrap();
    drop(stop);
    server.await.unwrap().unwrap();
    report
}

fn outcomes(report: &Report, wanted: fn(&Outcome) -> bool) -> Vec<&'static str> {
    report
        .checks
        .iter()
        .filter(|c| wanted(&c.outcome))
        .map(|c| c.id)
        .collect()
}

#[tokio::test]
async fn a_plugin_that_keeps_every_promise_passes_every_check() {
    let report = run(Breakage::None).await;
    let ids: Vec<&str> = report.checks.iter().map(|c| c.id).collect();
    let all: Vec<&str> = ALL.iter().map(|c| c.id).collect();
    assert_eq!(ids, all, "every check runs, in the listed order");
    assert!(
        report.passed() && report.counts().1 == 0,
        "{}",
        provider_conformance::report::text(&report)
    );
}

#[tokio::test]
async fn each_broken_promise_fails_its_check() {
    use Breakage::*;
    let cases = [
        (EmptyName, "identity.name"),
        (NoVendorVersion, "identity.vendor-version"),
        (ApiVersion2, "identity.api-version"),
        (ChangingVersion, "identity.stable"),
        (DuplicateCapability, "identity.capabilities"),
        (VocabularyWithCoreLabel, "identity.vocabulary"),
        (NeverReady, "identity.probe"),
        (NoNodeClasses, "node-classes.supported"),
        (
            ResolveAnnouncedUnimplemented,
            "node-classes.resolve-capability",
        ),
        (ResolveNotReady, "node-classes.resolve-valid"),
        (ResolveUnstableHash, "node-classes.resolve-stable"),
        (ResolveReadsAnything, "node-classes.resolve-invalid"),
        (ResolveAnyKind, "node-classes.resolve-unknown-kind"),
        (
            ConvertAnnouncedUnimplemented,
            "node-classes.convert-capability",
        ),
        (ConvertForgetsCurrent, "node-classes.convert-current"),
        (ConvertKnowsEverything, "node-classes.convert-unknown-kind"),
        (WatchAnnouncedUnimplemented, "interruptions.capability"),
        (AckRefusesUnknown, "interruptions.ack-unknown"),
        (EmptyCatalogue, "instance-types.non-empty"),
        (DuplicateType, "instance-types.unique-names"),
        (NoOwnName, "instance-types.own-name"),
        (ZeroPrice, "instance-types.offering-price"),
        (
            UnspecifiedAvailability,
            "instance-types.offering-availability",
        ),
        (SecondCatalogueDiffers, "instance-types.consistent"),
        (PendingForever, "create.launches"),
        (NewInstanceEveryCreate, "create.idempotent"),
        (IgnoresZone, "create.honours-zone"),
        (IgnoresZone, "create.within-requirements"),
        (IgnoresCapacityType, "create.honours-capacity-type"),
        (IgnoresArch, "create.honours-architecture"),
        (CreateWithoutType, "create.requires-instance-type"),
        (CreateNameless, "create.requires-name"),
        (CreateAnyKind, "create.unknown-node-class-kind"),
        (CapacityErrorUnnamed, "create.insufficient-capacity"),
        (OneCreateAtATime, "create.parallel"),
        (SameNameRace, "create.concurrent-same-name"),
        (ForgetsCutOffLaunch, "create.deadline-retry"),
        (IsDriftedAnnouncedUnimplemented, "is-drifted.capability"),
        (AlwaysDrifted, "is-drifted.fresh-launch"),
        (IgnoresHash, "is-drifted.stale-hash"),
        (IsDriftedWithoutNodeClaim, "is-drifted.requires-node-claim"),
        (GetUnannouncedButAnswers, "get.capability"),
        (GetWrongInstance, "get.launched"),
        (ListAnnouncedUnimplemented, "list.capability"),
        (ListMissesInstances, "list.launched"),
        (ListIgnoresPageSize, "list.pages"),
        (DeleteUnspecified, "delete.terminates"),
        (DeleteGoneFails, "delete.idempotent"),
        (DeleteByNameIgnored, "delete.by-name"),
        (DeleteNameless, "delete.requires-name"),
        (GetFindsTerminated, "get.gone"),
        (ListShowsTerminated, "list.gone"),
        (IsDriftedUnknownNotDrifted, "is-drifted.gone"),
        (RepairAnnouncedUnimplemented, "repair-policies.capability"),
        (RepairNegative, "repair-policies.well-formed"),
        (DeleteKeepsInstances, "cleanup.nothing-left"),
        (ErrorWithoutInfo, "errors.error-info"),
        (RepairDeadlineExceeded, "errors.deadlines"),
    ];
    let mut missed = Vec::new();
    for (breakage, check) in cases {
        let report = run(breakage).await;
        let failed = outcomes(&report, Outcome::is_fail);
        if !failed.contains(&check) {
            missed.push(format!(
                "{breakage:?}: {check} did not fail (failed: {failed:?})"
            ));
        }
    }
    assert!(missed.is_empty(), "{missed:#?}");
    // The catalogue checks no breakage above reaches are broken one by one in the catalogue
    // module's unit tests (one currency, resources, requirement keys and values, chunk size,
    // core's acceptance, launchable).
}
