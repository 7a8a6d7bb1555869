use super::*;
use serde_json::json;

fn weakened(change: impl FnOnce(&mut serde_json::Value)) -> Result<(), String> {
    let (policy, binding) = installed();
    let mut policy = serde_json::to_value(policy).unwrap();
    let mut binding = serde_json::to_value(binding).unwrap();
    let mut both = json!({"policy": policy.take(), "binding": binding.take()});
    change(&mut both);
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(both["policy"].take()).unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(both["binding"].take()).unwrap();
    judge(Some(&policy), Some(&binding))
}

#[test]
fn the_installed_fence_is_in_place() {
    let (policy, binding) = installed();
    assert_eq!(judge(Some(&policy), Some(&binding)), Ok(()));
    // As the API server returns it, with its defaults filled in.
    assert_eq!(
        weakened(|f| {
            f["policy"]["spec"]["matchConstraints"]["matchPolicy"] = json!("Equivalent");
            f["policy"]["spec"]["matchConstraints"]["namespaceSelector"] = json!({});
            f["policy"]["spec"]["matchConstraints"]["objectSelector"] = json!({});
            for rule in f["policy"]["spec"]["matchConstraints"]["resourceRules"].as_array_mut().unwrap() {
                rule["scope"] = json!("*");
            }
            f["binding"]["spec"]["matchResources"] = json!({"namespaceSelector": {}, "objectSelector": {},
                "matchPolicy": "Equivalent"});
        }),
        Ok(())
    );
}

#[test]
fn a_missing_or_weakened_fence_is_named_in_one_line() {
    let (policy, binding) = installed();
    assert_eq!(judge(None, Some(&binding)), Err("ValidatingAdmissionPolicy neuron-dra-plugin is missing".into()));
    assert_eq!(judge(Some(&policy), None), Err("ValidatingAdmissionPolicyBinding neuron-dra-plugin is missing".into()));
    let cases: Vec<(&str, Box<dyn FnOnce(&mut serde_json::Value)>)> = vec![
        ("does not deny (validationActions: [Audit])", Box::new(|f| f["binding"]["spec"]["validationActions"] = json!(["Audit"]))),
        ("(validations differ)", Box::new(|f| {
            f["policy"]["spec"]["validations"].as_array_mut().unwrap().pop();
        })),
        ("(failurePolicy differ)", Box::new(|f| f["policy"]["spec"]["failurePolicy"] = json!("Ignore"))),
        ("(matchConstraints differ)", Box::new(|f| {
            f["policy"]["spec"]["matchConstraints"]["resourceRules"].as_array_mut().unwrap().remove(0);
        })),
        ("(matchConstraints differ)", Box::new(|f| {
            f["policy"]["spec"]["matchConstraints"]["namespaceSelector"] = json!({"matchLabels": {"fenced": "yes"}});
        })),
        ("(matchConditions differ)", Box::new(|f| {
            f["policy"]["spec"]["matchConditions"] = json!([{"name": "never", "expression": "false"}]);
        })),
        ("binds other instead of neuron-dra-plugin", Box::new(|f| f["binding"]["spec"]["policyName"] = json!("other"))),
        ("narrows what the fence matches", Box::new(|f| {
            f["binding"]["spec"]["matchResources"] = json!({"objectSelector": {"matchLabels": {"a": "b"}}});
        })),
        ("parameterNotFoundAction", Box::new(|f| {
            f["binding"]["spec"]["paramRef"]["parameterNotFoundAction"] = json!("Allow");
        })),
        ("paramRef", Box::new(|f| f["binding"]["spec"]["paramRef"]["name"] = json!("wide-open"))),
    ];
    for (expected, change) in cases {
        let problem = weakened(change).expect_err(expected);
        assert!(problem.contains(expected) && !problem.contains('\n'), "{problem} should say {expected}");
    }
}
