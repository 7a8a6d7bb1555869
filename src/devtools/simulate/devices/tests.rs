use super::*;

#[test]
fn every_trainium_type_with_the_fleets_devices() {
    let all = by_instance_type(None, "node", 0);
    assert_eq!(all.len(), TRAINIUM_TYPES.len());
    assert_eq!(all["trn2.48xlarge"].iter().filter(|d| d.name.starts_with("neuron-device-")).count(), 16);
    assert_eq!(by_instance_type(Some("trn1.2xlarge"), "node", 0)["trn1.2xlarge"].len(), 1);
}
