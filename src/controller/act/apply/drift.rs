//! drift: whether the cached object is as this operator last applied it, so the apply can be skipped.
//!
//! Two things make "the cache holds every field we want" the wrong test on its own. The API server rewrites
//! resource quantities to their canonical form (`0.5` → `500m`, `1024Mi` → `1Gi`), so a spec spelled otherwise would
//! look changed on every reconcile; quantities therefore compare by value. And a field we stop sending (a
//! `priorityClassName`, a pull secret, a limit) is still in the cache, so the cached object still "holds" the smaller
//! desired one and nothing would be written: the field would stay until something else changed. Server-side apply
//! removes exactly the fields our manager owned and no longer sends, but only if we send the apply. So every object
//! the operator's own manager applies carries the hash of what was applied (`neurondra.io/applied-hash`), and a
//! different hash is drift. Shared objects (the DeviceClass, applied by every config under its own manager) carry
//! none: one annotation written by several managers with different values would make them take turns forever.

use std::collections::BTreeMap;

use kube::Resource;
use serde::Serialize;
use serde_json::Value;

use crate::api::labels::MANAGER;
use crate::logic::desired::short_hash;

/// The hash of the fields the operator's manager last applied.
pub const ANNOTATION_APPLIED_HASH: &str = "neurondra.io/applied-hash";

/// What the operator's manager applies of one desired object: its fields as compared, and (for the operator's own
/// manager) their hash. Computed once per object and pass, for both the drift check and the stamp.
pub struct Applied {
    want: Value,
    hash: Option<String>,
}

impl Applied {
    pub fn of<K: Serialize>(desired: &K, manager: &str) -> Applied {
        let want = comparable(desired);
        let hash = (manager == MANAGER).then(|| short_hash(&want));
        Applied { want, hash }
    }

    /// True when `existing` (from the cache) holds every field wanted and, for the operator's own manager, was last
    /// applied from the same fields.
    pub fn held_by<K: Resource + Serialize>(&self, existing: &K) -> bool {
        let applied = existing.meta().annotations.as_ref().and_then(|a| a.get(ANNOTATION_APPLIED_HASH));
        // The hash first: it is cheaper than serializing the cached object.
        self.hash.as_ref().is_none_or(|hash| applied == Some(hash))
            && holds(&serde_json::to_value(existing).expect("k8s objects serialize"), &self.want)
    }

    /// `desired` as it is applied: with the hash of its fields when the operator's own manager applies it.
    pub fn stamp<K: Resource + Clone>(&self, desired: &K) -> K {
        let mut object = desired.clone();
        if let Some(hash) = &self.hash {
            object
                .meta_mut()
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(ANNOTATION_APPLIED_HASH.into(), hash.clone());
        }
        object
    }
}

/// `desired` as it is applied under `manager` (for objects built outside a pass, e.g. test fixtures).
pub fn stamped<K: Resource + Serialize + Clone>(desired: &K, manager: &str) -> K {
    Applied::of(desired, manager).stamp(desired)
}

/// The desired object as compared and hashed: without its type (a dynamic object read from a list carries no
/// apiVersion and kind, and the type is not drift) and without the hash itself (stamping twice changes nothing).
fn comparable<K: Serialize>(desired: &K) -> Value {
    let mut want = serde_json::to_value(desired).expect("k8s objects serialize");
    if let Some(object) = want.as_object_mut() {
        object.remove("apiVersion");
        object.remove("kind");
    }
    if let Some(annotations) = want.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        annotations.remove(ANNOTATION_APPLIED_HASH);
        if annotations.is_empty() {
            want["metadata"].as_object_mut().expect("an object").remove("annotations");
        }
    }
    want
}

/// True when every field of `desired` is present in `existing` with the same value. Objects compare key by key,
/// lists element by element (same length), so server-side defaults and other managers' extra fields do not count
/// as drift. Owner references only need to contain the desired ones (shared objects have several owners).
/// Resource quantities (`requests`, `limits`) compare by value, as the API server stores them canonically.
pub fn holds(existing: &Value, desired: &Value) -> bool {
    match (desired, existing) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, want_value)| {
            let have_value = have.get(key).unwrap_or(&Value::Null);
            match key.as_str() {
                "ownerReferences" => contains_all(have_value, want_value),
                "requests" | "limits" if want_value.is_object() => same_quantities(have_value, want_value),
                _ => holds(have_value, want_value),
            }
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| holds(h, w))
        }
        (Value::Null, _) => true,
        (want, have) => want == have,
    }
}

fn contains_all(have: &Value, want: &Value) -> bool {
    let have = have.as_array().map(Vec::as_slice).unwrap_or_default();
    want.as_array().into_iter().flatten().all(|w| have.iter().any(|h| holds(h, w)))
}

/// Every wanted quantity is there with the same value, however either side spells it.
fn same_quantities(have: &Value, want: &Value) -> bool {
    let Some(want) = want.as_object() else { return false };
    want.iter().all(|(name, w)| {
        have.get(name).is_some_and(|h| {
            h == w || matches!((h.as_str().and_then(quantity), w.as_str().and_then(quantity)), (Some(a), Some(b)) if a == b)
        })
    })
}

/// A Kubernetes quantity as an exact value `mantissa × 10^exponent`, normalized (no trailing zeros in the
/// mantissa), so that equal values compare equal: `0.5` and `500m`, `1024Mi` and `1Gi`, `1e3` and `1k`.
fn quantity(text: &str) -> Option<(i128, i32)> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (negative, number) = match number.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits = format!("{whole}{fraction}");
    if digits.is_empty() || digits.len() > 30 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut mantissa: i128 = digits.parse().ok()?;
    let mut exponent = -(fraction.len() as i32);
    match suffix {
        "" => {}
        "n" => exponent -= 9,
        "u" => exponent -= 6,
        "m" => exponent -= 3,
        "k" => exponent += 3,
        "M" => exponent += 6,
        "G" => exponent += 9,
        "T" => exponent += 12,
        "P" => exponent += 15,
        "E" => exponent += 18,
        binary if binary.len() == 2 && binary.ends_with('i') => {
            let power = "KMGTPE".find(&binary[..1])? as u32 + 1;
            mantissa = mantissa.checked_mul(1i128 << (10 * power))?;
        }
        scientific => exponent += scientific.strip_prefix(['e', 'E'])?.parse::<i32>().ok()?,
    }
    if mantissa == 0 {
        return Some((0, 0));
    }
    while mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    Some((if negative { -mantissa } else { mantissa }, exponent))
}

#[cfg(test)]
mod tests;
