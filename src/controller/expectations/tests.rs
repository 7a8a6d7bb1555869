use super::*;

#[test]
fn an_expectation_holds_until_the_cache_moves_past_the_replaced_state() {
    let expectations = Expectations::default();
    assert!(expectations.settled("k", Some("1")), "nothing awaited");
    expectations.wrote("k".into(), Some("4".into()));
    assert!(!expectations.settled("k", Some("4")), "the cache still shows the object our write replaced");
    assert!(expectations.settled("k", Some("9")), "our write, or a later one (a status update), is in the cache");
    assert!(expectations.settled("k", Some("4")), "settled once: the cache is trusted again");
    expectations.wrote("created".into(), None);
    assert!(!expectations.settled("created", None), "the cache has not seen the create");
    assert!(expectations.settled("created", Some("1")));
    expectations.wrote("deleted".into(), Some("7".into()));
    assert!(!expectations.settled("deleted", Some("7")), "deleted, the cache still shows it");
    assert!(expectations.settled("deleted", None));
}
