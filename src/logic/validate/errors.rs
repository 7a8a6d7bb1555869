//! A config's problems, each naming its field, and the validator derive's errors in the same form.

use std::fmt;

use validator::{ValidationErrors, ValidationErrorsKind};

/// One problem with a config: the field path (`spec.profiles[0].training.devices`) and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FieldError {
    pub path: String,
    pub reason: String,
}

impl FieldError {
    pub fn new(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self { path: path.into(), reason: reason.into() }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.reason)
    }
}

/// Every problem found in one config, sorted by field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidConfig(pub Vec<FieldError>);

impl fmt::Display for InvalidConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lines: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&lines.join("; "))
    }
}

impl std::error::Error for InvalidConfig {}

/// Turns the validator derive's nested errors into one `FieldError` per field, with camelCase paths.
pub(super) fn flatten_validator_errors(path: &str, found: &ValidationErrors, out: &mut Vec<FieldError>) {
    for (field, kind) in found.errors() {
        let path = format!("{path}.{}", camel_case(field));
        match kind {
            ValidationErrorsKind::Field(list) => {
                out.extend(list.iter().map(|e| FieldError::new(&path, describe(e))));
            }
            ValidationErrorsKind::Struct(inner) => flatten_validator_errors(&path, inner, out),
            ValidationErrorsKind::List(items) => {
                for (index, inner) in items {
                    flatten_validator_errors(&format!("{path}[{index}]"), inner, out);
                }
            }
        }
    }
}

fn describe(error: &validator::ValidationError) -> String {
    if let Some(message) = &error.message {
        return message.to_string();
    }
    let param = |key: &str| error.params.get(key).map(ToString::to_string);
    match error.code.as_ref() {
        "length" => match (param("min"), param("max")) {
            (Some(min), Some(max)) => format!("length must be between {min} and {max}"),
            (None, Some(max)) => format!("must have at most {max} entries or characters"),
            (Some(min), None) => format!("must have at least {min} entries or characters"),
            _ => "has a bad length".into(),
        },
        "range" => {
            format!("must be between {} and {}", param("min").unwrap_or_default(), param("max").unwrap_or_default())
        }
        "regex" => format!("{} is not well-formed", param("value").unwrap_or_default()),
        other => other.to_string(),
    }
}

fn camel_case(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut upper = false;
    for c in field.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}
