use super::*;

#[test]
fn only_a_bearer_token_is_taken_from_the_authorization_header() {
    let headers = |value: &str| {
        let mut map = HeaderMap::new();
        map.insert(header::AUTHORIZATION, value.parse().unwrap());
        map
    };
    assert_eq!(bearer_token(&headers("Bearer abc.def")), Some("abc.def"));
    assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
    assert_eq!(bearer_token(&headers("Basic dXNlcjpwYXNz")), None);
    assert_eq!(bearer_token(&headers("Bearer ")), None);
    assert_eq!(bearer_token(&HeaderMap::new()), None);
}
