use super::*;
use crate::api::rollout_problems;

#[test]
fn durations_parse_in_go_form_only() {
    assert_eq!(parse_duration("90s"), Some(90));
    assert_eq!(parse_duration("5m"), Some(300));
    assert_eq!(parse_duration("1h30m"), Some(5400));
    assert_eq!(parse_duration("1h2m3s"), Some(3723));
    for bad in ["", "5", "m", "5x", "1m1h", "5m5m", "-5m", "1.5h"] {
        assert_eq!(parse_duration(bad), None, "{bad}");
    }
}

#[test]
fn step_sizes_round_up_and_stay_bounded() {
    let policy = |m: IntOrString| RolloutPolicy { max_unavailable: m, ..RolloutPolicy::default() };
    assert_eq!(RolloutPolicy::default().step_size(40), 4);
    assert_eq!(RolloutPolicy::default().step_size(3), 1);
    assert_eq!(policy(IntOrString::String("25%".into())).step_size(10), 3);
    assert_eq!(policy(IntOrString::String("100%".into())).step_size(5000), MAX_STEP_NODES);
    assert_eq!(policy(IntOrString::Int(7)).step_size(3), 7);
    assert_eq!(RolloutPolicy { canary: 3, ..RolloutPolicy::default() }.canary_size(), 3);
}

#[test]
fn render_rejects_what_the_cel_rules_reject() {
    let driver = |policy: RolloutPolicy| super::super::DriverSpec { rollout: Some(policy), ..Default::default() };
    assert!(rollout_problems(&driver(RolloutPolicy::default())).is_empty());
    let paths =
        |policy: RolloutPolicy| -> Vec<String> { rollout_problems(&driver(policy)).into_iter().map(|p| p.0).collect() };
    let base = RolloutPolicy::default();
    assert_eq!(paths(RolloutPolicy { canary: 0, ..base.clone() }), ["spec.driver.rollout.canary"]);
    for bad in
        [IntOrString::Int(0), IntOrString::Int(101), IntOrString::String("0%".into()), IntOrString::String("5".into())]
    {
        assert_eq!(
            paths(RolloutPolicy { max_unavailable: bad, ..base.clone() }),
            ["spec.driver.rollout.maxUnavailable"]
        );
    }
    for bad in ["5s", "25h", "soon"] {
        assert_eq!(paths(RolloutPolicy { timeout: bad.into(), ..base.clone() }), ["spec.driver.rollout.timeout"]);
    }
    assert!(paths(RolloutPolicy { soak: "0s".into(), ..base.clone() }).is_empty());
    for bad in ["25h", "", "2"] {
        assert_eq!(paths(RolloutPolicy { soak: bad.into(), ..base.clone() }), ["spec.driver.rollout.soak"]);
    }
    let both = super::super::DriverSpec {
        rollout: Some(base),
        update_strategy: Some(super::super::UpdateStrategy::default()),
        ..Default::default()
    };
    assert_eq!(rollout_problems(&both)[0].0, "spec.driver.rollout");
}
