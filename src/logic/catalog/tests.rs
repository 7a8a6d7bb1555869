use super::*;

#[test]
fn trn1_32xlarge_shares_an_efa_between_two_devices() {
    let t = lookup("trn1.32xlarge").unwrap();
    assert_eq!(t.efa_for(4), 2);
    assert_eq!(t.efa_for(16), 8);
    assert_eq!(t.efa_for(1), 1);
}

#[test]
fn trn2_pairs_one_efa_per_device() {
    assert_eq!(lookup("trn2.48xlarge").unwrap().efa_for(8), 8);
}

#[test]
fn neuron_cores_per_device_follow_the_generation_and_lnc() {
    let cores = |name: &str, lnc| lookup(name).unwrap().cores_per_device(lnc);
    assert_eq!((cores("trn1.32xlarge", None), cores("trn1n.32xlarge", None)), (2, 2));
    assert_eq!(
        (cores("trn2.48xlarge", None), cores("trn2.48xlarge", Some(2)), cores("trn2.48xlarge", Some(1))),
        (4, 4, 8)
    );
    assert_eq!((cores("trn2u.48xlarge", Some(1)), cores("trn3.48xlarge", None)), (8, 4));
}

#[test]
fn a_node_entry_stands_for_every_ultra_server_types_devices() {
    let ultra: Vec<_> = TRAINIUM_TYPES.iter().filter(|t| t.ultra_server).collect();
    assert!(!ultra.is_empty());
    // Every UltraServer type has exactly this many devices, so a node entry's charge is exact, not a bound; a
    // type with fewer or unknown devices would be over- or mis-charged, and is to be looked at here.
    for t in ultra {
        assert_eq!(t.devices.map(i64::from), Some(ULTRA_SERVER_NODE_DEVICES), "{}", t.name);
    }
    assert_eq!(ULTRA_SERVER_NODE_DEVICES, 16);
}

#[test]
fn inferentia_is_recognised_and_not_in_the_catalog() {
    assert!(is_inferentia("inf2.48xlarge"));
    assert!(lookup("inf2.48xlarge").is_none());
    assert!(!is_inferentia("trn2.48xlarge"));
}
