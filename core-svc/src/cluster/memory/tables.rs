//! The in-memory API server's storage: one table per kind, and what is derived from them
//! between writes (PodDisruptionBudgets with the status the disruption controller would write,
//! and which budgets select which pods).

use super::*;

/// Objects of one kind by (namespace, name); the empty namespace for cluster-scoped kinds.
/// Each object behind an `Arc`: a snapshot shares them instead of copying every object, and a
/// write replaces the one it changes.
pub(super) type Table<T> = BTreeMap<(String, String), Arc<T>>;

pub(super) struct Tables {
    /// One `Table<K>` per [`ClusterObject`] kind, keyed by the kind's `TypeId`.
    pub(super) typed: HashMap<TypeId, Box<dyn Any + Send>>,
    /// Node classes by (API group, kind).
    pub(super) node_classes: BTreeMap<(String, String), Table<DynamicObject>>,
    /// Moves whenever the Pod or PodDisruptionBudget table is handed out for writing: the
    /// budgets' derived statuses read nothing else.
    pub(super) budget_inputs: u64,
    /// Moves whenever the PodDisruptionBudget table is handed out for writing.
    pub(super) budget_table_version: u64,
    /// The budgets with their derived statuses and allowances, as of `budget_inputs` = `.0`.
    /// Every snapshot and every eviction needs them, so they are derived again only after a pod
    /// or budget may have changed.
    pub(super) derived_budgets: Option<(u64, Arc<[DerivedBudget]>)>,
    /// Which budgets select which pods, kept from one derivation to the next.
    pub(super) budget_members: BudgetMembers,
    /// Moves whenever the Pod table is handed out for writing.
    pub(super) pod_table_version: u64,
    /// The slim copy of every stored Pod, as snapshots and the budgets read them.
    pub(super) slim_pods: SlimPods,
}

/// A budget as read, with the allowance its status was derived from.
pub(super) struct DerivedBudget {
    pub(super) budget: Arc<PodDisruptionBudget>,
    pub(super) allowance: pdb::PdbAllowance,
}

/// Which budgets select each pod, kept between derivations. Matching every pod against every
/// budget's selector after each pod write was most of the in-memory API server's time in a
/// fleet roll (1,800 pods, 18 budgets, a write every few milliseconds). A write replaces the
/// pod's `Arc`, so a pod whose `Arc` is the one matched last time is selected by the same
/// budgets; a write to any budget starts over.
#[derive(Default)]
pub(super) struct BudgetMembers {
    /// The `budget_table_version` the entries were matched against.
    pub(super) budget_table_version: u64,
    /// By the address of the pod's `Arc`: that `Arc` (held, so that the address cannot be
    /// reused by another pod while the entry lives) and the positions, in the budget table's
    /// order, of the budgets that select the pod.
    pub(super) by_pod: HashMap<usize, (Arc<SlimPod>, Vec<usize>)>,
}

/// The [`SlimPod`] of each stored Pod, in the Pod table's order: what snapshots hold and the
/// budgets are derived from. A write replaces the pod's `Arc`, so only the pods written since
/// the last [`Tables::sync_slim_pods`] are made slim again; a pod whose `Arc` is unchanged
/// keeps its slim copy, and with it its `Arc`, which [`BudgetMembers`] is keyed by.
#[derive(Default)]
pub(super) struct SlimPods {
    /// The `pod_table_version` `pods` was made at; `None` before the first.
    version: Option<u64>,
    /// The slim pods, in the Pod table's order.
    pub(super) pods: Vec<Arc<SlimPod>>,
    /// By the address of the stored Pod's `Arc`: that `Arc` (held, so that the address cannot
    /// be reused by another pod while the entry lives) and its slim copy.
    by_pod: HashMap<usize, (Arc<Pod>, Arc<SlimPod>)>,
}

impl SlimPods {
    /// The slim copy of the stored `pod`, as of the last sync.
    pub(super) fn of(&self, pod: &Arc<Pod>) -> Option<&Arc<SlimPod>> {
        match self.by_pod.get(&(Arc::as_ptr(pod) as usize)) {
            Some((known, slim)) if Arc::ptr_eq(known, pod) => Some(slim),
            _ => None,
        }
    }
}

impl BudgetMembers {
    /// For each of `budgets` (the budget table, in order), the pods it selects, matching only
    /// the pods written since the last call; what the pods of the last call that are gone
    /// held is dropped.
    pub(super) fn select<'p>(
        &mut self,
        budgets: &[Arc<PodDisruptionBudget>],
        budget_table_version: u64,
        pods: impl Iterator<Item = &'p Arc<SlimPod>>,
    ) -> Vec<Vec<&'p SlimPod>> {
        if self.budget_table_version != budget_table_version {
            self.by_pod.clear();
            self.budget_table_version = budget_table_version;
        }
        let selectors: Vec<_> = budgets.iter().map(|budget| pdb::selector(budget)).collect();
        let mut selected = vec![Vec::new(); budgets.len()];
        let mut next = HashMap::with_capacity(self.by_pod.len());
        for pod in pods {
            let address = Arc::as_ptr(pod) as usize;
            let positions = match self.by_pod.remove(&address) {
                Some((known, positions)) if Arc::ptr_eq(&known, pod) => positions,
                _ => budgets
                    .iter()
                    .zip(&selectors)
                    .enumerate()
                    .filter(|(_, (budget, selector))| pdb::selects(budget, selector.as_ref(), pod))
                    .map(|(position, _)| position)
                    .collect(),
            };
            for &position in &positions {
                if let Some(pods) = selected.get_mut(position) {
                    pods.push(pod.as_ref());
                }
            }
            next.insert(address, (Arc::clone(pod), positions));
        }
        self.by_pod = next;
        selected
    }

    /// The positions of the budgets that selected `pod` at the last [`Self::select`].
    pub(super) fn of(&self, pod: &Arc<SlimPod>) -> &[usize] {
        match self.by_pod.get(&(Arc::as_ptr(pod) as usize)) {
            Some((known, positions)) if Arc::ptr_eq(known, pod) => positions,
            _ => &[],
        }
    }
}

impl Tables {
    pub(super) fn table<K: ClusterObject>(&self) -> Option<&Table<K>> {
        self.typed
            .get(&TypeId::of::<K>())
            .and_then(|table| table.downcast_ref())
    }

    pub(super) fn table_mut<K: ClusterObject>(&mut self) -> &mut Table<K> {
        let kind = TypeId::of::<K>();
        if kind == TypeId::of::<Pod>() || kind == TypeId::of::<PodDisruptionBudget>() {
            self.budget_inputs += 1;
        }
        if kind == TypeId::of::<Pod>() {
            self.pod_table_version += 1;
        }
        if kind == TypeId::of::<PodDisruptionBudget>() {
            self.budget_table_version += 1;
        }
        let slot = self
            .typed
            .entry(TypeId::of::<K>())
            .or_insert_with(|| Box::new(Table::<K>::new()));
        match slot.downcast_mut() {
            Some(table) => table,
            // Each slot is created above, under its own type's TypeId.
            None => unreachable!("the table of {} has another type", K::KIND),
        }
    }

    pub(super) fn list<K: ClusterObject>(&self) -> Vec<Arc<K>> {
        self.table::<K>()
            .map(|table| table.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Brings [`Tables::slim_pods`] up to the Pod table, making slim only the pods written
    /// since the last call.
    pub(super) fn sync_slim_pods(&mut self) {
        if self.slim_pods.version == Some(self.pod_table_version) {
            return;
        }
        let stored = self
            .typed
            .get(&TypeId::of::<Pod>())
            .and_then(|table| table.downcast_ref::<Table<Pod>>());
        let slim_pods = &mut self.slim_pods;
        let mut by_pod = HashMap::with_capacity(slim_pods.by_pod.len());
        let mut pods = Vec::with_capacity(slim_pods.pods.len());
        for pod in stored.into_iter().flat_map(BTreeMap::values) {
            let address = Arc::as_ptr(pod) as usize;
            let slim = match slim_pods.by_pod.remove(&address) {
                Some((known, slim)) if Arc::ptr_eq(&known, pod) => slim,
                _ => Arc::new(SlimPod::from(pod.as_ref())),
            };
            pods.push(Arc::clone(&slim));
            by_pod.insert(address, (Arc::clone(pod), slim));
        }
        *slim_pods = SlimPods {
            version: Some(self.pod_table_version),
            pods,
            by_pod,
        };
    }

    /// The budgets, each with the status derived from the pods as they are now.
    pub(super) fn budgets_with_status(&mut self) -> Vec<Arc<PodDisruptionBudget>> {
        self.derived_budgets()
            .iter()
            .map(|derived| Arc::clone(&derived.budget))
            .collect()
    }

    /// The budgets with their allowances from the pods as they are now, in table order.
    pub(super) fn derived_budgets(&mut self) -> Arc<[DerivedBudget]> {
        if let Some((inputs, derived)) = &self.derived_budgets
            && *inputs == self.budget_inputs
        {
            return Arc::clone(derived);
        }
        let budgets = self.list::<PodDisruptionBudget>();
        self.sync_slim_pods();
        let Self {
            slim_pods,
            budget_members,
            budget_table_version,
            ..
        } = self;
        let selected =
            budget_members.select(&budgets, *budget_table_version, slim_pods.pods.iter());
        let derived: Arc<[DerivedBudget]> = budgets
            .iter()
            .zip(&selected)
            .map(|(budget, pods)| {
                let allowance = pdb::allowance_of_selected(budget, pods);
                let mut budget = PodDisruptionBudget::clone(budget);
                budget.status = Some(status_of(&budget, &allowance));
                DerivedBudget {
                    budget: Arc::new(budget),
                    allowance,
                }
            })
            .collect();
        self.derived_budgets = Some((self.budget_inputs, Arc::clone(&derived)));
        derived
    }

    pub(super) fn len<K: ClusterObject>(&self) -> usize {
        self.table::<K>().map_or(0, BTreeMap::len)
    }

    pub(super) fn count(&self) -> usize {
        self.len::<NodePool>()
            + self.len::<NodeClaim>()
            + self.len::<Node>()
            + self.len::<Pod>()
            + self.len::<PodDisruptionBudget>()
            + self.len::<DaemonSet>()
            + self.len::<PriorityClass>()
            + self.node_classes.values().map(BTreeMap::len).sum::<usize>()
    }

    /// The slim pods of `namespace`, in name order, brought up to the Pod table first.
    pub(super) fn slim_pods_in(&mut self, namespace: &str) -> &[Arc<SlimPod>] {
        self.sync_slim_pods();
        let pods = self.slim_pods.pods.as_slice();
        // In the Pod table's (namespace, name) order.
        let start = pods.partition_point(|pod| sort_key(pod.as_ref()).0 < namespace);
        let len = pods[start..].partition_point(|pod| sort_key(pod.as_ref()).0 == namespace);
        &pods[start..start + len]
    }
}

/// The status the disruption controller writes for `pdb`. It reads the scale of the pods'
/// controllers; with no workload controllers here, their live pods stand in for it, which is
/// what [`pdb::allowance`] counts.
pub(super) fn budget_status(
    pdb: &PodDisruptionBudget,
    tables: &mut Tables,
) -> PodDisruptionBudgetStatus {
    status_of(pdb, &budget_allowance(pdb, tables))
}

/// The status that says `allowance` of `pdb`.
pub(super) fn status_of(
    pdb: &PodDisruptionBudget,
    allowance: &pdb::PdbAllowance,
) -> PodDisruptionBudgetStatus {
    PodDisruptionBudgetStatus {
        current_healthy: allowance.current_healthy,
        desired_healthy: allowance.desired_healthy,
        disruptions_allowed: allowance.disruptions_allowed,
        expected_pods: allowance.expected_pods,
        observed_generation: pdb.metadata.generation,
        ..Default::default()
    }
}

/// The budget's allowance from the pods of its namespace. Any stored status is ignored: here the
/// arithmetic is the disruption controller.
pub(super) fn budget_allowance(
    pdb: &PodDisruptionBudget,
    tables: &mut Tables,
) -> pdb::PdbAllowance {
    let namespace = pdb.metadata.namespace.as_deref().unwrap_or_default();
    let pods = tables.slim_pods_in(namespace).iter().map(AsRef::as_ref);
    pdb::allowance(pdb, pdb::selector(pdb).as_ref(), pods)
}

/// The object as read: a PodDisruptionBudget carries the status the disruption controller
/// would have written by now.
pub(super) fn with_derived_status<K: ClusterObject>(mut object: K, tables: &mut Tables) -> K {
    if let Some(pdb) = (&mut object as &mut dyn Any).downcast_mut::<PodDisruptionBudget>() {
        let status = budget_status(pdb, tables);
        pdb.status = Some(status);
    }
    object
}
