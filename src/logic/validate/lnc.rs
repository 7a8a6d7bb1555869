//! Fallbacks that keep the model loadable: a fallback runs at the request's Logical NeuronCore setting unless the
//! profile says `allowLncChange: true`. A model compiled for LNC=2 does not load at LNC=1 (the Neuron compiler's
//! `--logical-nc-config` must match the runtime's), so a fallback that changes it would schedule a pod whose model
//! then fails to load. The same rule is the CRD's CEL rule `FALLBACKS_KEEP_LNC`, so the API server refuses what
//! `render` refuses.

use crate::api::DeviceRequest;

use super::FieldError;

/// The Logical NeuronCore setting a request or fallback runs at: its `logicalNeuronCore`, else 1 on Trainium1
/// (`trn1*`, which has only LNC=1), else the driver's default on Trainium2 and later, 2 (docs/neuron-driver.md).
pub fn effective_lnc(request: &DeviceRequest) -> u8 {
    match (request.logical_neuron_core, request.instance_type.as_deref()) {
        (Some(lnc), _) => lnc,
        (None, Some(name)) if name.starts_with("trn1") => 1,
        (None, _) => 2,
    }
}

/// Refuses each fallback of `request` (at `path`) whose Logical NeuronCore setting differs from the request's,
/// unless the request allows it.
pub fn check_fallbacks_keep_lnc(path: &str, request: &DeviceRequest, errors: &mut Vec<FieldError>) {
    if request.allow_lnc_change == Some(true) {
        return;
    }
    let preferred = effective_lnc(request);
    for (index, fallback) in request.fallbacks.iter().enumerate() {
        let lnc = effective_lnc(&fallback.request());
        if lnc != preferred {
            errors.push(FieldError::new(
                format!("{path}.fallbacks[{index}].logicalNeuronCore"),
                format!(
                    "runs at LNC={lnc} but the request at LNC={preferred}: a model compiled for one does not load at \
                     the other; keep LNC={preferred} or set allowLncChange: true"
                ),
            ));
        }
    }
}
