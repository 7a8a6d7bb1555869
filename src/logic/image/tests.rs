use super::*;

#[test]
fn a_tag_a_digest_or_the_whole_reference() {
    assert_eq!(label("r/neuron-dra-driver:1.2.0"), "1.2.0");
    assert_eq!(label("r/x@sha256:0123456789abcdef0123"), "sha256:0123456789ab");
    assert_eq!(label("localhost:5000/x"), "localhost:5000/x");
    assert_eq!(semver("public.ecr.aws/neuron/neuron-dra-driver:1.1.0").as_deref(), Some("1.1.0"));
    assert_eq!(semver("r/neuron-dra-driver:v1.1.0").as_deref(), Some("1.1.0"));
    assert_eq!(semver("registry:5000/neuron-dra-driver").as_deref(), None);
    assert_eq!(semver("x/neuron-dra-driver:latest"), None);
    assert_eq!(semver("r/x:1.2.0@sha256:0123").as_deref(), Some("1.2.0"), "the tag beside a digest");
    assert_eq!(semver("r/x@sha256:0123"), None);
}
