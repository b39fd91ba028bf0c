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
            // the secret config/secured-cluster.toml reads from the environment
            .env("KAFKA_PASSWORD", "example-password")
            .args(["validate", "--config", &format!("config/{name}.toml")])
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

/// Every relative link of the README, CONTRIBUTING.md, CHANGELOG.md and docs/ leads to a file
/// that exists, and a `#fragment` to one of its headings (as GitHub makes their anchors).
#[test]
fn the_documentation_links_lead_somewhere() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<_> = ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"]
        .iter()
        .map(|p| root.join(p))
        .collect();
    pages.extend(
        std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let anchor = |heading: &str| -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let mut checked = 0;
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in text.split("](").skip(1).filter_map(|rest| rest.split(')').next()) {
            if link.starts_with("http") || link.contains(' ') {
                continue;
            }
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            if !target.exists() {
                broken.push(format!("{}: {link} (no such file)", page.display()));
            } else if !fragment.is_empty() {
                let headings = std::fs::read_to_string(&target).unwrap_or_default();
                if !headings
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| anchor(h.trim_start_matches('#')) == fragment)
                {
                    broken.push(format!("{}: {link} (no such heading)", page.display()));
                }
            }
            checked += 1;
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked >= 20, "only {checked} links found");
}

/// No page a user reads (the README, CONTRIBUTING.md, docs/) names one of this project's issue
/// numbers: they mean nothing to a reader, and "Not yet: … issue 26" outlived what it said. An
/// upstream project's issue (librdkafka's) may be cited. The CHANGELOG names them on purpose.
#[test]
fn the_documentation_names_no_issue_numbers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<_> = ["README.md", "CONTRIBUTING.md"].iter().map(|p| root.join(p)).collect();
    pages.extend(
        std::fs::read_dir(root.join("docs"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md")),
    );
    let names_an_issue = |line: &str| {
        let lower = line.to_lowercase();
        let words: Vec<&str> = lower
            .split(|c: char| c.is_whitespace() || "(),;:.".contains(c))
            .collect();
        // a number, however it is dressed: `26`, `#24**`, `28's`
        let numbered = |w: &str| {
            w.trim_start_matches(['#', '*'])
                .starts_with(|c: char| c.is_ascii_digit())
        };
        let after_issue = words.windows(2).any(|w| w[0] == "issue" && numbered(w[1]));
        let hash = words.iter().any(|w| w.starts_with('#') && numbered(w));
        (after_issue || hash) && !lower.contains("librdkafka")
    };
    assert!(names_an_issue(
        "Not yet: instances coordinated by Kafka's group protocol — issue 26."
    ));
    assert!(names_an_issue("finding 2.1 of issue #24 (records lost)"));
    assert!(names_an_issue("compares a run with issue 28's targets"));
    assert!(names_an_issue(
        "- on its first run, **finding 2.1 of issue #24** (records lost)"
    ));
    assert!(!names_an_issue("librdkafka issue 4057 reports 2.7M/s"));
    let found: Vec<String> = pages
        .iter()
        .flat_map(|page| {
            let text = std::fs::read_to_string(page).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| names_an_issue(l))
                .map(|(i, l)| format!("{}:{}: {l}", page.display(), i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(found.is_empty(), "issue numbers in the docs:\n{}", found.join("\n"));
}
