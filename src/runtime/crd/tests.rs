use super::*;

#[test]
fn the_same_crd_passes_and_a_missing_one_is_refused() {
    assert_eq!(check_installed(Some(&crd())), Ok(()));
    assert_eq!(check_installed(None), Err(CrdMismatch::Missing));
}

#[test]
fn an_older_or_unannotated_crd_is_refused_with_upgrade_instructions() {
    let mut older = crd();
    older.metadata.annotations = Some(BTreeMap::from([
        (ANNOTATION_VERSION.to_string(), "0.0.1".to_string()),
        (ANNOTATION_SCHEMA_HASH.to_string(), "0000".to_string()),
    ]));
    let error = check_installed(Some(&older)).unwrap_err();
    assert!(error.to_string().contains("docs/install.md#upgrading"), "{error}");
    let mut bare = crd();
    bare.metadata.annotations = None;
    assert!(matches!(check_installed(Some(&bare)), Err(CrdMismatch::Older { .. })));
}

#[test]
fn a_newer_crd_is_accepted() {
    let mut newer = crd();
    newer.metadata.annotations = Some(BTreeMap::from([
        (ANNOTATION_VERSION.to_string(), "999.0.0".to_string()),
        (ANNOTATION_SCHEMA_HASH.to_string(), "ffff".to_string()),
    ]));
    assert_eq!(check_installed(Some(&newer)), Ok(()));
}
