//! The domain model of spec §3 (and the connection record of §2.5): serde types
//! whose JSON uses the spec's field names and snake_case enum values exactly.
//!
//! Types carry no business logic beyond the validators the spec names. Every
//! validator runs at deserialisation (via `#[serde(try_from = ...)]` on a raw
//! twin where needed) and is also callable as `validate()`, returning a typed
//! [`ModelError`]. Optional fields serialise as `null` rather than being
//! skipped, mirroring Pydantic's `model_dump(mode="json")` — the shape the
//! hash projections in [`crate::projections`] are defined over.

/// Declares a string enum whose JSON values are written out literally next to
/// each variant, so they can be checked against the spec by eye. Generates
/// `ALL` (every variant, in spec order), `as_str` and `Display`.
macro_rules! spec_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $value:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $value)] $variant ),+
        }

        impl $name {
            /// Every variant, in the order the spec lists them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The exact JSON string of this value.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $($name::$variant => $value),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

pub mod agents;
pub mod approval;
pub mod connections;
pub mod context;
pub mod devices;
pub mod error;
pub mod execution;
pub mod gates;
pub mod memory;
pub mod messages;
pub mod personality;
pub mod review;
pub mod sessions;
pub mod skills;
pub mod work;
pub mod workspace;

pub use error::ModelError;

/// A free-form JSON object (the spec's `dict`). Backed by serde_json's map;
/// canonical ordering is imposed by [`crate::canonical`], never relied on here.
pub type JsonObject = serde_json::Map<String, serde_json::Value>;

/// Shared assertions for the model tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::fmt::Debug;

    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::Value;

    /// Serialises `value`, parses it back, and asserts nothing was lost (both
    /// the value and its JSON). Returns the JSON for further assertions.
    pub fn round_trip<T>(value: &T) -> Value
    where
        T: Serialize + DeserializeOwned + PartialEq + Debug,
    {
        let json = serde_json::to_value(value).unwrap();
        let text = serde_json::to_string(value).unwrap();
        let back: T = serde_json::from_str(&text).unwrap();
        assert_eq!(&back, value, "value changed through {text}");
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
        json
    }

    /// Asserts each enum value serialises to exactly the spec string and parses
    /// back from it, and that the table covers every variant (`all`).
    pub fn assert_enum_strings<T>(all: &[T], table: &[(T, &str)])
    where
        T: Serialize + DeserializeOwned + PartialEq + Debug + Copy,
    {
        assert_eq!(all.len(), table.len(), "table must cover every variant");
        for (variant, expected) in table {
            assert!(all.contains(variant), "{variant:?} missing from ALL");
            assert_eq!(
                serde_json::to_value(variant).unwrap(),
                Value::String((*expected).to_string())
            );
            let parsed: T = serde_json::from_value(Value::String((*expected).to_string())).unwrap();
            assert_eq!(&parsed, variant);
        }
    }

    /// Asserts that `json` is refused when parsed as `T` with exactly the
    /// message of `expected` — i.e. the validator, not some other serde error,
    /// refused it.
    pub fn assert_refused<T>(json: Value, expected: &super::ModelError)
    where
        T: DeserializeOwned + Debug,
    {
        match serde_json::from_value::<T>(json.clone()) {
            Ok(v) => panic!("accepted {json}: {v:?}"),
            Err(e) => assert_eq!(e.to_string(), expected.to_string(), "for {json}"),
        }
    }
}
