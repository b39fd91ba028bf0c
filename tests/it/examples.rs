//! Every example config, as `validate` shows it: compared with the expected text stored under
//! tests/validate/ (`TIDEGATE_BLESS=1` rewrites them after a deliberate change).

use std::path::Path;

use crate::daemon_util::binary;

#[test]
fn validate_shows_each_example_config_in_its_own_words() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("TIDEGATE_BLESS").is_some();
    let mut seen = 0;
    let mut entries: Vec<_> = std::fs::read_dir(root.join("config"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "toml")) {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let out = std::process::Command::new(binary())
            .current_dir(root)
            // offline: the examples name registries that need not run here
            .args(["validate", "--offline", "--config", &format!("config/{name}.toml")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let shown = String::from_utf8(out.stdout).unwrap();
        assert!(
            !shown.contains("Some(") && !shown.contains("None") && !shown.contains("[\""),
            "{name}: Rust debug formatting:\n{shown}"
        );
        let expected_path = root.join("tests/validate").join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(expected_path.parent().unwrap()).unwrap();
            std::fs::write(&expected_path, &shown).unwrap();
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("{}: missing (TIDEGATE_BLESS=1 writes it)", expected_path.display()));
        assert_eq!(shown, expected, "{name}: validate's output changed");
        seen += 1;
    }
    assert!(seen >= 7, "the example configs under config/");
}

#[test]
fn relative_paths_in_a_config_file_are_relative_to_its_folder() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let elsewhere = tempfile::tempdir().unwrap();
    // run from another folder: the events file and the state path still resolve beside the config
    let out = std::process::Command::new(binary())
        .current_dir(elsewhere.path())
        .args(["validate", "--config"])
        .arg(root.join("config/periodic-events.toml"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("the file holds 2 valid events"), "{shown}");
    assert!(
        shown.contains(&root.join("state/scheduled-events.state").display().to_string()),
        "{shown}"
    );
    // a path given with --set stays relative to the working directory
    let out = std::process::Command::new(binary())
        .current_dir(elsewhere.path())
        .args(["validate", "--set", "checkpoint.path=here.state", "--config"])
        .arg(root.join("config/periodic-events.toml"))
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("to here.state"), "{shown}");
}
