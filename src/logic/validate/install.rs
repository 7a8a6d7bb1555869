//! What the install allows every config: the namespaces the kubelet plugin may run in and the repositories its
//! image may come from. They are the parameters of the fences installed with the operator
//! (`config/rbac/fence_params.yaml`), which refuse anything else from the operator's token; the operator takes the
//! same lists (its Deployment reads them from that ConfigMap) to refuse such a config up front, naming the field,
//! instead of writing half of it and failing at the DaemonSet.

use super::{FieldError, InvalidConfig, ValidatedConfig};
use crate::api::{DEFAULT_DRIVER_IMAGE, DEFAULT_DRIVER_NAMESPACE};

/// The install's allow-lists. An entry ending in `*` matches every name that starts with what comes before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    pub driver_namespaces: Vec<String>,
    pub image_repositories: Vec<String>,
}

impl Default for Install {
    /// What the shipped parameters allow: AWS's driver namespace and image repository.
    fn default() -> Self {
        let repository = DEFAULT_DRIVER_IMAGE.rsplit_once(':').map_or(DEFAULT_DRIVER_IMAGE, |(repo, _)| repo);
        Install {
            driver_namespaces: vec![DEFAULT_DRIVER_NAMESPACE.to_string()],
            image_repositories: vec![repository.to_string()],
        }
    }
}

/// Whether `name` is `pattern`, or starts with it when it ends in `*`.
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// Whether `image` is in `repository`: the repository, then a tag or a digest.
fn in_repository(repository: &str, image: &str) -> bool {
    image.strip_prefix(repository).is_some_and(|rest| rest.is_empty() || rest.starts_with(':') || rest.starts_with('@'))
}

impl Install {
    /// Whether the plugin may run in `namespace`.
    pub fn allows_namespace(&self, namespace: &str) -> bool {
        self.driver_namespaces.iter().any(|pattern| matches(pattern, namespace))
    }

    /// The config's driver fields the install does not allow, each naming its field.
    pub fn admits(&self, config: &ValidatedConfig) -> Result<(), InvalidConfig> {
        let driver = &config.spec.driver;
        let mut errors = Vec::new();
        if !self.allows_namespace(&driver.namespace) {
            errors.push(FieldError::new(
                "spec.driver.namespace",
                format!(
                    "{} is not a driver namespace this install allows ({}); add it to driverNamespaces of the \
                     install's fence parameters",
                    driver.namespace,
                    self.driver_namespaces.join(", ")
                ),
            ));
        }
        if !self.image_repositories.iter().any(|repository| in_repository(repository, &driver.image)) {
            errors.push(FieldError::new(
                "spec.driver.image",
                format!(
                    "{} is not from a repository this install allows ({}); add it to imageRepositories of the \
                     install's fence parameters",
                    driver.image,
                    self.image_repositories.join(", ")
                ),
            ));
        }
        if errors.is_empty() { Ok(()) } else { Err(InvalidConfig(errors)) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixes_match() {
        assert!(matches("neuron-dra-driver", "neuron-dra-driver"));
        assert!(!matches("neuron-dra-driver", "neuron-dra-driver-2"));
        assert!(matches("team-*", "team-a"));
        assert!(!matches("team-*", "kube-system"));
        assert!(in_repository("public.ecr.aws/neuron/neuron-dra-driver", "public.ecr.aws/neuron/neuron-dra-driver:1.1.0"));
        assert!(in_repository("r.example/x", "r.example/x@sha256:00"));
        assert!(!in_repository("public.ecr.aws/neuron/neuron-dra-driver", "public.ecr.aws/neuron/neuron-dra-driver-evil:1"));
    }

    #[test]
    fn a_config_outside_the_install_is_refused_naming_the_field() {
        let yaml = "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: pool}\n\
                    spec: {driver: {namespace: kube-system, image: 'evil.example/plugin:1.0.0'}}";
        let config = super::super::validate(&crate::cli::parse_config(yaml).unwrap()).unwrap();
        let refused = Install::default().admits(&config).unwrap_err().to_string();
        assert!(refused.contains("spec.driver.namespace: kube-system is not a driver namespace"), "{refused}");
        assert!(refused.contains("spec.driver.image: evil.example/plugin:1.0.0 is not from a repository"), "{refused}");
        let default = "apiVersion: neurondra.io/v1alpha1\nkind: NeuronDRAConfig\nmetadata: {name: pool}\nspec: {}";
        let config = super::super::validate(&crate::cli::parse_config(default).unwrap()).unwrap();
        assert_eq!(Install::default().admits(&config), Ok(()));
    }
}
