//! Preference relaxation: how far a pod's soft constraints have been given up, one step at a
//! time in upstream's order (`preferences.go`):
//!
//! 1. the first of several required node affinity terms (they are alternatives);
//! 2. the heaviest preferred pod affinity term;
//! 3. the heaviest preferred pod anti-affinity term;
//! 4. the heaviest preferred node affinity term;
//! 5. a `ScheduleAnyway` topology spread constraint (in declaration order; upstream's
//!    swap-remove makes its order differ after the first);
//! 6. tolerating `PreferNoSchedule` taints, when some NodePool or node has one.
//!
//! Until relaxed, preferred terms are held like required ones, as upstream does.

/// How many of each relaxable constraint a pod has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(super) struct Relaxable {
    pub(super) required_node_terms: usize,
    pub(super) preferred_affinity: usize,
    pub(super) preferred_anti_affinity: usize,
    pub(super) preferred_node_affinity: usize,
    pub(super) schedule_anyway: usize,
    /// Whether tolerating `PreferNoSchedule` taints could help (some exist).
    pub(super) prefer_no_schedule_taints: bool,
}

/// How much of a pod's soft constraints has been given up: counts of leading terms dropped
/// (heaviest first for the preferred ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(super) struct Relaxation {
    pub(super) required_node_terms: usize,
    pub(super) preferred_affinity: usize,
    pub(super) preferred_anti_affinity: usize,
    pub(super) preferred_node_affinity: usize,
    pub(super) schedule_anyway: usize,
    pub(super) tolerate_prefer_no_schedule: bool,
}

impl Relaxation {
    /// Every preference given up at once (`--preference-policy=Ignore`); required node
    /// affinity terms and taints are still tried in order.
    pub(super) fn ignoring_preferences(of: &Relaxable) -> Self {
        Relaxation {
            required_node_terms: 0,
            preferred_affinity: of.preferred_affinity,
            preferred_anti_affinity: of.preferred_anti_affinity,
            preferred_node_affinity: of.preferred_node_affinity,
            schedule_anyway: of.schedule_anyway,
            tolerate_prefer_no_schedule: false,
        }
    }

    /// One more step, or `None` when nothing is left to relax.
    pub(super) fn next(&self, of: &Relaxable) -> Option<Self> {
        let mut next = *self;
        if self.required_node_terms + 1 < of.required_node_terms {
            next.required_node_terms += 1;
        } else if self.preferred_affinity < of.preferred_affinity {
            next.preferred_affinity += 1;
        } else if self.preferred_anti_affinity < of.preferred_anti_affinity {
            next.preferred_anti_affinity += 1;
        } else if self.preferred_node_affinity < of.preferred_node_affinity {
            next.preferred_node_affinity += 1;
        } else if self.schedule_anyway < of.schedule_anyway {
            next.schedule_anyway += 1;
        } else if !self.tolerate_prefer_no_schedule && of.prefer_no_schedule_taints {
            next.tolerate_prefer_no_schedule = true;
        } else {
            return None;
        }
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_every_kind_of_preference_when_relaxing_then_upstreams_order_is_followed() {
        let of = Relaxable {
            required_node_terms: 2,
            preferred_affinity: 1,
            preferred_anti_affinity: 1,
            preferred_node_affinity: 2,
            schedule_anyway: 1,
            prefer_no_schedule_taints: true,
        };
        let mut steps = Vec::new();
        let mut current = Relaxation::default();
        while let Some(next) = current.next(&of) {
            let step = match () {
                () if next.required_node_terms != current.required_node_terms => "required term",
                () if next.preferred_affinity != current.preferred_affinity => "affinity",
                () if next.preferred_anti_affinity != current.preferred_anti_affinity => {
                    "anti-affinity"
                }
                () if next.preferred_node_affinity != current.preferred_node_affinity => {
                    "node affinity"
                }
                () if next.schedule_anyway != current.schedule_anyway => "schedule anyway",
                () => "prefer no schedule",
            };
            steps.push(step);
            current = next;
        }
        assert_eq!(
            steps,
            [
                "required term",
                "affinity",
                "anti-affinity",
                "node affinity",
                "node affinity",
                "schedule anyway",
                "prefer no schedule"
            ]
        );
    }

    #[test]
    fn given_a_single_required_term_when_relaxing_then_it_is_never_dropped() {
        let of = Relaxable {
            required_node_terms: 1,
            ..Relaxable::default()
        };
        assert_eq!(Relaxation::default().next(&of), None);
    }

    #[test]
    fn given_the_ignore_policy_when_starting_then_all_preferences_are_gone() {
        let of = Relaxable {
            required_node_terms: 2,
            preferred_affinity: 3,
            preferred_anti_affinity: 1,
            preferred_node_affinity: 1,
            schedule_anyway: 2,
            prefer_no_schedule_taints: false,
        };
        let start = Relaxation::ignoring_preferences(&of);
        assert_eq!(start.preferred_affinity, 3);
        assert_eq!(start.schedule_anyway, 2);
        assert_eq!(start.next(&of).map(|r| r.required_node_terms), Some(1));
    }
}
