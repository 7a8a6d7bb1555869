//! Room for a template with fallbacks. On the node it picks, the scheduler tries a claim's choices in order and
//! allocates the first that fits, so claims placed one after another on a node take the preferred choice as often
//! as it fits, then the next choice on what remains, and so on (a choice that stopped fitting never fits again, as
//! free devices only shrink). Counting that greedy placement on every node gives the claims the scheduler can place,
//! whichever node it tries first.

use super::slots::{NodeDevices, Selector, Slot, group_size};
use crate::logic::validate::{Choice, ClaimKind, Count};

/// Claims of a template with `choices` (and their `selectors`) that fit on `node`. `taken` is scratch space, reused
/// across nodes.
pub(super) fn available_on(
    choices: &[Choice],
    selectors: &[Selector],
    node: &NodeDevices,
    taken: &mut Vec<bool>,
) -> i64 {
    taken.clear();
    taken.resize(node.neuron.len(), false);
    choices.iter().zip(selectors).map(|(choice, selector)| place(choice, selector, node, taken)).sum()
}

/// Places as many claims of one choice as fit on the node's free slots not `taken` yet, marks the slots they take,
/// and returns how many. Validation keeps EFA out of choices with fallbacks, so only Neuron slots are taken.
fn place(choice: &Choice, selector: &Selector, node: &NodeDevices, taken: &mut [bool]) -> i64 {
    let count = match choice.kind {
        ClaimKind::Devices { count, .. } => count,
        ClaimKind::UltraServerNode { .. } => Count::Exactly(1),
    };
    let wanted = |slot: &Slot| selector.matches(slot);
    let open = |i: usize, slot: &Slot, taken: &[bool]| slot.free && !taken[i] && wanted(slot);
    match count {
        Count::All => {
            let mut matching = node.neuron.iter().enumerate().filter(|(_, s)| wanted(s)).peekable();
            let whole = matching.peek().is_some() && matching.all(|(i, s)| open(i, s, taken));
            if whole {
                node.neuron.iter().enumerate().filter(|(_, s)| wanted(s)).for_each(|(i, _)| taken[i] = true);
            }
            i64::from(whole)
        }
        Count::Exactly(1) => {
            let mut placed = 0;
            for (i, slot) in node.neuron.iter().enumerate() {
                if open(i, slot, taken) {
                    taken[i] = true;
                    placed += 1;
                }
            }
            placed
        }
        Count::Exactly(n) => {
            let Some(size) = group_size(choice) else { return 0 };
            let per_claim = n as usize;
            // Open devices per group, then the claims each group holds take that many of them, in slot order.
            let mut open_in_group = vec![0usize; node.group_ids[size].len()];
            for (i, slot) in node.neuron.iter().enumerate() {
                if let Some(group) = slot.groups[size].filter(|_| open(i, slot, taken)) {
                    open_in_group[usize::from(group)] += 1;
                }
            }
            let mut to_take: Vec<usize> = open_in_group.iter().map(|open| open / per_claim * per_claim).collect();
            for (i, slot) in node.neuron.iter().enumerate() {
                if let Some(group) = slot.groups[size].filter(|_| open(i, slot, taken))
                    && to_take[usize::from(group)] > 0
                {
                    to_take[usize::from(group)] -= 1;
                    taken[i] = true;
                }
            }
            open_in_group.iter().map(|open| (open / per_claim) as i64).sum()
        }
    }
}
