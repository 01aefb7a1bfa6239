//! Personality models (spec §3.10): control axes, mood, voice, presets, the
//! persisted persona state and its append-only events. Axis and mood values
//! live in [0, 1]; composition and clamping are the personality engine's job.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::ModelError;
use crate::Timestamp;

spec_enum! {
    /// A numeric personality control axis (§3.10).
    pub enum PersonalityAxis {
        Warmth => "warmth",
        Assertiveness => "assertiveness",
        Verbosity => "verbosity",
        Formality => "formality",
        Humor => "humor",
        Initiative => "initiative",
        Certainty => "certainty",
    }
}

/// An open registry key resolved against `personality.contexts` (§3.10).
/// The spec calls it a "string key", so it is a bare JSON string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PersonaContextKey(pub String);

impl PersonaContextKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn check_unit(model: &'static str, field: &'static str, value: f64) -> Result<(), ModelError> {
    // `contains` is false for NaN, so NaN is refused too.
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(ModelError::PersonalityValueOutOfRange {
            model,
            field,
            value,
        })
    }
}

/// One value per axis, each in [0, 1] (§3.10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "AxisProfileRaw")]
pub struct AxisProfile {
    pub warmth: f64,
    pub assertiveness: f64,
    pub verbosity: f64,
    pub formality: f64,
    pub humor: f64,
    pub initiative: f64,
    pub certainty: f64,
}

#[derive(Deserialize)]
struct AxisProfileRaw {
    warmth: f64,
    assertiveness: f64,
    verbosity: f64,
    formality: f64,
    humor: f64,
    initiative: f64,
    certainty: f64,
}

impl TryFrom<AxisProfileRaw> for AxisProfile {
    type Error = ModelError;
    fn try_from(r: AxisProfileRaw) -> Result<Self, ModelError> {
        let v = AxisProfile {
            warmth: r.warmth,
            assertiveness: r.assertiveness,
            verbosity: r.verbosity,
            formality: r.formality,
            humor: r.humor,
            initiative: r.initiative,
            certainty: r.certainty,
        };
        v.validate()?;
        Ok(v)
    }
}

impl AxisProfile {
    /// Every axis at the same value (e.g. 0.5 for a neutral profile).
    pub fn uniform(value: f64) -> Self {
        AxisProfile {
            warmth: value,
            assertiveness: value,
            verbosity: value,
            formality: value,
            humor: value,
            initiative: value,
            certainty: value,
        }
    }

    pub fn get(&self, axis: PersonalityAxis) -> f64 {
        match axis {
            PersonalityAxis::Warmth => self.warmth,
            PersonalityAxis::Assertiveness => self.assertiveness,
            PersonalityAxis::Verbosity => self.verbosity,
            PersonalityAxis::Formality => self.formality,
            PersonalityAxis::Humor => self.humor,
            PersonalityAxis::Initiative => self.initiative,
            PersonalityAxis::Certainty => self.certainty,
        }
    }

    /// Every axis within [0, 1].
    pub fn validate(&self) -> Result<(), ModelError> {
        PersonalityAxis::ALL
            .iter()
            .try_for_each(|a| check_unit("AxisProfile", a.as_str(), self.get(*a)))
    }
}

/// Fast-changing session state, each value in [0, 1] (§3.10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "MoodStateRaw")]
pub struct MoodState {
    pub energy: f64,
    pub patience: f64,
    pub curiosity: f64,
    pub frustration: f64,
}

#[derive(Deserialize)]
struct MoodStateRaw {
    energy: f64,
    patience: f64,
    curiosity: f64,
    frustration: f64,
}

impl TryFrom<MoodStateRaw> for MoodState {
    type Error = ModelError;
    fn try_from(r: MoodStateRaw) -> Result<Self, ModelError> {
        let v = MoodState {
            energy: r.energy,
            patience: r.patience,
            curiosity: r.curiosity,
            frustration: r.frustration,
        };
        v.validate()?;
        Ok(v)
    }
}

impl MoodState {
    /// Every mood value within [0, 1].
    pub fn validate(&self) -> Result<(), ModelError> {
        [
            ("energy", self.energy),
            ("patience", self.patience),
            ("curiosity", self.curiosity),
            ("frustration", self.frustration),
        ]
        .into_iter()
        .try_for_each(|(field, value)| check_unit("MoodState", field, value))
    }
}

/// Qualitative voice settings (§3.10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoiceConfig {
    pub tone: String,
    #[serde(default)]
    pub quirks: Vec<String>,
    #[serde(default)]
    pub speech_patterns: Vec<String>,
    #[serde(default)]
    pub anti_patterns: Vec<String>,
}

/// A named baseline of axes and voice (§3.10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersonaPreset {
    pub name: String,
    pub axes: AxisProfile,
    pub voice: VoiceConfig,
}

/// Persisted personality state for one scope (§3.10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersonaState {
    pub scope_id: String,
    pub baseline_axes: AxisProfile,
    pub mood: MoodState,
    pub active_preset: String,
    pub voice: VoiceConfig,
    pub last_context: String,
    #[serde(default = "Timestamp::now")]
    pub updated_at: Timestamp,
}

/// An append-only personality event (§3.10).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PersonaEvent {
    pub event_id: String,
    pub scope_id: String,
    pub event_type: String,
    /// Untrusted unless stated: only trusted events may drift the baseline.
    #[serde(default)]
    pub trusted: bool,
    #[serde(default)]
    pub delta_axes: BTreeMap<String, f64>,
    #[serde(default)]
    pub delta_mood: BTreeMap<String, f64>,
    pub source: String,
    #[serde(default = "Timestamp::now")]
    pub created_at: Timestamp,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::model::test_support::{assert_enum_strings, assert_refused, round_trip};

    #[test]
    fn enum_strings() {
        assert_enum_strings(
            PersonalityAxis::ALL,
            &[
                (PersonalityAxis::Warmth, "warmth"),
                (PersonalityAxis::Assertiveness, "assertiveness"),
                (PersonalityAxis::Verbosity, "verbosity"),
                (PersonalityAxis::Formality, "formality"),
                (PersonalityAxis::Humor, "humor"),
                (PersonalityAxis::Initiative, "initiative"),
                (PersonalityAxis::Certainty, "certainty"),
            ],
        );
    }

    #[test]
    fn context_key_is_a_bare_string() {
        let k = PersonaContextKey("coding".into());
        assert_eq!(round_trip(&k), json!("coding"));
        assert_eq!(k.as_str(), "coding");
    }

    fn mood() -> MoodState {
        MoodState {
            energy: 1.0,
            patience: 0.0,
            curiosity: 0.5,
            frustration: 0.1,
        }
    }

    #[test]
    fn axis_profile_range() {
        let mut a = AxisProfile::uniform(0.5);
        a.warmth = 0.0;
        a.certainty = 1.0;
        assert_eq!(a.validate(), Ok(()));
        round_trip(&a);
        for axis in PersonalityAxis::ALL {
            for bad in [-0.01, 1.01] {
                let mut j = serde_json::to_value(AxisProfile::uniform(0.5)).unwrap();
                j[axis.as_str()] = json!(bad);
                assert_refused::<AxisProfile>(
                    j,
                    &ModelError::PersonalityValueOutOfRange {
                        model: "AxisProfile",
                        field: axis.as_str(),
                        value: bad,
                    },
                );
            }
        }
        let mut a = AxisProfile::uniform(0.5);
        a.humor = f64::NAN;
        assert!(matches!(
            a.validate(),
            Err(ModelError::PersonalityValueOutOfRange { field: "humor", .. })
        ));
    }

    #[test]
    fn mood_state_range() {
        assert_eq!(mood().validate(), Ok(()));
        round_trip(&mood());
        for field in ["energy", "patience", "curiosity", "frustration"] {
            let mut j = serde_json::to_value(mood()).unwrap();
            j[field] = json!(2.0);
            assert_refused::<MoodState>(
                j,
                &ModelError::PersonalityValueOutOfRange {
                    model: "MoodState",
                    field,
                    value: 2.0,
                },
            );
        }
    }

    #[test]
    fn preset_state_and_event_round_trip() {
        let voice: VoiceConfig = serde_json::from_value(json!({"tone": "dry"})).unwrap();
        assert!(voice.quirks.is_empty());
        let preset = PersonaPreset {
            name: "work".into(),
            axes: AxisProfile::uniform(0.4),
            voice: voice.clone(),
        };
        round_trip(&preset);
        let state = PersonaState {
            scope_id: "owner".into(),
            baseline_axes: AxisProfile::uniform(0.5),
            mood: mood(),
            active_preset: "default".into(),
            voice,
            last_context: "coding".into(),
            updated_at: Timestamp::parse("2026-01-15T10:00:00Z").unwrap(),
        };
        round_trip(&state);
        // Nested validation: an out-of-range mood inside a state is refused.
        let mut j = serde_json::to_value(&state).unwrap();
        j["mood"]["energy"] = json!(-1.0);
        assert_refused::<PersonaState>(
            j,
            &ModelError::PersonalityValueOutOfRange {
                model: "MoodState",
                field: "energy",
                value: -1.0,
            },
        );

        let e: PersonaEvent = serde_json::from_value(json!({
            "event_id": "e1", "scope_id": "owner", "event_type": "ci_failure",
            "delta_mood": {"frustration": 0.1}, "source": "runtime"
        }))
        .unwrap();
        assert!(!e.trusted);
        round_trip(&e);
    }
}
