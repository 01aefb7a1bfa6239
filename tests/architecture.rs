//! Layering, enforced: every workspace crate declares `[package.metadata.silas]
//! layer = N`, and a crate may depend only on workspace crates of a strictly
//! lower layer. Pure policy (`silas-core`, layer 0) therefore can never pick
//! up storage, actors or the network.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::Command;

#[test]
fn workspace_dependencies_point_only_downward() {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages = meta["packages"].as_array().unwrap();

    let mut layer: BTreeMap<String, u64> = BTreeMap::new();
    for p in packages {
        let name = p["name"].as_str().unwrap().to_string();
        let l = p["metadata"]["silas"]["layer"]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} declares no [package.metadata.silas] layer"));
        layer.insert(name, l);
    }
    assert!(layer.len() >= 6, "checked only {} crates", layer.len());
    assert_eq!(layer["silas-core"], 0);

    let mut checked = 0;
    for p in packages {
        let name = p["name"].as_str().unwrap();
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            let is_dev = d["kind"].as_str() == Some("dev");
            if let Some(&dl) = layer.get(dep)
                && !is_dev
            {
                checked += 1;
                assert!(
                    dl < layer[name],
                    "{name} (layer {}) depends on {dep} (layer {dl})",
                    layer[name]
                );
            }
        }
    }
    assert!(checked >= 8, "only {checked} workspace edges checked");
}

#[test]
fn core_has_no_io_or_runtime_dependencies() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/core/Cargo.toml")).unwrap();
    let deps = manifest
        .split("[dependencies]")
        .nth(1)
        .unwrap()
        .split("\n[")
        .next()
        .unwrap();
    for forbidden in ["tokio", "redb", "ractor", "warp", "reqwest", "async-openai"] {
        assert!(
            !deps.contains(&format!("{forbidden}.workspace")),
            "silas-core depends on {forbidden}"
        );
    }
}
