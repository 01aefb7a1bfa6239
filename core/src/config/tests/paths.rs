//! Configuration tests, continued (see `config/tests.rs`).

use super::*;

#[test]
fn lexical_normalisation() {
    let cwd = Path::new("/work/app");
    assert_eq!(
        normalize_lexically(Path::new("./data/../x/./y"), cwd),
        PathBuf::from("/work/app/x/y")
    );
    assert_eq!(
        normalize_lexically(Path::new("/a/b/../../../c"), cwd),
        PathBuf::from("/c")
    );
    assert_eq!(
        normalize_lexically(Path::new("data"), cwd),
        PathBuf::from("/work/app/data")
    );
}

#[cfg(unix)]
#[test]
fn world_writable_customer_context_dir_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let root = temp_dir("ww");
    let data = root.join("data");
    let cc = data.join("customer_context");
    std::fs::create_dir_all(&cc).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();

    let mut cfg = Config {
        data_dir: data.clone(),
        ..Config::default()
    };
    assert!(errors(&cfg).is_empty(), "{:?}", errors(&cfg));

    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.key(), Some("sandbox.customer_context_dir"));
    assert!(e.to_string().contains("world-writable"), "{e}");
    assert!(e.to_string().contains("0777"), "{e}");
    // The fix is a chmod of that directory, not a config edit.
    assert!(
        e.to_string()
            .contains(&format!("chmod o-w {}", cc.display())),
        "{e}"
    );

    // A world-writable data_dir above a not-yet-created customer_context dir.
    std::fs::remove_dir(&cc).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o777)).unwrap();
    let e = cfg.validate().unwrap_err();
    assert_eq!(e.key(), Some("sandbox.customer_context_dir"));

    // Relative data_dir through a symlink resolves to the same place.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&data, root.join("link")).unwrap();
    cfg.sandbox.customer_context_dir = Some(root.join("link/customer_context"));
    assert!(
        cfg.validation_errors_in(&root).is_empty(),
        "{:?}",
        cfg.validation_errors_in(&root)
    );

    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn derived_sandbox_dirs() {
    let mut cfg = Config {
        data_dir: PathBuf::from("/srv/silas"),
        ..Config::default()
    };
    assert_eq!(cfg.verify_dir(), PathBuf::from("/srv/silas/sandbox/verify"));
    assert_eq!(cfg.sandbox_root(), PathBuf::from("/srv/silas/sandbox"));
    assert_eq!(
        cfg.sandbox_work_dir(),
        PathBuf::from("/srv/silas/sandbox/work")
    );
    assert_eq!(cfg.artifacts_dir(), PathBuf::from("/srv/silas/artifacts"));
    assert_eq!(
        cfg.customer_context_dir(),
        PathBuf::from("/srv/silas/customer_context")
    );
    cfg.sandbox.verify_dir = Some(PathBuf::from("/tmp/v"));
    assert_eq!(cfg.verify_dir(), PathBuf::from("/tmp/v"));
    // A configured sandbox root moves work dirs and the default verify dir.
    cfg.sandbox.verify_dir = None;
    cfg.sandbox.root_dir = Some(PathBuf::from("/var/lib/silas/sandbox/ab"));
    assert_eq!(
        cfg.sandbox_work_dir(),
        PathBuf::from("/var/lib/silas/sandbox/ab/work")
    );
    assert_eq!(
        cfg.verify_dir(),
        PathBuf::from("/var/lib/silas/sandbox/ab/verify")
    );
    // Secrets and artifacts never move with it.
    assert_eq!(cfg.artifacts_dir(), PathBuf::from("/srv/silas/artifacts"));
    assert_eq!(
        cfg.keystore_path(),
        PathBuf::from("/srv/silas/keys/owner.key")
    );
}

/// `~/` means the home directory, as in a shell (it used to become a
/// directory named `~` under the working directory, owner key included);
/// what cannot be expanded is an error naming the key.
#[test]
fn a_tilde_in_a_configured_path_is_the_home_directory() {
    let yaml = "silas:\n  data_dir: \"~/silasdata\"\n  skills_dir: \"~\"\n\
                \x20 keystore:\n    path: ~/keys/k\n";
    let env = MapEnv::new().with("HOME", "/home/me");
    let mut cfg = Config::from_yaml_str(yaml, &env).unwrap_or_else(|e| panic!("{e}"));
    cfg.anchor_paths(Path::new("/elsewhere"));
    assert_eq!(cfg.data_dir, PathBuf::from("/home/me/silasdata"));
    assert_eq!(cfg.skills_dir, PathBuf::from("/home/me"));
    assert_eq!(cfg.keystore.path, Some(PathBuf::from("/home/me/keys/k")));
    // A name merely starting with `~` elsewhere in the path is kept.
    let cfg = Config::from_yaml_str("silas:\n  data_dir: ./a~b\n", &env).unwrap();
    assert_eq!(cfg.data_dir, PathBuf::from("./a~b"));
    for (yaml, env, key) in [
        (
            "silas:\n  data_dir: ~other/data\n",
            env.clone(),
            "silas.data_dir",
        ),
        (
            "silas:\n  sandbox:\n    verify_dir: ~/v\n",
            MapEnv::new(),
            "silas.sandbox.verify_dir",
        ),
    ] {
        let e = Config::from_yaml_str(yaml, &env).unwrap_err();
        assert_eq!(e.key(), Some(key), "{e}");
        assert!(e.to_string().contains("full path"), "{e}");
    }
}

#[test]
fn every_configured_path_is_anchored_at_the_working_directory() {
    let yaml = "silas:\n  data_dir: ./state/../data\n  skills_dir: skills\n  active_goal: goals/bot.yaml\n\
                \x20 sandbox:\n    root_dir: sb\n    verify_dir: ./sb/v\n    customer_context_dir: data/cc\n\
                \x20 keystore:\n    path: keys/k\n";
    let mut cfg = Config::from_yaml_str(yaml, &empty()).unwrap_or_else(|e| panic!("{e}"));
    cfg.anchor_paths(Path::new("/home/me/silas"));
    let at = |p: &str| PathBuf::from("/home/me/silas").join(p);
    assert_eq!(cfg.data_dir, at("data"));
    assert_eq!(cfg.skills_dir, at("skills"));
    assert_eq!(cfg.active_goal, Some(at("goals/bot.yaml")));
    assert_eq!(cfg.sandbox.root_dir, Some(at("sb")));
    assert_eq!(cfg.sandbox.verify_dir, Some(at("sb/v")));
    assert_eq!(cfg.sandbox.customer_context_dir, Some(at("data/cc")));
    assert_eq!(cfg.keystore.path, Some(at("keys/k")));
    // Every derived path is absolute too.
    for p in [
        cfg.sandbox_work_dir(),
        cfg.verify_dir(),
        cfg.artifacts_dir(),
        cfg.customer_context_dir(),
        cfg.keystore_path(),
    ] {
        assert!(p.is_absolute(), "{}", p.display());
    }
    // The defaults too: `./data` means the directory the daemon started in.
    let mut d = Config::default();
    d.anchor_paths(Path::new("/srv"));
    assert_eq!(d.verify_dir(), PathBuf::from("/srv/data/sandbox/verify"));
    assert_eq!(d.skills_dir, PathBuf::from("/srv/skills"));
    // Absolute paths are kept (normalised).
    d.data_dir = PathBuf::from("/x/./y/../data");
    d.anchor_paths(Path::new("/elsewhere"));
    assert_eq!(d.data_dir, PathBuf::from("/x/data"));
}

#[test]
fn the_sandbox_root_never_contains_the_data_dir() {
    for root in ["/srv/silas", "/srv", "/"] {
        let mut cfg = Config {
            data_dir: PathBuf::from("/srv/silas"),
            ..Config::default()
        };
        cfg.sandbox.root_dir = Some(PathBuf::from(root));
        let errors = cfg.validation_errors_in(Path::new("/"));
        assert!(
            errors
                .iter()
                .any(|e| e.to_string().contains("sandbox.root_dir")),
            "{root}: {errors:?}"
        );
    }
    let mut cfg = Config {
        data_dir: PathBuf::from("/srv/silas"),
        ..Config::default()
    };
    cfg.sandbox.root_dir = Some(PathBuf::from("/var/lib/silas/sandbox/x"));
    let errors = cfg.validation_errors_in(Path::new("/"));
    assert!(
        !errors
            .iter()
            .any(|e| e.to_string().contains("sandbox.root_dir")),
        "{errors:?}"
    );
}
