//! `docs/openapi.yaml` as a checker: loads the document (YAML, read with `yaml-rust2` and
//! turned into JSON), finds the operation a request reached, and checks an answer against it
//! — status documented, required headers present and valid, content type and body valid
//! against the schema given for that status (JSON Schema 2020-12, with `jsonschema`).
//!
//! Every check remembers what it covered, so a test can demand that each documented status
//! was produced by the real server.
#![allow(dead_code)]

use crate::api_support::Resp;
use serde_json::{Map, Number, Value};
use std::collections::BTreeSet;
use std::sync::Mutex;
use yaml_rust2::{Yaml, YamlLoader};

/// The path of the document, from the crate root.
pub const DOC: &str = "docs/openapi.yaml";

/// What one check covered: the path template, the method (`*` for an unlisted one), the
/// status, and the error codes its body carried (items of a batch included).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Covered {
    pub path: String,
    pub method: String,
    pub status: u16,
}

pub struct Spec {
    pub doc: Value,
    covered: Mutex<BTreeSet<Covered>>,
    codes: Mutex<BTreeSet<String>>,
}

/// YAML to JSON. Mapping keys must be strings (integers, such as unquoted statuses, are
/// turned into their text); anything JSON cannot hold is an error.
pub fn yaml_to_json(y: &Yaml) -> Result<Value, String> {
    Ok(match y {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::Number((*i).into()),
        Yaml::Real(s) => s
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{s:?} is not a finite number"))?,
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => {
            Value::Array(items.iter().map(yaml_to_json).collect::<Result<_, _>>()?)
        }
        Yaml::Hash(h) => {
            let mut m = Map::new();
            for (k, v) in h {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    other => return Err(format!("mapping key {other:?} is not a string")),
                };
                if m.insert(key.clone(), yaml_to_json(v)?).is_some() {
                    return Err(format!("mapping key {key:?} appears twice"));
                }
            }
            Value::Object(m)
        }
        Yaml::Alias(_) | Yaml::BadValue => return Err(format!("unsupported YAML node {y:?}")),
    })
}

/// The methods an OpenAPI path item may hold.
pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

impl Spec {
    pub fn load() -> Spec {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{DOC}: {e}"));
        Spec::parse(&text)
    }

    pub fn parse(text: &str) -> Spec {
        let docs = YamlLoader::load_from_str(text).unwrap_or_else(|e| panic!("{DOC}: {e}"));
        assert_eq!(docs.len(), 1, "{DOC} must hold exactly one YAML document");
        let doc = yaml_to_json(&docs[0]).unwrap_or_else(|e| panic!("{DOC}: {e}"));
        Spec {
            doc,
            covered: Mutex::new(BTreeSet::new()),
            codes: Mutex::new(BTreeSet::new()),
        }
    }

    /// Follows a local `$ref` (`#/a/b`), or panics naming it.
    pub fn resolve<'a>(&'a self, v: &'a Value) -> &'a Value {
        match v.get("$ref").and_then(Value::as_str) {
            Some(r) => {
                let target = r
                    .strip_prefix('#')
                    .and_then(|p| self.doc.pointer(p))
                    .unwrap_or_else(|| panic!("$ref {r:?} does not resolve in {DOC}"));
                self.resolve(target)
            }
            None => v,
        }
    }

    /// A validator for `schema`, a schema of the document: the document's `components` go
    /// along, so that its `#/components/...` references resolve.
    pub fn validator(&self, schema: &Value) -> jsonschema::Validator {
        let mut root = match schema {
            Value::Object(m) => m.clone(),
            Value::Bool(true) => Map::new(),
            other => panic!("not a schema object: {other}"),
        };
        root.insert("components".into(), self.doc["components"].clone());
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .should_validate_formats(true)
            .build(&Value::Object(root))
            .unwrap_or_else(|e| panic!("schema {schema} does not compile: {e}"))
    }

    /// Validates `instance` against the named schema of `components/schemas`.
    pub fn errors_for(&self, schema_name: &str, instance: &Value) -> Vec<String> {
        let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{schema_name}") });
        let v = self.validator(&schema);
        v.iter_errors(instance)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect()
    }

    /// The documented path template that `path` (query left off) falls under.
    pub fn template_for(&self, path: &str) -> Option<String> {
        let path = path.split('?').next().unwrap_or(path);
        let segs: Vec<&str> = path.split('/').collect();
        let paths = self.doc["paths"].as_object()?;
        paths
            .keys()
            .find(|t| {
                let ts: Vec<&str> = t.split('/').collect();
                ts.len() == segs.len()
                    && ts.iter().zip(&segs).all(|(t, s)| {
                        if t.starts_with('{') && t.ends_with('}') {
                            !s.is_empty()
                        } else {
                            t == s
                        }
                    })
            })
            .cloned()
    }

    /// The methods a path template documents, in capitals.
    pub fn methods_of(&self, template: &str) -> BTreeSet<String> {
        let item = &self.doc["paths"][template];
        METHODS
            .iter()
            .filter(|m| item.get(**m).is_some())
            .map(|m| m.to_uppercase())
            .collect()
    }

    /// Every (path, method, status) the document lists; `*` stands for unlisted methods.
    pub fn documented(&self) -> BTreeSet<Covered> {
        let mut out = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().into_iter().flatten() {
            let ops = METHODS
                .iter()
                .map(|m| (m.to_uppercase(), item.get(*m)))
                .chain([("*".to_string(), item.get("x-unlisted-methods"))]);
            for (method, op) in ops {
                let Some(responses) = op.and_then(|o| o["responses"].as_object()) else {
                    continue;
                };
                for status in responses.keys() {
                    let status = status.parse().unwrap_or_else(|_| {
                        panic!("{method} {path}: response key {status:?} is not a status")
                    });
                    out.insert(Covered {
                        path: path.clone(),
                        method: method.clone(),
                        status,
                    });
                }
            }
        }
        out
    }

    pub fn covered(&self) -> BTreeSet<Covered> {
        self.covered.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Error codes seen in answers (batch items included).
    pub fn codes_seen(&self) -> BTreeSet<String> {
        self.codes.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Checks the answer `r` to `method path` against the document; panics with what is
    /// wrong. Returns the body as JSON (`Null` when empty or not JSON).
    pub fn check(&self, method: &str, path: &str, r: &Resp) -> Value {
        let what = format!("{method} {path} → {}", r.status);
        let template = self
            .template_for(path)
            .unwrap_or_else(|| panic!("{what}: no path of {DOC} matches"));
        let item = &self.doc["paths"][&template];
        let (op, shown) = match item.get(method.to_lowercase()) {
            Some(op) => (op, method.to_string()),
            None => (
                item.get("x-unlisted-methods")
                    .unwrap_or_else(|| panic!("{what}: {template} lists no such method")),
                "*".to_string(),
            ),
        };
        let response = op["responses"]
            .get(r.status.to_string())
            .map(|v| self.resolve(v))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: status {} is not documented for {shown} {template}; body {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                )
            });
        self.check_headers(&what, &template, response, r);
        let body = self.check_content(&what, response, r);
        if let Ok(mut c) = self.covered.lock() {
            c.insert(Covered {
                path: template,
                method: shown,
                status: r.status,
            });
        }
        if let Ok(mut codes) = self.codes.lock() {
            codes.extend(error_codes(&body));
        }
        body
    }

    fn check_headers(&self, what: &str, template: &str, response: &Value, r: &Resp) {
        for (name, h) in response["headers"].as_object().into_iter().flatten() {
            let h = self.resolve(h);
            let Some(value) = r.header(name) else {
                assert!(
                    h["required"] != Value::Bool(true),
                    "{what}: the documented header {name} is missing; headers {:?}",
                    r.headers
                );
                continue;
            };
            let schema = self.resolve(&h["schema"]);
            let instance = match schema["type"].as_str() {
                Some("integer") => value.parse::<i64>().map(Value::from).unwrap_or_else(|_| {
                    panic!("{what}: header {name}: {value:?} is not an integer")
                }),
                _ => Value::String(value.to_string()),
            };
            let errors: Vec<String> = self
                .validator(schema)
                .iter_errors(&instance)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{what}: header {name}: {value:?}: {errors:?}"
            );
            if name.eq_ignore_ascii_case("allow") {
                let allowed: BTreeSet<String> =
                    value.split(',').map(|m| m.trim().to_string()).collect();
                assert_eq!(
                    allowed,
                    self.methods_of(template),
                    "{what}: Allow names other methods than {DOC} lists for {template}"
                );
            }
        }
    }

    fn check_content(&self, what: &str, response: &Value, r: &Resp) -> Value {
        let Some(content) = response["content"].as_object() else {
            assert!(
                r.body.is_empty(),
                "{what}: documented without a body, but it has {:?}",
                String::from_utf8_lossy(&r.body)
            );
            return Value::Null;
        };
        let ct = r.header("content-type").unwrap_or("");
        let (media, entry) = content
            .iter()
            .find(|(m, _)| m.eq_ignore_ascii_case(ct))
            .unwrap_or_else(|| {
                panic!(
                    "{what}: content type {ct:?} is not documented (documented: {:?})",
                    content.keys().collect::<Vec<_>>()
                )
            });
        let text = std::str::from_utf8(&r.body)
            .unwrap_or_else(|e| panic!("{what}: body is not UTF-8: {e}"));
        let body = if media.starts_with("application/json") {
            serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("{what}: body is not JSON ({e}): {text:?}"))
        } else {
            Value::String(text.to_string())
        };
        let errors: Vec<String> = self
            .validator(&entry["schema"])
            .iter_errors(&body)
            .map(|e| format!("{e} (at {})", e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{what}: body does not match the documented schema: {errors:#?}\nbody: {text:.2000}"
        );
        if media.starts_with("application/json") {
            body
        } else {
            Value::Null
        }
    }
}

/// The `error.code`s in a body: an error body's, or those of a batch's items.
fn error_codes(body: &Value) -> Vec<String> {
    let mut out: Vec<String> = body["error"]["code"]
        .as_str()
        .map(str::to_string)
        .into_iter()
        .collect();
    for item in body["results"].as_array().into_iter().flatten() {
        out.extend(item["error"]["code"].as_str().map(str::to_string));
    }
    out
}

/// Every `$ref` in `v`, with the JSON pointer where it stands.
pub fn refs(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                if k == "$ref" {
                    out.push((at.to_string(), child.as_str().unwrap_or("").to_string()));
                } else {
                    refs(child, &here, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                refs(child, &format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// The routes of the router (`route()` in `src/api/routes.rs`), read from its match arms:
/// `(Some("v1"), Some("timers"), Some(t), None, _)` is `/v1/timers/{}`.
pub fn router_routes(source: &str) -> BTreeSet<String> {
    let body = source
        .split_once("fn route(")
        .and_then(|(_, rest)| rest.split_once("\n}\n"))
        .map(|(body, _)| body)
        .unwrap_or_else(|| panic!("src/api/routes.rs has no `fn route(` ending in a `}}` line"));
    let mut routes = BTreeSet::new();
    for line in body.lines().map(str::trim) {
        if !line.starts_with('(') || !line.contains("=>") {
            continue;
        }
        let mut depth = 0;
        let mut end = 0;
        for (i, c) in line.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        end = i;
                        break;
                    }
                }
                _ => {}
            }
        }
        let mut path = String::new();
        for part in line[1..end].split(", ").map(str::trim) {
            match part.strip_prefix("Some(").and_then(|p| p.strip_suffix(')')) {
                Some(lit) if lit.starts_with('"') => {
                    path.push('/');
                    path.push_str(lit.trim_matches('"'));
                }
                Some(_) => path.push_str("/{}"),
                None => break,
            }
        }
        routes.insert(path);
    }
    routes
}

/// `/v1/timers/{tenant}` → `/v1/timers/{}`.
pub fn shape(template: &str) -> String {
    template
        .split('/')
        .map(|s| if s.starts_with('{') { "{}" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}
