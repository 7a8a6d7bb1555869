//! image (pure): the one reading of a container image reference, for the versions the status names and the
//! `draDriverVersion` the plugin's slices must carry.

/// An image reference read as `[registry/]path[:tag][@digest]`; a registry's port is not a tag.
struct Reference<'a> {
    whole: &'a str,
    tag: Option<&'a str>,
    digest: Option<&'a str>,
}

fn parse(image: &str) -> Reference<'_> {
    let (name, digest) = image.split_once('@').map_or((image, None), |(name, digest)| (name, Some(digest)));
    let last = name.rsplit('/').next().unwrap_or(name);
    Reference { whole: image, tag: last.split_once(':').map(|(_, tag)| tag), digest }
}

/// How the status names an image's version: its digest (`sha256:0123456789ab`), else its tag (`…:1.2.0` →
/// `1.2.0`), else the whole reference.
pub fn label(image: &str) -> String {
    let reference = parse(image);
    match (reference.digest, reference.tag) {
        (Some(digest), _) => digest.chars().take(19).collect(),
        (None, Some(tag)) => tag.to_string(),
        (None, None) => reference.whole.to_string(),
    }
}

/// The image's semver tag without a leading `v` (`…/neuron-dra-driver:1.1.0` → `1.1.0`), if it has one: the
/// version AWS's plugin publishes as `draDriverVersion`.
pub fn semver(image: &str) -> Option<String> {
    let tag = parse(image).tag?.trim_start_matches('v');
    (tag.split('.').count() == 3 && tag.split('.').all(|p| p.parse::<u64>().is_ok())).then(|| tag.to_string())
}

#[cfg(test)]
mod tests;
