//! The operations files under `deploy/`: the Prometheus alerting rules and the Grafana
//! dashboard. Each names only metrics punctual exports (read from the exporter's source, so a
//! renamed metric breaks this test, not a dashboard in production), and the rules pass
//! `promtool check rules` where promtool is installed (`.ci/run` installs it).

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Metric family names declared in the exporter (`src/api/metrics/`), as Prometheus shows
/// them: counters gain `_total`, histograms `_bucket`, `_sum`, `_count`.
fn exported() -> BTreeSet<String> {
    let mut src = String::new();
    for entry in std::fs::read_dir(root().join("src/api/metrics")).expect("exporter sources") {
        let path = entry.expect("exporter source").path();
        src.push_str(&std::fs::read_to_string(path).expect("exporter source"));
    }
    let mut names = BTreeSet::new();
    for piece in src.split('"').skip(1).step_by(2) {
        if piece.starts_with("punctual_")
            && piece.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            names.insert(piece.to_string());
        }
    }
    assert!(
        names.len() > 20,
        "the exporter's names were not found: {names:?}"
    );
    names
}

/// Every `punctual_…` name in `text`.
fn referenced(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("punctual_") {
        let name: String = rest[i..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        rest = &rest[i + name.len()..];
        out.insert(name);
    }
    out
}

/// Whether `name` is an exported family, or one of its series (`_total`, `_bucket`, …).
fn known(name: &str, exported: &BTreeSet<String>) -> bool {
    exported.contains(name)
        || ["_total", "_bucket", "_sum", "_count", "_info"]
            .iter()
            .any(|suffix| {
                name.strip_suffix(suffix)
                    .is_some_and(|base| exported.contains(base))
            })
}

#[test]
fn alert_rules_are_well_formed_and_name_only_exported_metrics() {
    let path = root().join("deploy/prometheus/alerts.yml");
    let text = std::fs::read_to_string(&path).expect("alerts.yml");
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).expect("alerts.yml is YAML");
    let groups = docs[0]["groups"].as_vec().expect("groups");
    let mut alerts = BTreeSet::new();
    for rule in groups
        .iter()
        .flat_map(|g| g["rules"].as_vec().into_iter().flatten())
    {
        let name = rule["alert"]
            .as_str()
            .expect("every rule is an alert with a name");
        assert!(alerts.insert(name.to_string()), "alert {name} twice");
        assert!(rule["expr"].as_str().is_some(), "{name}: no expr");
        assert!(
            matches!(
                rule["labels"]["severity"].as_str(),
                Some("page" | "warning")
            ),
            "{name}: severity page or warning"
        );
        for a in ["summary", "description"] {
            assert!(rule["annotations"][a].as_str().is_some(), "{name}: no {a}");
        }
    }
    // What an operator of punctual needs to be told.
    for must in [
        "PunctualLatenessP99High",
        "PunctualStoreUnavailable",
        "PunctualClockStep",
        "PunctualClockFallback",
        "PunctualRingNearlyFull",
        "PunctualTenantNearQuota",
        "PunctualExecutorRunnableSleeps",
    ] {
        assert!(alerts.contains(must), "missing alert {must}");
    }
    let exported = exported();
    let unknown: Vec<_> = referenced(&text)
        .into_iter()
        .filter(|n| !known(n, &exported))
        .collect();
    assert!(
        unknown.is_empty(),
        "alerts name metrics punctual does not export: {unknown:?}"
    );
}

/// `promtool check rules` on the rules, and `promtool test rules` on their unit tests
/// (`alerts_test.yml`: when an alert fires and what it says).
#[test]
fn alert_rules_pass_promtool_where_it_is_installed() {
    for (what, file) in [("check", "alerts.yml"), ("test", "alerts_test.yml")] {
        let path = root().join("deploy/prometheus").join(file);
        match std::process::Command::new("promtool")
            .args([what, "rules"])
            .arg(&path)
            .output()
        {
            Ok(out) => assert!(
                out.status.success(),
                "promtool {what} rules {file} failed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            // Not installed: the structural check above still runs. Said loudly, never silently.
            Err(e) => {
                eprintln!(
                    "promtool not found ({e}): install Debian's `prometheus` package to run this check"
                );
                return;
            }
        }
    }
}

#[test]
fn the_dashboard_is_valid_json_and_charts_only_exported_metrics() {
    let text = std::fs::read_to_string(root().join("deploy/grafana/punctual.json"))
        .expect("punctual.json");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    let mut titles = Vec::new();
    for p in panels {
        let title = p["title"].as_str().expect("every panel has a title");
        titles.push(title.to_lowercase());
        let targets = p["targets"].as_array().expect("every panel has queries");
        assert!(
            targets.iter().all(|t| t["expr"].as_str().is_some()),
            "{title}: a query without expr"
        );
    }
    for topic in [
        "lateness",
        "pending",
        "fire rate",
        "store",
        "clock",
        "ring",
        "http",
        "stream",
        "wheel",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(topic)),
            "no panel about {topic}: {titles:?}"
        );
    }
    let exported = exported();
    let unknown: Vec<_> = referenced(&text)
        .into_iter()
        .filter(|n| !known(n, &exported))
        .collect();
    assert!(
        unknown.is_empty(),
        "the dashboard charts metrics punctual does not export: {unknown:?}"
    );
}
