use super::*;

#[test]
fn the_page_and_its_assets_are_found_by_name() {
    for path in ["/console", "/console/"] {
        let (ty, bytes) = asset(path).expect("the page");
        assert!(ty.starts_with("text/html"));
        assert!(bytes.starts_with(b"<!doctype html>"));
    }
    let (ty, _) = asset("/console/console.js").expect("the script");
    assert!(ty.starts_with("text/javascript"));
    let (ty, _) = asset("/console/console.css").expect("the style");
    assert!(ty.starts_with("text/css"));
}

#[test]
fn other_paths_name_no_asset() {
    for path in [
        "/consoles",
        "/console//",
        "/console/nope.js",
        "/console/console.js/",
        "/console/../metrics",
        "/console/%2e%2e/metrics",
        "/console/console.css?x",
        "/",
        "",
    ] {
        assert!(asset(path).is_none(), "{path:?}");
    }
}

#[test]
fn the_page_runs_no_inline_script_or_style() {
    let page = std::str::from_utf8(INDEX).expect("utf-8");
    assert!(!page.contains("<script>"), "an inline script");
    assert!(!page.contains("<style"), "an inline style");
    assert!(!page.contains(" style="), "an inline style attribute");
    assert!(!has_handler(page), "an inline event handler");
    assert!(!POLICY.contains("unsafe-inline"));
    for (_, _, bytes) in ASSETS {
        let text = std::str::from_utf8(bytes).expect("utf-8");
        assert!(
            !text.contains("innerHTML"),
            "text goes in as text, never as HTML"
        );
        let text = text.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !text.contains("http://") && !text.contains("https://"),
            "no other origin"
        );
    }
}

/// Whether `page` has an attribute `on…=` (an event handler).
fn has_handler(page: &str) -> bool {
    page.match_indices(" on").any(|(i, _)| {
        let name: String = page[i + 3..]
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect();
        !name.is_empty() && page[i + 3 + name.len()..].starts_with('=')
    })
}

#[test]
fn an_event_handler_is_seen() {
    assert!(has_handler("<b onclick=\"x()\">"));
    assert!(!has_handler("<b>on one line</b>"));
}

#[test]
fn the_console_paths_are_its_own() {
    for path in ["/console", "/console/", "/console/x", "/console/a/b"] {
        assert!(is_console(path), "{path:?}");
    }
    for path in ["/consoles", "/consolex/a", "/v1/console", "/", ""] {
        assert!(!is_console(path), "{path:?}");
    }
}

#[test]
fn every_script_and_sheet_the_page_names_is_served() {
    let page = std::str::from_utf8(INDEX).expect("utf-8");
    let named: Vec<&str> = page
        .split("\"/console/")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(named.len() >= 5, "{named:?}");
    for name in named {
        assert!(asset(&format!("/console/{name}")).is_some(), "{name}");
    }
}
