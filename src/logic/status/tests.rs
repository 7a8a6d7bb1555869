use super::*;

fn observation() -> Observation {
    let rollout = Rollout::Applied {
        status: DriverStatus { desired_nodes: 2, ready_nodes: 2, updated_nodes: 2, ..DriverStatus::default() },
        observed: true,
    };
    Observation {
        templates_present: 4,
        templates_wanted: 4,
        template_namespaces: 2,
        ..Observation::bare(Some(3), false, Validity::Valid, rollout)
    }
}

fn condition(status: &NeuronDRAConfigStatus, type_: ConditionType) -> &Condition {
    status.conditions.iter().find(|c| c.type_ == type_.as_str()).unwrap()
}

#[test]
fn all_good_is_ready() {
    let status = compute(None, &observation(), now());
    assert_eq!(status.phase, Some(Phase::Ready));
    for type_ in
        [ConditionType::Ready, ConditionType::ConfigValid, ConditionType::DriverReady, ConditionType::TemplatesReady]
    {
        assert_eq!(condition(&status, type_).status, "True", "{type_}");
    }
    assert_eq!(status.observed_generation, Some(3));
    assert_eq!(status.templates, Some(TemplateSummary { namespaces: 2, count: 4, min_available: None }));
}

#[test]
fn an_unchanged_world_computes_an_identical_status() {
    let first = compute(None, &observation(), Timestamp::from_second(1000).unwrap());
    let second = compute(Some(&first), &observation(), Timestamp::from_second(2000).unwrap());
    assert_eq!(first, second);
}

#[test]
fn transition_time_moves_only_when_the_status_changes() {
    let t1 = Timestamp::from_second(1000).unwrap();
    let t2 = Timestamp::from_second(2000).unwrap();
    let first = compute(None, &observation(), t1);
    let mut rolling = observation();
    rolling.rollout = Rollout::Applied {
        status: DriverStatus { desired_nodes: 2, ready_nodes: 1, updated_nodes: 2, ..DriverStatus::default() },
        observed: true,
    };
    let second = compute(Some(&first), &rolling, t2);
    assert_eq!(condition(&second, ConditionType::DriverReady).last_transition_time, Time(t2));
    assert_eq!(condition(&second, ConditionType::DriverReady).reason, "RollingOut");
    assert_eq!(condition(&second, ConditionType::ConfigValid).last_transition_time, Time(t1));
    assert_eq!(second.phase, Some(Phase::Progressing));
}

#[test]
fn invalid_spec_is_degraded_and_conflict_keeps_templates_judged() {
    let mut invalid = observation();
    invalid.validity = Validity::InvalidSpec("spec.x: bad".into());
    let status = compute(None, &invalid, now());
    assert_eq!(status.phase, Some(Phase::Degraded));
    assert_eq!(condition(&status, ConditionType::ConfigValid).reason, "InvalidSpec");
    assert_eq!(condition(&status, ConditionType::Ready).status, "False");

    let mut conflict = observation();
    conflict.validity = Validity::Conflict("nodes n1 ...".into());
    let status = compute(None, &conflict, now());
    assert_eq!(condition(&status, ConditionType::ConfigValid).reason, "Conflict");
    assert_eq!(condition(&status, ConditionType::TemplatesReady).status, "True");
}

#[test]
fn paused_shows_paused() {
    let mut paused = observation();
    paused.paused = true;
    assert_eq!(compute(None, &paused, now()).phase, Some(Phase::Paused));
}

#[test]
fn missing_templates_are_named() {
    let mut missing = observation();
    missing.templates_present = 3;
    missing.templates_missing = vec!["team-a/pretrain".into()];
    let status = compute(None, &missing, now());
    assert_eq!(condition(&status, ConditionType::TemplatesReady).status, "False");
    assert!(condition(&status, ConditionType::TemplatesReady).message.contains("team-a/pretrain"));
    assert_eq!(status.phase, Some(Phase::Progressing));
}

#[test]
fn names_are_the_api_strings_and_the_troubleshooting_doc_explains_each() {
    let reasons: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        reasons,
        [
            "Valid",
            "InvalidSpec",
            "Conflict",
            "Unparseable",
            "Unsupported",
            "ForeignObject",
            "RolloutComplete",
            "RollingOut",
            "RolloutHalted",
            "Pending",
            "NotApplied",
            "Unfenced",
            "Applied",
            "Missing",
            "DeviceClassMissing",
            "AllHealthy",
            "Unhealthy",
            "Ready",
            "NotReady",
            "Paused"
        ]
    );
    assert_eq!(Reason::parse("RollingOut"), Some(Reason::RollingOut));
    assert_eq!(Reason::parse("rollingout"), None);
    let doc = include_str!("../../../docs/troubleshooting.md");
    let table = &doc[doc.find("| condition | reason |").expect("the troubleshooting table")..];
    for reason in Reason::ALL {
        assert!(table.contains(&format!("`{reason}`")), "docs/troubleshooting.md's table lacks {reason}");
    }
    for type_ in ConditionType::ALL {
        assert!(table.contains(&format!("| {type_} |")), "docs/troubleshooting.md's table lacks {type_}");
    }
}

#[test]
fn a_spec_that_is_not_applied_keeps_the_rollout_as_stored() {
    let halted = crate::api::RolloutStatus {
        revision: "new222".into(),
        version: "1.2.0".into(),
        state: crate::api::RolloutState::Halted,
        step: 1,
        ..Default::default()
    };
    let mut first = observation();
    first.rollout = Rollout::Applied {
        status: DriverStatus { rollout: Some(halted.clone()), ..DriverStatus::default() },
        observed: true,
    };
    let stored = compute(None, &first, now());
    let mut invalid = observation();
    invalid.validity = Validity::InvalidSpec("spec.driver.image: empty".into());
    invalid.rollout = Rollout::NotApplied("the spec is invalid".into());
    let status = compute(Some(&stored), &invalid, now());
    assert_eq!(status.driver.and_then(|d| d.rollout), Some(halted), "the halt outlives the invalid spec");
    assert_eq!(compute(None, &invalid, now()).driver, None, "and nothing is made up without one");
}

/// `(Reconciling, Stalled)` as `(status, reason)`.
fn progress(status: &NeuronDRAConfigStatus) -> [(String, String); 2] {
    [ConditionType::Reconciling, ConditionType::Stalled].map(|t| {
        let c = condition(status, t);
        (c.status.clone(), c.reason.clone())
    })
}

fn pair(reconciling: &str, stalled: &str, reason: &str) -> [(String, String); 2] {
    [(reconciling.into(), reason.into()), (stalled.into(), reason.into())]
}

#[test]
fn reconciling_and_stalled_follow_ready_as_kstatus_reads_them() {
    assert_eq!(progress(&compute(None, &observation(), now())), pair("False", "False", "Ready"));

    let mut rolling = observation();
    rolling.rollout = Rollout::Applied {
        status: DriverStatus { desired_nodes: 2, ready_nodes: 1, updated_nodes: 2, ..DriverStatus::default() },
        observed: true,
    };
    let status = compute(None, &rolling, now());
    assert_eq!(progress(&status), [("True".into(), "RollingOut".into()), ("False".into(), "RollingOut".into())]);
    assert_eq!(condition(&status, ConditionType::Reconciling).message, "2/2 nodes on , 1 ready");

    let mut missing = observation();
    missing.templates_present = 3;
    missing.templates_missing = vec!["team-a/pretrain".into()];
    assert_eq!(progress(&compute(None, &missing, now()))[0], ("True".into(), "Missing".into()));

    let mut paused = observation();
    paused.paused = true;
    paused.validity = Validity::InvalidSpec("spec.x: bad".into());
    assert_eq!(progress(&compute(None, &paused, now())), pair("False", "False", "Paused"));
}

#[test]
fn what_needs_a_change_to_go_on_is_stalled() {
    let stalled = |observed: &Observation| {
        let status = compute(None, observed, now());
        assert_eq!(condition(&status, ConditionType::Ready).status, "False");
        let [reconciling, stalled] = progress(&status);
        assert_eq!(reconciling.0, "False");
        assert_eq!(stalled.0, "True");
        (stalled.1, condition(&status, ConditionType::Stalled).message.clone())
    };
    let mut invalid = observation();
    invalid.validity = Validity::InvalidSpec("spec.profiles[0].training.devices: 32 > 16".into());
    invalid.rollout = Rollout::NotApplied("the spec is invalid".into());
    assert_eq!(stalled(&invalid), ("InvalidSpec".into(), "spec.profiles[0].training.devices: 32 > 16".into()));
    let mut conflict = observation();
    conflict.validity = Validity::Conflict("nodes n1 are selected by older config a".into());
    assert_eq!(stalled(&conflict).0, "Conflict");
    let mut unsupported = observation();
    unsupported.validity = Validity::Unsupported("spec.extendedResourceName needs 1.36".into());
    assert_eq!(stalled(&unsupported).0, "Unsupported");

    let mut halted = observation();
    let rollout = crate::api::RolloutStatus { state: crate::api::RolloutState::Halted, ..Default::default() };
    halted.rollout = Rollout::Applied {
        status: DriverStatus { desired_nodes: 2, ready_nodes: 1, rollout: Some(rollout), ..DriverStatus::default() },
        observed: true,
    };
    assert_eq!(stalled(&halted).0, "RolloutHalted");
    let mut no_class = observation();
    no_class.classes_missing = vec!["team-a/pretrain claims from efa.networking.k8s.aws, which does not exist".into()];
    assert_eq!(stalled(&no_class).0, "DeviceClassMissing");
    let mut foreign = observation();
    foreign.templates_present = 3;
    foreign.templates_foreign = vec!["team-a/pretrain was made by helm".into()];
    assert_eq!(stalled(&foreign).0, "ForeignObject");
}

/// Sick devices make the phase Degraded and `DevicesHealthy` False, but a config that did everything it was asked
/// is Current to GitOps tools: a fleet always has some sick device, and a gate on it would never open.
#[test]
fn unhealthy_devices_do_not_stall_a_ready_config() {
    let mut sick = observation();
    sick.health =
        Some(Health { summary: DeviceSummary { nodes: 2, total: 32, healthy: 31, unhealthy: 1 }, ..Health::default() });
    let status = compute(None, &sick, now());
    assert_eq!(status.phase, Some(Phase::Degraded));
    assert_eq!(condition(&status, ConditionType::DevicesHealthy).status, "False");
    assert_eq!(progress(&status), pair("False", "False", "Ready"));
}
