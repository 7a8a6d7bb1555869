use super::*;
use crate::logic::validate::{ClaimKind, Count};

fn choice(instance_type: Option<&str>, devices: u32) -> Choice {
    Choice {
        instance_type: instance_type.map(str::to_string),
        neuron_driver_version: None,
        logical_neuron_core: None,
        kind: ClaimKind::Devices { count: Count::Exactly(devices), efa: None },
    }
}

#[test]
fn versions_up_to_1_35_search_orderings_and_1_36_on_combinations() {
    for (version, allocator) in [
        ("v1.34.4", Allocator::Orderings),
        ("1.35", Allocator::Orderings),
        ("35+", Allocator::Orderings),
        ("v1.36.0", Allocator::Combinations),
        ("1.37.2", Allocator::Combinations),
        ("37", Allocator::Combinations),
    ] {
        assert_eq!(Allocator::of_version(version), Some(allocator), "{version}");
    }
    for nonsense in ["", "v2.1", "one.thirty", "1."] {
        assert_eq!(Allocator::of_version(nonsense), None, "{nonsense:?}");
    }
}

#[test]
fn every_device_of_a_named_type_is_all_where_orderings_are_searched() {
    let whole = whole_node(&choice(Some("trn2.48xlarge"), 16), 16, 0, Allocator::Orderings);
    assert_eq!(whole, Some(WholeNode { selector: None }), "the type's selector is the choice's own");
    // Fewer than the type's devices, a fallback, a server that searches combinations: an exact count.
    assert_eq!(whole_node(&choice(Some("trn2.48xlarge"), 8), 8, 0, Allocator::Orderings), None);
    assert_eq!(whole_node(&choice(Some("trn2.48xlarge"), 16), 16, 1, Allocator::Orderings), None);
    assert_eq!(whole_node(&choice(Some("trn2.48xlarge"), 16), 16, 0, Allocator::Combinations), None);
    // A type whose device count the catalog does not know is never assumed whole.
    assert_eq!(whole_node(&choice(Some("trn3e.24xlarge"), 16), 16, 0, Allocator::Orderings), None);
    assert_eq!(whole_node(&choice(Some("trn9.unknown"), 16), 16, 0, Allocator::Orderings), None);
}

#[test]
fn without_a_type_the_request_is_kept_to_the_types_it_is_every_device_of() {
    let whole = whole_node(&choice(None, 16), 16, 0, Allocator::Orderings).unwrap();
    let selector = whole.selector.unwrap();
    assert!(selector.starts_with("device.attributes['neuron.aws.com'].instanceType in ['trn1.32xlarge', "));
    for sixteen in ["trn1n.32xlarge", "trn2.48xlarge", "trn2u.48xlarge", "trn3.48xlarge"] {
        assert!(selector.contains(&format!("'{sixteen}'")), "{selector}");
    }
    assert!(!selector.contains("trn2.3xlarge") && !selector.contains("trn3e"), "{selector}");
    assert_eq!(whole_node(&choice(None, 4), 4, 0, Allocator::Orderings), None, "no type has 4 devices");
}
