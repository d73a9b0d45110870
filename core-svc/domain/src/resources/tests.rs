//! The resource lists' unit and property tests.

use super::*;
use proptest::prelude::*;

const GI: i64 = 1 << 30;
const MI: i64 = 1 << 20;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap_or_else(|e| panic!("{e}"))
}

fn quantities(pairs: &[(&str, &str)]) -> Quantities {
    pairs
        .iter()
        .map(|(name, value)| (ResourceName::new(name), q(value)))
        .collect()
}

fn list(pairs: &[(&str, &str)]) -> ResourceList {
    ResourceList::from_quantities(pairs.iter().map(|(n, v)| (*n, q(v)))).expect("valid list")
}

fn container(requests: &[(&str, &str)]) -> ContainerResources {
    ContainerResources {
        requests: quantities(requests),
        ..ContainerResources::default()
    }
}

fn sidecar(requests: &[(&str, &str)]) -> ContainerResources {
    ContainerResources {
        restart_policy_always: true,
        ..container(requests)
    }
}

#[test]
fn names_map_well_known_resources_to_fields_and_sort_by_name() {
    assert_eq!(ResourceName::new("cpu"), ResourceName::CPU);
    assert_eq!(ResourceName::from("pods".to_owned()), ResourceName::PODS);
    assert_eq!(
        ResourceName::new("nvidia.com/gpu").as_str(),
        "nvidia.com/gpu"
    );
    assert!(ResourceName::new("hugepages-2Mi").is_hugepages());
    assert_eq!(ResourceName::new("hugepages-1Gi").unit(), "bytes");
    assert_eq!(ResourceName::CPU.unit(), "millicores");
    assert_eq!(ResourceName::new("nvidia.com/gpu").unit(), "units");
    let mut names = [
        ResourceName::PODS,
        ResourceName::new("nvidia.com/gpu"),
        ResourceName::CPU,
        ResourceName::new("aws.amazon.com/neuron"),
        ResourceName::MEMORY,
        ResourceName::EPHEMERAL_STORAGE,
    ];
    names.sort();
    let sorted: Vec<&str> = names.iter().map(ResourceName::as_str).collect();
    assert_eq!(
        sorted,
        [
            "aws.amazon.com/neuron",
            "cpu",
            "ephemeral-storage",
            "memory",
            "nvidia.com/gpu",
            "pods"
        ]
    );
}

#[test]
fn converts_from_and_to_quantities_rounding_up_to_the_unit() {
    let l = list(&[
        ("cpu", "1500m"),
        ("memory", "16Gi"),
        ("pods", "110"),
        ("ephemeral-storage", "20G"),
        ("nvidia.com/gpu", "1"),
        ("hugepages-2Mi", "1Gi"),
    ]);
    assert_eq!(l.cpu_millis(), 1500);
    assert_eq!(l.memory_bytes(), 16 * GI);
    assert_eq!(l.pods(), 110);
    assert_eq!(l.ephemeral_storage_bytes(), 20_000_000_000);
    assert_eq!(l.get(&ResourceName::new("nvidia.com/gpu")), 1);
    assert_eq!(l.quantity(&ResourceName::new("hugepages-2Mi")), q("1Gi"));
    let shown: Vec<(String, String)> = l
        .to_quantities()
        .into_iter()
        .map(|(n, q)| (n.to_string(), q.to_string()))
        .collect();
    let expected = [
        ("cpu", "1500m"),
        ("ephemeral-storage", "20G"),
        ("hugepages-2Mi", "1Gi"),
        ("memory", "16Gi"),
        ("nvidia.com/gpu", "1"),
        ("pods", "110"),
    ];
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(shown, expected);
    assert_eq!(
        l.to_string(),
        "{cpu: 1500m, ephemeral-storage: 20G, hugepages-2Mi: 1Gi, memory: 16Gi, \
             nvidia.com/gpu: 1, pods: 110}"
    );
    assert_eq!(
        ResourceList::from_quantities(l.to_quantities().iter().map(|(n, q)| (n, q))),
        Ok(l)
    );

    // Sub-unit amounts round up: cpu to a milli, everything else to a whole unit.
    let tiny = list(&[
        ("cpu", "1n"),
        ("memory", "0.5"),
        ("example.com/foo", "100m"),
    ]);
    assert_eq!(tiny.cpu_millis(), 1);
    assert_eq!(tiny.memory_bytes(), 1);
    assert_eq!(tiny.get(&ResourceName::new("example.com/foo")), 1);
    // Zero entries are not stored, so lists compare structurally.
    assert_eq!(
        list(&[("nvidia.com/gpu", "0"), ("cpu", "0")]),
        ResourceList::new()
    );
    assert!(list(&[("nvidia.com/gpu", "0")]).is_zero());
}

#[test]
fn rejects_duplicates_and_out_of_range_quantities() {
    let dup = ResourceList::from_quantities([("cpu", q("1")), ("cpu", q("2"))]);
    assert_eq!(dup, Err(ResourceError::Duplicate(ResourceName::CPU)));
    let dup = ResourceList::from_quantities([("a/b", q("0")), ("a/b", q("2"))]);
    assert_eq!(dup, Err(ResourceError::Duplicate(ResourceName::new("a/b"))));
    let huge = ResourceList::from_quantities([("cpu", q("9223372036854775807"))]);
    let err = huge.expect_err("out of range");
    assert_eq!(
        err.to_string(),
        "cpu = 9223372036854775807 does not fit a 64-bit count of millicores"
    );
    assert!(ResourceList::from_quantities([("memory", q("8Ei"))]).is_ok());
    assert!(ResourceList::from_quantities([("memory", q("1e19"))]).is_err());
}

#[test]
fn adds_subtracts_and_takes_maxima_per_resource() {
    let a = list(&[("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")]);
    let b = list(&[
        ("cpu", "500m"),
        ("pods", "1"),
        ("aws.amazon.com/neuron", "2"),
    ]);
    let sum = a.checked_add(&b).expect("no overflow");
    assert_eq!(
        sum,
        list(&[
            ("cpu", "1500m"),
            ("memory", "1Gi"),
            ("pods", "1"),
            ("nvidia.com/gpu", "1"),
            ("aws.amazon.com/neuron", "2"),
        ])
    );
    assert_eq!(a.saturating_add(&b), sum);
    assert_eq!([&a, &b].into_iter().sum::<ResourceList>(), sum);
    assert_eq!(sum.checked_sub(&b), Ok(a.clone()));
    assert_eq!(
        b.checked_sub(&a),
        Ok(ResourceList::new()
            .with(ResourceName::CPU, -500)
            .with(ResourceName::MEMORY, -GI)
            .with("pods", 1)
            .with("nvidia.com/gpu", -1)
            .with("aws.amazon.com/neuron", 2))
    );
    assert_eq!(
        b.saturating_sub(&a),
        list(&[("pods", "1"), ("aws.amazon.com/neuron", "2")])
    );
    assert!(a.saturating_sub(&a).is_zero());
    assert_eq!(
        a.max_per_resource(&b),
        list(&[
            ("cpu", "1"),
            ("memory", "1Gi"),
            ("pods", "1"),
            ("nvidia.com/gpu", "1"),
            ("aws.amazon.com/neuron", "2"),
        ])
    );

    let max = ResourceList::new()
        .with("cpu", i64::MAX)
        .with("x/y", i64::MAX);
    let one = ResourceList::new().with("cpu", 1);
    assert_eq!(
        max.checked_add(&one),
        Err(ResourceError::Overflow {
            resource: ResourceName::CPU,
            operation: "sum"
        })
    );
    let err = max
        .checked_add(&ResourceList::new().with("x/y", 1))
        .expect_err("overflow");
    assert_eq!(
        err.to_string(),
        "the sum of x/y overflows a 64-bit count of units"
    );
    assert_eq!(max.saturating_add(&one).cpu_millis(), i64::MAX);

    // An extended amount that cancels out disappears.
    let mut gpu = ResourceList::new().with("nvidia.com/gpu", 2);
    gpu.saturating_add_assign(&ResourceList::new().with("nvidia.com/gpu", -2));
    assert_eq!(gpu, ResourceList::new());
}

#[test]
fn only_non_fixed_resources_count_as_extended() {
    let fixed = list(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "3")]);
    assert!(!fixed.has_extended_resources());
    let gpu = fixed.clone().with("nvidia.com/gpu", 1);
    assert!(gpu.has_extended_resources());
    assert!(!gpu.with("nvidia.com/gpu", 0).has_extended_resources());
}

#[test]
fn fits_names_the_first_resource_that_does_not_fit() {
    let node = list(&[("cpu", "3.5"), ("memory", "15Gi"), ("pods", "110")]);
    assert_eq!(
        fits(&list(&[("cpu", "3.5"), ("memory", "15Gi")]), &node),
        Ok(())
    );
    assert_eq!(fits(&ResourceList::new(), &node), Ok(()));

    let err = fits(&list(&[("cpu", "4"), ("memory", "16Gi")]), &node).expect_err("cpu");
    assert_eq!(err.resource, ResourceName::CPU);
    assert_eq!(err.to_string(), "needs 4 cpu, 3500m available");

    let err = fits(&list(&[("memory", "16Gi")]), &node).expect_err("memory");
    assert_eq!(err.to_string(), "needs 16Gi memory, 15Gi available");

    let err = fits(&list(&[("ephemeral-storage", "1Gi")]), &node).expect_err("storage");
    assert_eq!(err.to_string(), "needs 1Gi ephemeral-storage, 0 available");

    let err = fits(&list(&[("pods", "111")]), &node).expect_err("pods");
    assert_eq!(err.to_string(), "needs 111 pods, 110 available");

    // An extended resource the node lacks does not fit; one it has but nobody asks for
    // does not matter.
    let err = fits(&list(&[("nvidia.com/gpu", "1")]), &node).expect_err("gpu");
    assert_eq!(err.to_string(), "needs 1 nvidia.com/gpu, 0 available");
    let gpu_node = node.clone().with("nvidia.com/gpu", 8).with("a/b", 1);
    assert_eq!(fits(&list(&[("nvidia.com/gpu", "8")]), &gpu_node), Ok(()));
    assert!(fits(&list(&[("nvidia.com/gpu", "9")]), &gpu_node).is_err());
}

#[test]
fn pod_requests_sum_app_containers() {
    let pod = PodResources {
        containers: vec![
            container(&[("cpu", "100m"), ("memory", "128Mi")]),
            container(&[("cpu", "250m"), ("memory", "64Mi")]),
        ],
        ..PodResources::default()
    };
    assert_eq!(
        pod.requests(),
        list(&[("cpu", "350m"), ("memory", "192Mi")])
    );
}

#[test]
fn pod_requests_take_the_larger_of_init_containers_and_app_containers_per_resource() {
    let pod = PodResources {
        init_containers: vec![
            container(&[("cpu", "2"), ("memory", "64Mi")]),
            container(&[("cpu", "500m"), ("memory", "1Gi")]),
        ],
        containers: vec![
            container(&[("cpu", "1"), ("memory", "256Mi")]),
            container(&[("cpu", "500m"), ("memory", "256Mi")]),
        ],
        ..PodResources::default()
    };
    // cpu: max(1.5, 2) = 2; memory: max(512Mi, 1Gi) = 1Gi; init containers run one at a
    // time, so they are not summed with each other.
    assert_eq!(pod.requests(), list(&[("cpu", "2"), ("memory", "1Gi")]));
}

#[test]
fn limits_stand_in_for_missing_requests_per_resource() {
    let c = ContainerResources {
        requests: quantities(&[("cpu", "100m"), ("memory", "0")]),
        limits: quantities(&[("cpu", "1"), ("memory", "1Gi"), ("nvidia.com/gpu", "1")]),
        restart_policy_always: false,
    };
    // cpu keeps its request, memory keeps its explicit zero, the GPU takes its limit.
    assert_eq!(
        c.effective_requests(),
        quantities(&[("cpu", "100m"), ("memory", "0"), ("nvidia.com/gpu", "1")])
    );
    let pod = PodResources {
        init_containers: vec![ContainerResources {
            limits: quantities(&[("cpu", "3")]),
            ..ContainerResources::default()
        }],
        containers: vec![c],
        ..PodResources::default()
    };
    assert_eq!(
        pod.requests(),
        list(&[("cpu", "3"), ("nvidia.com/gpu", "1")])
    );
}

#[test]
fn sidecars_add_to_the_pod_and_to_later_init_containers() {
    // KEP-753: sidecars run for the pod's whole life, so they add to the app containers;
    // each regular init container runs alongside the sidecars started before it.
    let pod = PodResources {
        init_containers: vec![
            sidecar(&[("cpu", "1")]),
            container(&[("cpu", "2")]), // peak 2 + 1 = 3
            sidecar(&[("cpu", "3")]),   // peak 1 + 3 = 4
            container(&[("cpu", "2")]), // peak 2 + 4 = 6
        ],
        containers: vec![container(&[("cpu", "1")])], // 1 + sidecars 4 = 5
        ..PodResources::default()
    };
    assert_eq!(pod.requests(), list(&[("cpu", "6")]));

    // An init container before any sidecar does not see it.
    let pod = PodResources {
        init_containers: vec![container(&[("cpu", "4")]), sidecar(&[("cpu", "1")])],
        containers: vec![container(&[("cpu", "1")])],
        ..PodResources::default()
    };
    assert_eq!(pod.requests(), list(&[("cpu", "4")]));

    // A sidecar's own start is a peak too: all sidecars so far.
    let pod = PodResources {
        init_containers: vec![sidecar(&[("memory", "1Gi")]), sidecar(&[("memory", "1Gi")])],
        containers: vec![],
        ..PodResources::default()
    };
    assert_eq!(pod.requests(), list(&[("memory", "2Gi")]));

    // restartPolicy on an app container means nothing here.
    let pod = PodResources {
        containers: vec![sidecar(&[("cpu", "1")])],
        ..PodResources::default()
    };
    assert_eq!(pod.requests(), list(&[("cpu", "1")]));
}

#[test]
fn overhead_is_added_after_the_init_container_maximum() {
    let pod = PodResources {
        init_containers: vec![container(&[("cpu", "2")])],
        containers: vec![container(&[("cpu", "1")])],
        overhead: quantities(&[("cpu", "250m"), ("memory", "120Mi")]),
    };
    assert_eq!(
        pod.requests(),
        list(&[("cpu", "2250m"), ("memory", "120Mi")])
    );
}

#[test]
fn sub_unit_amounts_are_summed_before_rounding() {
    let pod = PodResources {
        containers: vec![
            container(&[("memory", "0.5")]),
            container(&[("memory", "0.5")]),
        ],
        ..PodResources::default()
    };
    assert_eq!(pod.requests().memory_bytes(), 1);
}

#[test]
fn daemon_set_overhead_sums_the_daemon_pods() {
    let daemons = [
        PodResources {
            containers: vec![container(&[("cpu", "100m"), ("memory", "128Mi")])],
            ..PodResources::default()
        },
        PodResources {
            init_containers: vec![container(&[("cpu", "1")])],
            containers: vec![container(&[("cpu", "50m"), ("memory", "64Mi")])],
            ..PodResources::default()
        },
    ];
    assert_eq!(
        daemon_set_overhead(&daemons),
        list(&[("cpu", "1100m"), ("memory", "192Mi")])
    );
    assert_eq!(daemon_set_overhead(&[]), ResourceList::new());
}

#[test]
fn allocatable_subtracts_overhead_and_hugepages_floored_at_zero() {
    let capacity = list(&[
        ("cpu", "4"),
        ("memory", "16Gi"),
        ("pods", "58"),
        ("ephemeral-storage", "20Gi"),
        ("hugepages-2Mi", "1Gi"),
        ("hugepages-1Gi", "2Gi"),
    ]);
    let overhead = NodeOverhead {
        kube_reserved: list(&[
            ("cpu", "80m"),
            ("memory", "893Mi"),
            ("ephemeral-storage", "1Gi"),
        ]),
        system_reserved: list(&[("cpu", "20m")]),
        eviction_threshold: list(&[("memory", "100Mi"), ("ephemeral-storage", "2Gi")]),
    };
    assert_eq!(
        overhead.total(),
        list(&[
            ("cpu", "100m"),
            ("memory", "993Mi"),
            ("ephemeral-storage", "3Gi")
        ])
    );
    let alloc = allocatable(&capacity, &overhead);
    assert_eq!(alloc.cpu_millis(), 3900);
    assert_eq!(alloc.memory_bytes(), 16 * GI - 993 * MI - 3 * GI);
    assert_eq!(alloc.ephemeral_storage_bytes(), 17 * GI);
    assert_eq!(alloc.pods(), 58);
    // Huge pages stay allocatable as themselves.
    assert_eq!(alloc.get(&ResourceName::new("hugepages-2Mi")), GI);

    // Overhead beyond capacity, or huge pages beyond memory, floor at zero; overhead on a
    // resource the node does not have is ignored.
    let small = list(&[("cpu", "50m"), ("memory", "1Gi"), ("hugepages-2Mi", "2Gi")]);
    let heavy = NodeOverhead {
        kube_reserved: list(&[("cpu", "80m"), ("example.com/foo", "1")]),
        ..NodeOverhead::default()
    };
    let alloc = allocatable(&small, &heavy);
    assert_eq!(alloc.cpu_millis(), 0);
    assert_eq!(alloc.memory_bytes(), 0);
    assert_eq!(alloc.get(&ResourceName::new("example.com/foo")), 0);
}

fn arb_list() -> impl Strategy<Value = ResourceList> {
    let amount = || 0i64..1_000_000_000_000;
    (
        amount(),
        amount(),
        amount(),
        0i64..1000,
        proptest::collection::vec(
            (
                prop_oneof![
                    Just("nvidia.com/gpu"),
                    Just("aws.amazon.com/neuron"),
                    Just("hugepages-2Mi"),
                    Just("example.com/foo"),
                ],
                0i64..64,
            ),
            0..4,
        ),
    )
        .prop_map(|(cpu, memory, storage, pods, extended)| {
            let mut list = ResourceList::new()
                .with(ResourceName::CPU, cpu)
                .with(ResourceName::MEMORY, memory)
                .with(ResourceName::EPHEMERAL_STORAGE, storage)
                .with(ResourceName::PODS, pods);
            for (name, amount) in extended {
                list.set(&ResourceName::new(name), amount);
            }
            list
        })
}

proptest! {
    #[test]
    fn addition_is_commutative_and_associative_with_zero_identity(
        a in arb_list(), b in arb_list(), c in arb_list()
    ) {
        let ab = a.checked_add(&b).expect("small");
        prop_assert_eq!(&ab, &b.checked_add(&a).expect("small"));
        prop_assert_eq!(
            ab.checked_add(&c).expect("small"),
            a.checked_add(&b.checked_add(&c).expect("small")).expect("small")
        );
        prop_assert_eq!(a.checked_add(&ResourceList::new()).expect("small"), a.clone());
        prop_assert_eq!(a.saturating_add(&b), ab);
    }

    #[test]
    fn subtraction_undoes_addition(a in arb_list(), b in arb_list()) {
        let ab = a.checked_add(&b).expect("small");
        prop_assert_eq!(ab.checked_sub(&b).expect("small"), a.clone());
        prop_assert_eq!(ab.saturating_sub(&b), a.clone());
        prop_assert!(a.saturating_sub(&ab).is_zero());
        prop_assert!(a.checked_sub(&a).expect("small").is_zero());
    }

    #[test]
    fn saturating_sub_never_goes_negative(a in arb_list(), b in arb_list()) {
        let d = a.saturating_sub(&b);
        prop_assert!(d.iter().all(|(_, amount)| amount > 0));
    }

    #[test]
    fn max_is_an_upper_bound_commutative_and_idempotent(a in arb_list(), b in arb_list()) {
        let m = a.max_per_resource(&b);
        prop_assert_eq!(&m, &b.max_per_resource(&a));
        prop_assert_eq!(a.max_per_resource(&a), a.clone());
        prop_assert!(fits(&a, &m).is_ok() && fits(&b, &m).is_ok());
    }

    #[test]
    fn fits_agrees_with_subtraction(r in arb_list(), a in arb_list()) {
        let remaining = a.checked_sub(&r).expect("small");
        let all_non_negative = remaining.iter().all(|(_, amount)| amount >= 0);
        prop_assert_eq!(fits(&r, &a).is_ok(), all_non_negative);
        prop_assert!(fits(&r, &r).is_ok());
    }

    #[test]
    fn fits_is_monotone(r in arb_list(), a in arb_list(), less in arb_list(), more in arb_list()) {
        if fits(&r, &a).is_ok() {
            // Asking for less, or offering more, still fits.
            prop_assert!(fits(&r.saturating_sub(&less), &a).is_ok());
            prop_assert!(fits(&r, &a.saturating_add(&more)).is_ok());
        } else {
            // Asking for more, or offering less, still does not.
            prop_assert!(fits(&r.saturating_add(&more), &a).is_err());
            prop_assert!(fits(&r, &a.saturating_sub(&less)).is_err());
        }
    }

    #[test]
    fn quantities_round_trip(a in arb_list()) {
        let pairs = a.to_quantities();
        let back = ResourceList::from_quantities(pairs.iter().map(|(n, q)| (n, q)));
        prop_assert_eq!(back, Ok(a));
    }
}
