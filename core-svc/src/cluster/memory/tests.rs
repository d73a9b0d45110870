use super::*;
use serde_json::json;

#[test]
fn given_rfc_7386_examples_then_the_merge_patch_gives_their_results() {
    let cases = [
        (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
        (
            json!({"a": "b"}),
            json!({"b": "c"}),
            json!({"a": "b", "b": "c"}),
        ),
        (json!({"a": "b"}), json!({"a": null}), json!({})),
        (
            json!({"a": [{"b": "c"}]}),
            json!({"a": [1]}),
            json!({"a": [1]}),
        ),
        (
            json!({"a": {"b": "c"}}),
            json!({"a": {"b": "d", "c": null}}),
            json!({"a": {"b": "d"}}),
        ),
        (
            json!({"e": null}),
            json!({"a": 1}),
            json!({"e": null, "a": 1}),
        ),
        (
            json!([1, 2]),
            json!({"a": "b", "c": null}),
            json!({"a": "b"}),
        ),
        (
            json!({}),
            json!({"a": {"bb": {"ccc": null}}}),
            json!({"a": {"bb": {}}}),
        ),
    ];
    for (mut target, patch, expected) in cases {
        apply_merge_patch(&mut target, &patch);
        assert_eq!(target, expected, "patch {patch}");
    }
}

#[test]
fn given_names_then_only_dns_subdomains_pass() {
    assert!(check_name("ip-10-0-0-1.ec2.internal").is_ok());
    assert!(check_name("default-x7b2k").is_ok());
    for bad in [
        "",
        "Upper",
        "-leading",
        "trailing-",
        "under_score",
        &"a".repeat(254),
    ] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn given_a_seed_then_uids_are_uuid_shaped_distinct_and_repeatable() {
    let uids = |seed| {
        let mut counters = Counters {
            resource_version: 0,
            random: SplitMix64::new(seed),
        };
        [counters.next_uid(), counters.next_uid()]
    };
    let [first, second] = uids(1);
    assert_ne!(first, second);
    assert_eq!(uids(1), [first.clone(), second]);
    assert_ne!(uids(2)[0], first);
    let groups: Vec<usize> = first.split('-').map(str::len).collect();
    assert_eq!(groups, [8, 4, 4, 4, 12], "{first}");
    assert_eq!(first.as_bytes()[14], b'4', "{first}");
}

/// The budgets' statuses in a snapshot, as (name, current healthy, expected pods).
async fn budget_counts(cluster: &InMemoryCluster) -> Vec<(String, i32, i32)> {
    let snapshot = cluster.snapshot().await.unwrap();
    snapshot
        .pdbs
        .iter()
        .map(|pdb| {
            let status = pdb.status.clone().unwrap_or_default();
            let name = pdb.metadata.name.clone().unwrap_or_default();
            (name, status.current_healthy, status.expected_pods)
        })
        .collect()
}

#[tokio::test]
async fn given_pods_and_budgets_rewritten_then_the_derived_statuses_follow_every_write() {
    let clock = crate::clock::FakeClock::new(Timestamp::UNIX_EPOCH);
    let cluster = InMemoryCluster::new(Arc::new(clock), 7);
    let pdb = |name: &str, app: &str| -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
        }))
        .unwrap()
    };
    cluster.create(&pdb("web", "web")).await.unwrap();
    cluster.create(&pdb("api", "api")).await.unwrap();
    for (name, app) in [("web-0", "web"), ("web-1", "web"), ("api-0", "api")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "labels": {"app": app},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                              "name": app, "uid": app, "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }))
        .unwrap();
        cluster.create(&pod).await.unwrap();
        cluster.bind_pod("default", name, "node-a").unwrap();
        cluster.set_pod_ready("default", name, true).unwrap();
    }
    assert_eq!(
        budget_counts(&cluster).await,
        [("api".to_owned(), 1, 1), ("web".to_owned(), 2, 2)]
    );

    // A pod's status changes (a new object, the same labels) and its labels change.
    cluster.set_pod_ready("default", "web-0", false).unwrap();
    assert_eq!(budget_counts(&cluster).await[1], ("web".to_owned(), 1, 2));
    cluster
        .merge_patch::<Pod>(
            Some("default"),
            "web-1",
            &json!({"metadata": {"labels": {"app": "api"}}}),
        )
        .await
        .unwrap();
    assert_eq!(
        budget_counts(&cluster).await,
        [("api".to_owned(), 2, 2), ("web".to_owned(), 0, 1)]
    );

    // A budget's selector changes: every pod is matched again.
    cluster
        .merge_patch::<PodDisruptionBudget>(
            Some("default"),
            "api",
            &json!({"spec": {"selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await
        .unwrap();
    assert_eq!(
        budget_counts(&cluster).await,
        [("api".to_owned(), 0, 1), ("web".to_owned(), 0, 1)]
    );

    // A deleted pod leaves its budget.
    cluster
        .delete::<Pod>(Some("default"), "web-0", DeleteOptions::default())
        .await
        .unwrap();
    cluster.finish_pod_termination("default", "web-0").unwrap();
    assert_eq!(
        budget_counts(&cluster).await,
        [("api".to_owned(), 0, 0), ("web".to_owned(), 0, 0)]
    );
}

#[tokio::test]
async fn given_snapshots_then_a_pod_is_made_slim_again_only_after_a_write_to_it() {
    let clock = crate::clock::FakeClock::new(Timestamp::UNIX_EPOCH);
    let cluster = InMemoryCluster::new(Arc::new(clock), 7);
    for name in ["a", "b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "i", "env": [{"name": "X", "value": "1"}]}]},
        }))
        .unwrap();
        cluster.create(&pod).await.unwrap();
    }
    let first = cluster.snapshot().await.unwrap().pods;
    let second = cluster.snapshot().await.unwrap().pods;
    assert!(first.iter().zip(&second).all(|(a, b)| Arc::ptr_eq(a, b)));

    cluster.bind_pod("default", "b", "node-a").unwrap();
    let third = cluster.snapshot().await.unwrap().pods;
    assert!(Arc::ptr_eq(&first[0], &third[0]), "a is unchanged");
    assert!(!Arc::ptr_eq(&first[1], &third[1]), "b was written");
    assert_eq!(
        third[1]
            .spec
            .as_ref()
            .and_then(|spec| spec.node_name.as_deref()),
        Some("node-a")
    );

    // The API server's front door still serves the pods whole.
    let stored = cluster.stored_pods();
    assert_eq!(stored.len(), 2);
    assert!(
        stored[0]
            .spec
            .as_ref()
            .is_some_and(|spec| spec.containers[0].env.is_some())
    );
}
