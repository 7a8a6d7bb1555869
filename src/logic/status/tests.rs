use super::*;

fn observation() -> Observation {
    Observation {
        generation: Some(3),
        paused: false,
        validity: Validity::Valid,
        rollout: Rollout::Applied {
            status: DriverStatus { desired_nodes: 2, ready_nodes: 2, updated_nodes: 2, ..DriverStatus::default() },
            observed: true,
        },
        templates_present: 4,
        templates_wanted: 4,
        template_namespaces: 2,
        profiles: vec![],
        templates_missing: vec![],
        templates_foreign: vec![],
        classes_missing: vec![],
        foreign: vec![],
        health: None,
        capacity: Vec::new(),
        remediation: None,
        teams: Vec::new(),
        team_summary: None,
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
            "NotReady"
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
