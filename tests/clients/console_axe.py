"""The console's accessibility check: axe-core (installed from npm into target/test-npm by
`scripts/test --setup`; its path in PUNCTUAL_TEST_AXE) injected into the page under test through
selenium's execute_script, never served by punctual, then run on what the page shows against
WCAG 2.1 A and AA (labels, contrast, names, keyboard reach). A violation fails the step, naming
the rule and the elements."""

import json
import os

TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]


def source():
    path = os.environ.get("PUNCTUAL_TEST_AXE", "")
    if not path or not os.path.isfile(path):
        raise AssertionError(
            f"axe-core is not at PUNCTUAL_TEST_AXE={path!r}: run the tests with scripts/test, "
            "which installs it into target/test-npm")
    with open(path, encoding="utf-8") as f:
        return f.read()


AXE = source()

RUN = """
const done = arguments[arguments.length - 1];
axe.run(document, {runOnly: {type: "tag", values: %s}, resultTypes: ["violations"]})
  .then((r) => done(JSON.stringify({
     passes: r.passes.length,
     violations: r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,
       nodes: v.nodes.slice(0, 5).map((n) => n.target.join(" ") + ": " + n.failureSummary)}))})))
  .catch((e) => done(JSON.stringify({error: String(e)})));
""" % json.dumps(TAGS)


def check(driver, page):
    """axe on what `driver` shows now; raises with every violation, prints one line."""
    if not driver.execute_script("return typeof window.axe === 'object'"):
        driver.execute_script(AXE)
    driver.set_script_timeout(60)
    out = json.loads(driver.execute_async_script(RUN))
    if "error" in out:
        raise AssertionError(f"axe on {page}: {out['error']}")
    if out["violations"]:
        lines = [f"{v['id']} ({v['impact']}): {v['help']}\n    " + "\n    ".join(v["nodes"])
                 for v in out["violations"]]
        raise AssertionError(f"axe on {page}: {len(lines)} violation(s)\n" + "\n".join(lines))
    print(f"axe {page}: no violation of {', '.join(TAGS)}", flush=True)
