//! The requirements algebra's unit and property tests.

use super::*;
use crate::labels::{
    LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_HOSTNAME, LABEL_INSTANCE_TYPE, LABEL_OS,
    LABEL_TOPOLOGY_REGION, LABEL_TOPOLOGY_ZONE,
};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use std::sync::Arc;

fn reqs<I: IntoIterator<Item = Requirement>>(items: I) -> Requirements {
    items.into_iter().collect()
}

/// Upstream's fixtures (`requirement_test.go`), on one key.
const FIXTURE_NAMES: [&str; 14] = [
    "exists", "dne", "inA", "inB", "inAB", "notInA", "in1", "in9", "in19", "notIn12", "gt1", "gt9",
    "lt1", "lt9",
];

fn fixture(key: &str, name: &str) -> Requirement {
    let op = |operator, values: &[&str]| Requirement::new(key, operator, values, None).unwrap();
    match name {
        "exists" => op(Operator::Exists, &[]),
        "dne" => op(Operator::DoesNotExist, &[]),
        "inA" => op(Operator::In, &["A"]),
        "inB" => op(Operator::In, &["B"]),
        "inAB" => op(Operator::In, &["A", "B"]),
        "notInA" => op(Operator::NotIn, &["A"]),
        "in1" => op(Operator::In, &["1"]),
        "in9" => op(Operator::In, &["9"]),
        "in19" => op(Operator::In, &["1", "9"]),
        "notIn12" => op(Operator::NotIn, &["1", "2"]),
        "gt1" => op(Operator::Gt, &["1"]),
        "gt9" => op(Operator::Gt, &["9"]),
        "lt1" => op(Operator::Lt, &["1"]),
        "lt9" => op(Operator::Lt, &["9"]),
        // Results upstream spells out as structs.
        "notInA12" => op(Operator::NotIn, &["A", "1", "2"]),
        "notIn2gt1" => Requirement::greater_than(key, 1).intersection(&op(Operator::NotIn, &["2"])),
        "notIn12lt9" => {
            Requirement::less_than(key, 9).intersection(&op(Operator::NotIn, &["1", "2"]))
        }
        "gt1lt9" => Requirement::greater_than(key, 1).intersection(&Requirement::less_than(key, 9)),
        other => panic!("unknown fixture {other}"),
    }
}

fn fixtures(key: &str) -> Vec<(&'static str, Requirement)> {
    FIXTURE_NAMES
        .iter()
        .map(|&n| (n, fixture(key, n)))
        .collect()
}

#[test]
fn intersection_matches_upstream_table() {
    // Row ∩ column, columns in FIXTURE_NAMES order (upstream's "Intersect requirements").
    #[rustfmt::skip]
        let table: [(&str, [&str; 14]); 14] = [
            //           exists     dne    inA    inB    inAB    notInA      in1    in9    in19    notIn12      gt1          gt9    lt1    lt9
            ("exists",  ["exists",  "dne", "inA", "inB", "inAB", "notInA",   "in1", "in9", "in19", "notIn12",   "gt1",       "gt9", "lt1", "lt9"]),
            ("dne",     ["dne"; 14]),
            ("inA",     ["inA",     "dne", "inA", "dne", "inA",  "dne",      "dne", "dne", "dne",  "inA",       "dne",       "dne", "dne", "dne"]),
            ("inB",     ["inB",     "dne", "dne", "inB", "inB",  "inB",      "dne", "dne", "dne",  "inB",       "dne",       "dne", "dne", "dne"]),
            ("inAB",    ["inAB",    "dne", "inA", "inB", "inAB", "inB",      "dne", "dne", "dne",  "inAB",      "dne",       "dne", "dne", "dne"]),
            ("notInA",  ["notInA",  "dne", "dne", "inB", "inB",  "notInA",   "in1", "in9", "in19", "notInA12",  "gt1",       "gt9", "lt1", "lt9"]),
            ("in1",     ["in1",     "dne", "dne", "dne", "dne",  "in1",      "in1", "dne", "in1",  "dne",       "dne",       "dne", "dne", "in1"]),
            ("in9",     ["in9",     "dne", "dne", "dne", "dne",  "in9",      "dne", "in9", "in9",  "in9",       "in9",       "dne", "dne", "dne"]),
            ("in19",    ["in19",    "dne", "dne", "dne", "dne",  "in19",     "in1", "in9", "in19", "in9",       "in9",       "dne", "dne", "in1"]),
            ("notIn12", ["notIn12", "dne", "inA", "inB", "inAB", "notInA12", "dne", "in9", "in9",  "notIn12",   "notIn2gt1", "gt9", "lt1", "notIn12lt9"]),
            ("gt1",     ["gt1",     "dne", "dne", "dne", "dne",  "gt1",      "dne", "in9", "in9",  "notIn2gt1", "gt1",       "gt9", "dne", "gt1lt9"]),
            ("gt9",     ["gt9",     "dne", "dne", "dne", "dne",  "gt9",      "dne", "dne", "dne",  "gt9",       "gt9",       "gt9", "dne", "dne"]),
            ("lt1",     ["lt1",     "dne", "dne", "dne", "dne",  "lt1",      "dne", "dne", "dne",  "lt1",       "dne",       "dne", "lt1", "lt1"]),
            ("lt9",     ["lt9",     "dne", "dne", "dne", "dne",  "lt9",      "in1", "dne", "in1",  "notIn12lt9", "gt1lt9",   "dne", "lt1", "lt9"]),
        ];
    let mut checked = 0;
    for (row, expected_row) in table {
        let left = fixture("key", row);
        for (column, expected) in FIXTURE_NAMES.iter().zip(expected_row) {
            let right = fixture("key", column);
            assert_eq!(
                left.intersection(&right),
                fixture("key", expected),
                "{row} ∩ {column} should be {expected}"
            );
            assert_eq!(
                left.intersects(&right),
                expected != "dne",
                "{row} intersects {column}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 196);
    // The special results, spelled out so the fixtures above cannot hide a mistake.
    assert_eq!(fixture("key", "notIn2gt1").to_string(), "key NotIn [2] >=2");
    assert_eq!(
        fixture("key", "notIn12lt9").to_string(),
        "key NotIn [1 2] <=8"
    );
    assert_eq!(fixture("key", "gt1lt9").to_string(), "key Exists >=2 <=8");
    assert_eq!(fixture("key", "notInA12").to_string(), "key NotIn [1 2 A]");
}

#[test]
fn shared_values_equal_copied_ones_and_share_their_slice() {
    let names: Vec<Arc<str>> = vec!["m5.large".into(), "c5.large".into(), "m5.large".into()];
    let shared = Requirement::in_shared_values(LABEL_INSTANCE_TYPE, names.clone());
    assert_eq!(
        shared,
        Requirement::in_values(LABEL_INSTANCE_TYPE, ["c5.large", "m5.large"])
    );
    let again = Requirement::in_shared_values(LABEL_INSTANCE_TYPE, names.clone());
    let (Some(a), Some(b)) = (&shared.values.0, &again.values.0) else {
        panic!("both have values");
    };
    assert!(
        Arc::ptr_eq(&a[0], &b[0]),
        "the strings are the caller's, not copies"
    );
    assert!(Arc::ptr_eq(&a[1], &names[0]));
}

#[test]
fn intersection_keeps_the_larger_min_values() {
    let with = |name: &str, min| fixture("key", name).with_min_values(Some(min));
    let cases = [
        (
            with("exists", 1),
            fixture("key", "inAB"),
            Requirement::in_values("key", ["A", "B"]).with_min_values(Some(1)),
        ),
        (with("exists", 1), fixture("key", "dne"), with("dne", 1)),
        (
            with("notIn12", 2),
            with("lt1", 1),
            fixture("key", "lt1").with_min_values(Some(2)),
        ),
        (
            with("lt9", 1),
            with("in19", 2),
            Requirement::in_values("key", ["1"]).with_min_values(Some(2)),
        ),
        (with("gt9", 1), with("lt9", 3), with("dne", 3)),
        (
            fixture("key", "inA"),
            fixture("key", "inA"),
            fixture("key", "inA"),
        ),
    ];
    for (a, b, expected) in cases {
        assert_eq!(a.intersection(&b), expected, "{a} ∩ {b}");
        assert_eq!(b.intersection(&a), expected, "{b} ∩ {a}");
    }
}

#[test]
fn has_matches_upstream_table() {
    // Columns: A, B, 1, 2, 9.
    let table = [
        ("exists", [true, true, true, true, true]),
        ("dne", [false; 5]),
        ("inA", [true, false, false, false, false]),
        ("inB", [false, true, false, false, false]),
        ("inAB", [true, true, false, false, false]),
        ("notInA", [false, true, true, true, true]),
        ("in1", [false, false, true, false, false]),
        ("in9", [false, false, false, false, true]),
        ("in19", [false, false, true, false, true]),
        ("notIn12", [true, true, false, false, true]),
        ("gt1", [false, false, false, true, true]),
        ("gt9", [false; 5]),
        ("lt1", [false; 5]),
        ("lt9", [false, false, true, true, false]),
    ];
    for (name, expected) in table {
        let requirement = fixture("key", name);
        for (value, want) in ["A", "B", "1", "2", "9"].into_iter().zip(expected) {
            assert_eq!(requirement.has(value), want, "{name} has {value}");
        }
    }
}

#[test]
fn operator_len_display_and_any_match_upstream() {
    // (name, operator, len, display, any)
    let table: [(&str, Operator, usize, &str, Option<&str>); 14] = [
        (
            "exists",
            Operator::Exists,
            usize::MAX,
            "key Exists",
            Some("0"),
        ),
        ("dne", Operator::DoesNotExist, 0, "key DoesNotExist", None),
        ("inA", Operator::In, 1, "key In [A]", Some("A")),
        ("inB", Operator::In, 1, "key In [B]", Some("B")),
        ("inAB", Operator::In, 2, "key In [A B]", Some("A")),
        (
            "notInA",
            Operator::NotIn,
            usize::MAX - 1,
            "key NotIn [A]",
            Some("0"),
        ),
        ("in1", Operator::In, 1, "key In [1]", Some("1")),
        ("in9", Operator::In, 1, "key In [9]", Some("9")),
        ("in19", Operator::In, 2, "key In [1 9]", Some("1")),
        (
            "notIn12",
            Operator::NotIn,
            usize::MAX - 2,
            "key NotIn [1 2]",
            Some("0"),
        ),
        (
            "gt1",
            Operator::Exists,
            usize::MAX,
            "key Exists >=2",
            Some("2"),
        ),
        (
            "gt9",
            Operator::Exists,
            usize::MAX,
            "key Exists >=10",
            Some("10"),
        ),
        (
            "lt1",
            Operator::Exists,
            usize::MAX,
            "key Exists <=0",
            Some("0"),
        ),
        (
            "lt9",
            Operator::Exists,
            usize::MAX,
            "key Exists <=8",
            Some("0"),
        ),
    ];
    for (name, operator, len, display, any) in table {
        let requirement = fixture("key", name);
        assert_eq!(requirement.operator(), operator, "{name}");
        assert_eq!(requirement.len(), len, "{name}");
        assert_eq!(requirement.is_empty(), len == 0, "{name}");
        assert_eq!(requirement.to_string(), display, "{name}");
        assert_eq!(requirement.any_value().as_deref(), any, "{name}");
        if let Some(value) = requirement.any_value() {
            assert!(
                requirement.has(&value),
                "{name} any {value} must satisfy it"
            );
        }
    }
    assert_eq!(
        fixture("key", "gt9")
            .intersection(&fixture("key", "lt1"))
            .to_string(),
        "key DoesNotExist"
    );
}

#[test]
fn display_summarises_long_value_lists_and_shows_min_values() {
    let many = Requirement::in_values("key", ["g", "f", "e", "d", "c", "b", "a"]);
    assert_eq!(many.to_string(), "key In [a b c d e and 2 others]");
    let five = Requirement::in_values("key", ["e", "d", "c", "b", "a"]);
    assert_eq!(five.to_string(), "key In [a b c d e]");
    let flexible = Requirement::new("key", Operator::In, &["a", "b"], Some(2)).unwrap();
    assert_eq!(flexible.to_string(), "key In [a b] minValues 2");
}

#[test]
fn any_value_skips_excluded_integers_and_respects_bounds() {
    let not_in = Requirement::not_in("key", ["0", "1", "3"]);
    assert_eq!(not_in.any_value().as_deref(), Some("2"));
    let bounded =
        Requirement::at_least("key", 5).intersection(&Requirement::not_in("key", ["5", "6"]));
    assert_eq!(bounded.any_value().as_deref(), Some("7"));
    let negative = Requirement::less_than("key", 0);
    assert_eq!(negative.any_value().as_deref(), Some("-1"));
    let exhausted = Requirement::at_least("key", 5)
        .intersection(&Requirement::at_most("key", 5))
        .intersection(&Requirement::not_in("key", ["5"]));
    assert_eq!(exhausted.any_value(), None);
    let top = Requirement::at_least("key", i64::MAX);
    assert_eq!(top.any_value().as_deref(), Some("9223372036854775807"));
}

#[test]
fn gte_and_lte_are_gt_and_lt_shifted_by_one() {
    for n in [0_i64, 1, 7, 1_000_000] {
        assert_eq!(
            Requirement::at_least("key", n),
            Requirement::greater_than("key", n - 1)
        );
        assert_eq!(
            Requirement::at_most("key", n),
            Requirement::less_than("key", n + 1)
        );
        let gte = Requirement::new("key", Operator::Gte, &[n.to_string()], None).unwrap();
        assert!(gte.has(&n.to_string()));
        assert!(!gte.has(&(n - 1).to_string()));
        let lte = Requirement::new("key", Operator::Lte, &[n.to_string()], None).unwrap();
        assert!(lte.has(&n.to_string()));
        assert!(!lte.has(&(n + 1).to_string()));
    }
    assert!(Requirement::greater_than("key", i64::MAX).is_empty());
    assert!(Requirement::less_than("key", i64::MIN).is_empty());
    let gt_max = Requirement::new("key", Operator::Gt, &[i64::MAX.to_string()], Some(2)).unwrap();
    assert_eq!(
        gt_max,
        Requirement::does_not_exist("key").with_min_values(Some(2))
    );
}

#[test]
fn bounds_reject_non_integers_and_accept_signed_forms() {
    let gt = Requirement::greater_than("key", 4);
    for (value, want) in [
        ("5", true),
        ("4", false),
        ("+5", true),
        ("05", true),
        ("5.0", false),
        ("five", false),
        ("", false),
        (" 5", false),
        ("-5", false),
    ] {
        assert_eq!(gt.has(value), want, "Gt 4 has {value:?}");
    }
}

#[test]
fn new_validates_like_the_api() {
    let err = |op, values: &[&str], min| {
        Requirement::new("k", op, values, min)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(Operator::In, &[], None),
        "key k with operator In must have a value defined"
    );
    assert_eq!(
        err(Operator::Exists, &["a"], None),
        "key k with operator Exists must not have values, got [\"a\"]"
    );
    assert_eq!(
        err(Operator::DoesNotExist, &["a"], None),
        "key k with operator DoesNotExist must not have values, got [\"a\"]"
    );
    for op in [Operator::Gt, Operator::Lt, Operator::Gte, Operator::Lte] {
        for values in [
            &[][..],
            &["1", "2"],
            &["x"],
            &["-1"],
            &["1.5"],
            &["99999999999999999999"],
        ] {
            assert_eq!(
                err(op, values, None),
                format!(
                    "key k with operator {op} must have a single non-negative integer value, got {values:?}"
                )
            );
        }
    }
    assert_eq!(
        err(Operator::In, &["a"], Some(0)),
        "key k has minValues 0, minValues must be at least 1"
    );
    assert_eq!(
        err(Operator::In, &["a", "b"], Some(3)),
        "key k with operator In must have at least minimum number of values defined in 'values' field: minValues is 3, values has 2"
    );
    assert_eq!(
        "Above".parse::<Operator>().unwrap_err().to_string(),
        "unknown operator \"Above\", expected one of In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte"
    );
    // What the API allows.
    assert!(
        Requirement::new("k", Operator::NotIn, &[] as &[&str], None)
            .unwrap()
            .operator()
            == Operator::Exists
    );
    assert!(Requirement::new("k", Operator::Gt, &["0"], Some(50)).is_ok());
    assert!(Requirement::new("k", Operator::Exists, &[] as &[&str], Some(3)).is_ok());
    assert_eq!(
        Requirement::new("k", Operator::In, &["b", "a", "b"], Some(3))
            .unwrap()
            .values()
            .collect::<Vec<_>>(),
        ["a", "b"]
    );
}

#[test]
fn operators_round_trip_through_their_names() {
    for op in Operator::ALL {
        assert_eq!(op.as_str().parse::<Operator>().unwrap(), op);
        assert_eq!(op.to_string(), op.as_str());
        assert_eq!(
            op.is_bound(),
            matches!(
                op,
                Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
            )
        );
    }
}

#[test]
fn deprecated_keys_are_normalised_on_construction() {
    let labels = [
        ("failure-domain.beta.kubernetes.io/zone", "test"),
        ("failure-domain.beta.kubernetes.io/region", "test"),
        ("beta.kubernetes.io/arch", "test"),
        ("beta.kubernetes.io/os", "test"),
        ("beta.kubernetes.io/instance-type", "test"),
    ];
    let expected_keys = [
        LABEL_ARCH,
        LABEL_OS,
        LABEL_INSTANCE_TYPE,
        LABEL_TOPOLOGY_REGION,
        LABEL_TOPOLOGY_ZONE,
    ];
    let from_labels = Requirements::from_labels(labels);
    assert_eq!(from_labels.keys().collect::<Vec<_>>(), expected_keys);
    let selector: Vec<NodeSelectorRequirement> = labels
        .iter()
        .map(|(key, value)| NodeSelectorRequirement {
            key: (*key).to_owned(),
            operator: Operator::In,
            values: vec![(*value).to_owned()],
            min_values: None,
        })
        .collect();
    let from_selector = Requirements::from_node_selector_requirements(&selector).unwrap();
    assert_eq!(from_selector, from_labels);
    assert!(!from_labels.contains_key("failure-domain.beta.kubernetes.io/zone"));
    assert!(from_labels.get(LABEL_TOPOLOGY_ZONE).unwrap().has("test"));
    // A deprecated and a stable label that disagree leave nothing to satisfy.
    let clash =
        Requirements::from_labels([(LABEL_ARCH, "amd64"), ("beta.kubernetes.io/arch", "arm64")]);
    assert!(clash.get(LABEL_ARCH).unwrap().is_empty());
}

#[test]
fn node_selector_form_matches_upstream_and_keeps_exclusions() {
    let ns = |r: &Requirement| {
        r.to_node_selector_requirements()
            .into_iter()
            .map(|n| format!("{} {:?} {:?}", n.operator, n.values, n.min_values))
            .collect::<Vec<_>>()
    };
    assert_eq!(ns(&fixture("k", "exists")), ["Exists [] None"]);
    assert_eq!(ns(&fixture("k", "dne")), ["DoesNotExist [] None"]);
    assert_eq!(
        ns(&fixture("k", "inAB").with_min_values(Some(2))),
        ["In [\"A\", \"B\"] Some(2)"]
    );
    assert_eq!(ns(&fixture("k", "notIn12")), ["NotIn [\"1\", \"2\"] None"]);
    assert_eq!(ns(&fixture("k", "gt1")), ["Gte [\"2\"] None"]);
    assert_eq!(ns(&fixture("k", "lt9")), ["Lte [\"8\"] None"]);
    assert_eq!(ns(&fixture("k", "lt1")), ["Lte [\"0\"] None"]);
    assert_eq!(ns(&Requirement::less_than("k", 0)), ["Lt [\"0\"] None"]);
    assert_eq!(
        ns(&fixture("k", "gt1lt9")),
        ["Gte [\"2\"] None", "Lte [\"8\"] None"]
    );
    assert_eq!(
        ns(&fixture("k", "notIn12lt9")),
        ["NotIn [\"1\", \"2\"] None", "Lte [\"8\"] None"]
    );

    let all: Requirements = FIXTURE_NAMES
        .iter()
        .chain(&["notInA12", "notIn2gt1", "notIn12lt9", "gt1lt9"])
        .map(|name| fixture(name, name).with_min_values(Some(1)))
        .collect();
    assert_eq!(all.len(), 18);
    let written = all.to_node_selector_requirements();
    assert_eq!(
        Requirements::from_node_selector_requirements(&written).unwrap(),
        all
    );
}

#[test]
fn requirements_add_intersects_per_key_and_keeps_keys_sorted() {
    let mut requirements = Requirements::new();
    requirements.add(Requirement::in_values("b", ["1", "2"]));
    requirements.add(Requirement::exists("a"));
    requirements.add(Requirement::not_in("b", ["1"]));
    requirements.add(Requirement::in_values("c", ["x"]).with_min_values(Some(1)));
    assert_eq!(requirements.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(
        requirements.get("b"),
        Some(&Requirement::in_values("b", ["2"]))
    );
    assert_eq!(requirements.len(), 3);
    assert!(requirements.has_min_values());
    assert_eq!(
        requirements.remove("c").map(|r| r.to_string()).as_deref(),
        Some("c In [x] minValues 1")
    );
    assert!(!requirements.has_min_values());
    assert_eq!(requirements.remove("c"), None);
    let mut more = Requirements::from_labels([("a", "v")]);
    more.add_all(&requirements);
    assert_eq!(more.to_string(), "a In [v], b In [2]");
    assert!(Requirements::new().is_empty());
}

#[test]
fn requirements_display_is_sorted_and_hides_hostname() {
    let requirements: Requirements = FIXTURE_NAMES
        .iter()
        .map(|name| fixture(name, name))
        .chain([Requirement::in_values(LABEL_HOSTNAME, ["node-1"])])
        .collect();
    assert_eq!(
        requirements.to_string(),
        "dne DoesNotExist, exists Exists, gt1 Exists >=2, gt9 Exists >=10, in1 In [1], in19 In [1 9], \
             in9 In [9], inA In [A], inAB In [A B], inB In [B], lt1 Exists <=0, lt9 Exists <=8, \
             notIn12 NotIn [1 2], notInA NotIn [A]"
    );
}

/// Upstream's compatibility fixtures: a well-known key (zone) on each side, plus
/// `unconstrained` which defines nothing.
fn compatibility_fixtures() -> Vec<(&'static str, Requirements)> {
    let mut all = vec![("unconstrained", Requirements::new())];
    all.extend(
        fixtures(LABEL_TOPOLOGY_ZONE)
            .into_iter()
            .map(|(name, r)| (name, reqs([r]))),
    );
    all
}

/// Row `.compatible(column)`, 'Y' compatible and '.' not; columns in
/// `compatibility_fixtures` order (upstream's "should be compatible" tables).
const COMPATIBLE_ALLOWING_WELL_KNOWN: [&str; 15] = [
    "YYYYYYYYYYYYYYY", // unconstrained
    "YY.YYYYYYYYYYYY", // exists
    "Y.Y...Y...Y....", // dne
    "YY.Y.Y....Y....", // inA
    "YY..YYY...Y....", // inB
    "YY.YYYY...Y....", // inAB
    "YYY.YYYYYYYYYYY", // notInA
    "YY....YY.Y....Y", // in1
    "YY....Y.YYYY...", // in9
    "YY....YYYYYY..Y", // in19
    "YYYYYYY.YYYYYYY", // notIn12
    "YY....Y.YYYYY.Y", // gt1
    "YY....Y...YYY..", // gt9
    "YY....Y...Y..YY", // lt1
    "YY....YY.YYY.YY", // lt9
];

#[test]
fn compatibility_allowing_undefined_well_known_labels_matches_upstream() {
    let policy = LabelPolicy::core();
    let allow = AllowUndefined::WellKnownLabels(&policy);
    let all = compatibility_fixtures();
    for ((row, existing), expected) in all.iter().zip(COMPATIBLE_ALLOWING_WELL_KNOWN) {
        for ((column, incoming), want) in all.iter().zip(expected.chars()) {
            let want = want == 'Y';
            assert_eq!(
                existing.compatible(incoming, allow).is_ok(),
                want,
                "{row}.compatible({column})"
            );
            assert_eq!(
                existing.is_compatible(incoming, allow),
                want,
                "{row}.is_compatible({column})"
            );
        }
    }
}

#[test]
fn strict_compatibility_matches_upstream() {
    let all = compatibility_fixtures();
    // Strictly, an unconstrained side only accepts incoming keys that may be absent.
    let mut expected = COMPATIBLE_ALLOWING_WELL_KNOWN;
    expected[0] = "Y.Y...Y...Y....";
    for ((row, existing), expected) in all.iter().zip(expected) {
        for ((column, incoming), want) in all.iter().zip(expected.chars()) {
            let want = want == 'Y';
            assert_eq!(
                existing
                    .compatible(incoming, AllowUndefined::NoKeys)
                    .is_ok(),
                want,
                "{row}.compatible({column})"
            );
            assert_eq!(
                existing.is_compatible(incoming, AllowUndefined::NoKeys),
                want,
                "{row}.is_compatible({column})"
            );
        }
    }
}

#[test]
fn undefined_label_errors_name_the_likely_typo() {
    let policy = LabelPolicy::core();
    let allow = AllowUndefined::WellKnownLabels(&policy);
    let cases = [
        ("zone", "topology.kubernetes.io/zone"),
        ("region", "topology.kubernetes.io/region"),
        ("nodepool", "karpenter.sh/nodepool"),
        ("instance-type", "node.kubernetes.io/instance-type"),
        ("arch", "kubernetes.io/arch"),
        ("capacity-type", "karpenter.sh/capacity-type"),
        ("topology.kubernetesio/zone", "topology.kubernetes.io/zone"),
        ("node.io/zone", "topology.kubernetes.io/zone"),
        (
            "topology.kubernetes.io/regio",
            "topology.kubernetes.io/region",
        ),
        ("node.kubernetes.io/region", "topology.kubernetes.io/region"),
        ("karpenter/nodepool", "karpenter.sh/nodepool"),
    ];
    for (bad, meant) in cases {
        let incoming = reqs([Requirement::exists(bad)]);
        assert_eq!(
            Requirements::new()
                .compatible(&incoming, allow)
                .unwrap_err()
                .to_string(),
            format!("label \"{bad}\" does not have known values (typo of \"{meant}\"?)")
        );
    }
    let unknown = reqs([Requirement::exists("deployment")]);
    assert_eq!(
        Requirements::new()
            .compatible(&unknown, AllowUndefined::NoKeys)
            .unwrap_err()
            .to_string(),
        "label \"deployment\" does not have known values"
    );
    // Defined keys are candidates too, after the well-known ones.
    let existing = Requirements::from_labels([("example.com/team", "a")]);
    let typo = reqs([Requirement::exists("team")]);
    assert_eq!(
        existing.compatible(&typo, AllowUndefined::NoKeys),
        Err(CompatibilityError::UndefinedLabel {
            key: "team".into(),
            hint: Some("example.com/team".into())
        })
    );
}

#[test]
fn conflict_errors_name_key_and_both_value_sets() {
    let family = "karpenter.k8s.aws/instance-family";
    let existing = reqs([
        Requirement::in_values(family, ["m5", "c5"]),
        Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["a"]),
        Requirement::in_values(LABEL_CAPACITY_TYPE, ["spot"]),
    ]);
    let incoming = reqs([
        Requirement::in_values(family, ["p5"]),
        Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["b"]),
        Requirement::in_values(LABEL_CAPACITY_TYPE, ["spot"]),
    ]);
    let err = existing.intersects(&incoming).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key karpenter.k8s.aws/instance-family, karpenter.k8s.aws/instance-family In [p5] not in \
             karpenter.k8s.aws/instance-family In [c5 m5]; key topology.kubernetes.io/zone, \
             topology.kubernetes.io/zone In [b] not in topology.kubernetes.io/zone In [a]"
    );
    let CompatibilityError::Conflicts(conflicts) = &err else {
        panic!("{err:?}")
    };
    assert_eq!(conflicts.len(), 2);
    assert_eq!(
        conflicts[0].incoming,
        Requirement::in_values(family, ["p5"])
    );
    assert_eq!(
        conflicts[0].existing,
        Requirement::in_values(family, ["c5", "m5"])
    );
    // Roles stay the same whichever side is smaller.
    let small = reqs([Requirement::in_values(family, ["p5"])]);
    assert_eq!(
        existing.intersects(&small).unwrap_err().to_string(),
        "key karpenter.k8s.aws/instance-family, karpenter.k8s.aws/instance-family In [p5] not in \
             karpenter.k8s.aws/instance-family In [c5 m5]"
    );
    assert_eq!(
        small.intersects(&existing).unwrap_err().to_string(),
        "key karpenter.k8s.aws/instance-family, karpenter.k8s.aws/instance-family In [c5 m5] not in \
             karpenter.k8s.aws/instance-family In [p5]"
    );
    assert!(!existing.is_intersecting(&incoming));
    assert!(existing.is_intersecting(&Requirements::new()));
}

#[test]
fn drift_table_from_the_reference() {
    // As upstream's drift check: a NodeClaim's labels against its NodePool's requirements.
    let labels = [
        (LABEL_TOPOLOGY_ZONE, "zone-a"),
        (LABEL_CAPACITY_TYPE, "spot"),
        ("karpenter.k8s.aws/instance-cpu", "8"),
        ("example.com/team", "blue"),
    ];
    let cpu = "karpenter.k8s.aws/instance-cpu";
    // (row, the NodePool's one requirement, drifted)
    #[rustfmt::skip]
        let rows = [
            ("In changed to a value the label lacks", Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-b"]), true),
            ("new In requirement on a key the NodeClaim lacks", Requirement::in_values("example.com/tier", ["gold"]), true),
            ("In narrowed to exclude the current value", Requirement::in_values(LABEL_CAPACITY_TYPE, ["on-demand"]), true),
            ("In expanded", Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-a", "zone-b", "zone-c"]), false),
            ("changed to Exists", Requirement::exists("example.com/team"), false),
            ("changed to DoesNotExist on a present key", Requirement::does_not_exist("example.com/team"), true),
            ("Gt moved past the label value", Requirement::greater_than(cpu, 8), true),
            ("Lt moved past the label value", Requirement::less_than(cpu, 8), true),
            ("Gt still below the label value", Requirement::greater_than(cpu, 7), false),
            ("Lte still at the label value", Requirement::at_most(cpu, 8), false),
            ("DoesNotExist on an absent key", Requirement::does_not_exist("example.com/tier"), false),
            ("NotIn on an absent key", Requirement::not_in("example.com/tier", ["gold"]), false),
            ("NotIn the current value", Requirement::not_in(LABEL_TOPOLOGY_ZONE, ["zone-a"]), true),
            ("Exists on an absent key", Requirement::exists("example.com/tier"), true),
        ];
    assert!(Requirements::new().matches_labels(labels).is_ok());
    for (row, requirement, drifted) in rows {
        let requirements = reqs([requirement]);
        assert_eq!(
            requirements.matches_labels(labels).is_err(),
            drifted,
            "{row}"
        );
    }
    let err = reqs([Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-b"])])
        .matches_labels(labels)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [zone-b] not in topology.kubernetes.io/zone In [zone-a]"
    );
    let deprecated = reqs([Requirement::in_values(LABEL_ARCH, ["amd64"])]);
    assert!(
        deprecated
            .matches_labels([("beta.kubernetes.io/arch", "amd64")])
            .is_ok()
    );
}

#[test]
fn labels_come_from_unrestricted_keys_only() {
    let requirements = reqs([
        Requirement::in_values("example.com/team", ["blue"]),
        Requirement::in_values("example.com/tier", ["silver", "gold"]),
        Requirement::exists("example.com/any"),
        Requirement::not_in("example.com/not", ["0", "1"]),
        Requirement::greater_than("example.com/count", 5),
        Requirement::does_not_exist("example.com/absent"),
        Requirement::in_values("node.kubernetes.io/pool", ["p"]),
        Requirement::in_values(LABEL_TOPOLOGY_ZONE, ["zone-a"]),
        Requirement::in_values(LABEL_HOSTNAME, ["node-1"]),
        Requirement::in_values("karpenter.sh/custom", ["x"]),
        Requirement::in_values("kubernetes.io/custom", ["x"]),
        Requirement::in_values("karpenter.k8s.aws/instance-family", ["m5"]),
    ]);
    let core = requirements.labels(&LabelPolicy::core());
    let expected: BTreeMap<String, String> = [
        ("example.com/any", "0"),
        ("example.com/count", "6"),
        ("example.com/not", "2"),
        ("example.com/team", "blue"),
        ("example.com/tier", "gold"),
        ("karpenter.k8s.aws/instance-family", "m5"),
        ("kubernetes.io/custom", "x"),
        ("node.kubernetes.io/pool", "p"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(
        core, expected,
        "kubernetes.io is no longer restricted (upstream #2586)"
    );
    let aws =
        LabelPolicy::with_provider(["karpenter.k8s.aws"], ["karpenter.k8s.aws/instance-family"]);
    assert!(
        !requirements
            .labels(&aws)
            .contains_key("karpenter.k8s.aws/instance-family")
    );
}

fn instance_type(family: &str, name: &str) -> Requirements {
    Requirements::from_labels([
        ("karpenter.k8s.aws/instance-family", family),
        (LABEL_INSTANCE_TYPE, name),
    ])
}

#[test]
fn min_values_counts_distinct_values_across_leading_options() {
    // Upstream's documented example.
    let requirements = Requirements::from_node_selector_requirements(&[
        NodeSelectorRequirement {
            key: LABEL_INSTANCE_TYPE.into(),
            operator: Operator::In,
            values: [
                "c4.large",
                "c4.xlarge",
                "c5.large",
                "c5.xlarge",
                "m4.large",
                "m4.xlarge",
            ]
            .map(String::from)
            .to_vec(),
            min_values: Some(3),
        },
        NodeSelectorRequirement {
            key: "karpenter.k8s.aws/instance-family".into(),
            operator: Operator::In,
            values: ["c4", "c5", "m4"].map(String::from).to_vec(),
            min_values: Some(3),
        },
    ])
    .unwrap();
    let passing = [
        instance_type("c4", "c4.large"),
        instance_type("c5", "c5.xlarge"),
        instance_type("m4", "m4.2xlarge"),
    ];
    assert_eq!(requirements.satisfies_min_values(&passing), Ok(3));
    let more = [
        passing[0].clone(),
        passing[1].clone(),
        passing[2].clone(),
        instance_type("m4", "m4.large"),
    ];
    assert_eq!(requirements.satisfies_min_values(&more), Ok(3));

    let failing = [
        instance_type("c4", "c4.large"),
        instance_type("c4", "c4.xlarge"),
        instance_type("c5", "c5.2xlarge"),
    ];
    let err = requirements.satisfies_min_values(&failing).unwrap_err();
    assert_eq!(
        err.unmet,
        [UnmetMinValues {
            key: "karpenter.k8s.aws/instance-family".into(),
            distinct_values: 2,
            min_values: 3
        }]
    );
    assert_eq!(
        err.to_string(),
        "minValues requirement is not met for label(s) karpenter.k8s.aws/instance-family (2 of 3 values)"
    );

    // Options without the key, or only excluding values, add nothing for it.
    let vague = [
        reqs([Requirement::not_in(
            "karpenter.k8s.aws/instance-family",
            ["x", "y", "z"],
        )]),
        Requirements::new(),
    ];
    assert_eq!(
        requirements
            .satisfies_min_values(&vague)
            .unwrap_err()
            .unmet
            .len(),
        2
    );
    assert_eq!(
        requirements
            .satisfies_min_values(&[])
            .unwrap_err()
            .unmet
            .len(),
        2
    );
    assert_eq!(Requirements::new().satisfies_min_values(&failing), Ok(0));
}

// ---- Property tests ----

/// Values the strategies draw from: non-integers, integers in and around the bounds, and
/// alternative spellings of integers.
static PROBES: [&str; 14] = [
    "a", "b", "c", "0", "1", "2", "5", "9", "10", "11", "-1", "+5", "05", "x1",
];

fn any_requirement() -> impl Strategy<Value = Requirement> {
    let values = prop::collection::vec(prop::sample::select(PROBES.to_vec()), 0..4);
    let bound = 0_i64..12;
    let min_values = prop::option::of(1_u32..4);
    (
        prop::sample::select(Operator::ALL.to_vec()),
        values,
        bound,
        min_values,
    )
        .prop_map(|(op, values, bound, min_values)| {
            let requirement = match op {
                Operator::In => Requirement::in_values("key", values),
                Operator::NotIn => Requirement::not_in("key", values),
                Operator::Exists => Requirement::exists("key"),
                Operator::DoesNotExist => Requirement::does_not_exist("key"),
                Operator::Gt => Requirement::greater_than("key", bound),
                Operator::Lt => Requirement::less_than("key", bound),
                Operator::Gte => Requirement::at_least("key", bound),
                Operator::Lte => Requirement::at_most("key", bound),
            };
            requirement.with_min_values(min_values)
        })
}

/// Requirements built by intersecting a few, so complements carry bounds and exclusions.
fn any_combined_requirement() -> impl Strategy<Value = Requirement> {
    prop::collection::vec(any_requirement(), 1..4).prop_map(|parts| {
        parts
            .iter()
            .skip(1)
            .fold(parts[0].clone(), |acc, r| acc.intersection(r))
    })
}

fn any_requirements() -> impl Strategy<Value = Requirements> {
    let key = prop::sample::select(vec!["k1", "k2", "k3", LABEL_TOPOLOGY_ZONE]);
    prop::collection::vec((key, any_combined_requirement()), 0..5).prop_map(|parts| {
        parts
            .into_iter()
            .map(|(key, r)| {
                let mut rekeyed = r;
                rekeyed.key = Arc::from(key);
                rekeyed
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(0x6b61_7270),
        ..ProptestConfig::default()
    })]

    #[test]
    fn intersection_is_commutative(a in any_combined_requirement(), b in any_combined_requirement()) {
        prop_assert_eq!(a.intersection(&b), b.intersection(&a));
    }

    #[test]
    fn intersection_is_associative(a in any_combined_requirement(), b in any_combined_requirement(), c in any_combined_requirement()) {
        prop_assert_eq!(a.intersection(&b).intersection(&c), a.intersection(&b.intersection(&c)));
    }

    #[test]
    fn intersection_is_idempotent(a in any_combined_requirement()) {
        prop_assert_eq!(a.intersection(&a), a);
    }

    #[test]
    fn a_value_satisfies_the_intersection_iff_it_satisfies_both(a in any_combined_requirement(), b in any_combined_requirement()) {
        let both = a.intersection(&b);
        for value in PROBES {
            prop_assert_eq!(both.has(value), a.has(value) && b.has(value), "value {}", value);
        }
    }

    #[test]
    fn exists_is_the_identity_and_does_not_exist_absorbs(a in any_combined_requirement()) {
        prop_assert_eq!(Requirement::exists("key").intersection(&a), a.clone());
        prop_assert_eq!(a.intersection(&Requirement::exists("key")), a.clone());
        let none = Requirement::does_not_exist("key").intersection(&a);
        prop_assert!(none.is_empty());
        prop_assert_eq!(none.operator(), Operator::DoesNotExist);
        prop_assert!(!Requirement::does_not_exist("key").intersects(&a));
    }

    #[test]
    fn intersects_agrees_with_a_non_empty_intersection(a in any_combined_requirement(), b in any_combined_requirement()) {
        prop_assert_eq!(a.intersects(&b), !a.intersection(&b).is_empty());
        prop_assert_eq!(a.intersects(&b), b.intersects(&a));
    }

    #[test]
    fn finite_sets_intersect_iff_they_share_a_value(
        values in prop::collection::vec(prop::sample::select(PROBES.to_vec()), 0..4),
        narrowing in any_combined_requirement(),
        b in any_combined_requirement(),
    ) {
        // An `In` narrowed by anything stays finite, with values drawn from PROBES.
        let a = Requirement::in_values("key", values).intersection(&narrowing);
        let shared = PROBES.iter().any(|v| a.has(v) && b.has(v));
        prop_assert_eq!(a.intersects(&b), shared);
    }

    #[test]
    fn bounds_compare_integers(bound in -20_i64..20, n in -25_i64..25) {
        let text = n.to_string();
        prop_assert_eq!(Requirement::greater_than("key", bound).has(&text), n > bound);
        prop_assert_eq!(Requirement::less_than("key", bound).has(&text), n < bound);
        prop_assert_eq!(Requirement::at_least("key", bound).has(&text), n >= bound);
        prop_assert_eq!(Requirement::at_most("key", bound).has(&text), n <= bound);
        let range = Requirement::at_least("key", bound).intersection(&Requirement::at_most("key", bound + 3));
        prop_assert_eq!(range.has(&text), (bound..=bound + 3).contains(&n));
        prop_assert_eq!(range.intersects(&Requirement::in_values("key", [&text])), (bound..=bound + 3).contains(&n));
    }

    #[test]
    fn any_value_satisfies_the_requirement(a in any_combined_requirement()) {
        match a.any_value() {
            Some(value) => prop_assert!(a.has(&value), "{} from {}", value, a),
            None => prop_assert!(a.is_empty() || (a.lower_bound().is_some() && a.upper_bound().is_some())),
        }
    }

    #[test]
    fn node_selector_form_round_trips(r in any_requirements()) {
        // The API refuses an `In` with fewer values than its minValues; drop those.
        let r: Requirements = r
            .iter()
            .map(|req| {
                let valid = req.operator() != Operator::In
                    || req.min_values().is_none_or(|min| req.values().len() >= min as usize);
                req.clone().with_min_values(req.min_values().filter(|_| valid))
            })
            .collect();
        let written = r.to_node_selector_requirements();
        prop_assert_eq!(Requirements::from_node_selector_requirements(&written), Ok(r));
    }

    #[test]
    fn adding_in_any_order_gives_the_same_requirements(parts in prop::collection::vec(any_combined_requirement(), 0..5), rotate in 0_usize..5) {
        let forward: Requirements = parts.iter().cloned().collect();
        let mut rotated = parts.clone();
        if !rotated.is_empty() {
            let by = rotate % rotated.len();
            rotated.rotate_left(by);
        }
        let rotated: Requirements = rotated.into_iter().rev().collect();
        prop_assert_eq!(forward, rotated);
    }

    #[test]
    fn yes_no_answers_agree_with_the_results(a in any_requirements(), b in any_requirements()) {
        let policy = LabelPolicy::core();
        for allow in [AllowUndefined::NoKeys, AllowUndefined::WellKnownLabels(&policy)] {
            prop_assert_eq!(a.is_compatible(&b, allow), a.compatible(&b, allow).is_ok());
        }
        prop_assert_eq!(a.is_intersecting(&b), a.intersects(&b).is_ok());
        prop_assert_eq!(a.is_intersecting(&b), b.is_intersecting(&a));
    }

    #[test]
    fn labels_satisfy_the_requirements_they_come_from(r in any_requirements()) {
        let policy = LabelPolicy::core();
        let labels = r.labels(&policy);
        for (key, value) in &labels {
            prop_assert!(r.get(key).is_some_and(|req| req.has(value)), "{}={} from {}", key, value, r);
        }
    }
}
