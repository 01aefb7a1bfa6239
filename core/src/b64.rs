//! `Base64Bytes`: raw bytes in memory, a standard padded base64 string in JSON
//! (spec §3.6). Signatures use it so they round-trip deterministically through
//! stored JSON and the audit log; implicit byte-array JSON is never used.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Base64Bytes(pub Vec<u8>);

impl Base64Bytes {
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    pub fn encode(&self) -> String {
        STANDARD.encode(&self.0)
    }

    pub fn decode(s: &str) -> Result<Self, base64::DecodeError> {
        STANDARD.decode(s).map(Base64Bytes)
    }
}

impl fmt::Debug for Base64Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Base64Bytes({})", self.encode())
    }
}

impl From<Vec<u8>> for Base64Bytes {
    fn from(v: Vec<u8>) -> Self {
        Base64Bytes(v)
    }
}

impl Serialize for Base64Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.encode())
    }
}

impl<'de> Deserialize<'de> for Base64Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Base64Bytes::decode(&s)
            .map_err(|e| serde::de::Error::custom(format!("invalid base64: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_as_padded_standard_base64() {
        let b = Base64Bytes(vec![0xff, 0xfe, 0x00, 0x01, 0x02]);
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"//4AAQI=\"");
        let back: Base64Bytes = serde_json::from_str("\"//4AAQI=\"").unwrap();
        assert_eq!(back, b);
    }

    #[test]
    fn rejects_non_base64() {
        assert!(serde_json::from_str::<Base64Bytes>("\"not base64!\"").is_err());
        assert!(serde_json::from_str::<Base64Bytes>("[1,2,3]").is_err());
    }
}
