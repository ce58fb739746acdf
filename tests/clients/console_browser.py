"""Drives the operator console (/console) in Debian's chromium through chromedriver, as an
operator would: sign in, read the overview, list, re-drive and discard dead letters, and meet
the API's refusals where a token reaches beyond what it may do (the metrics token reads a
tenant's dead letters but cannot re-drive them, a tenant's token cannot read /metrics or
another tenant). axe-core checks each page shown (console_axe.py). Run by tests/console.rs,
which starts punctual and the webhook receiver, makes the dead letters, and passes:

    console_browser.py BASE_URL SCREENSHOT_DIR METRICS_TOKEN TENANT TENANT_TOKEN OTHER

Each step prints one line; any failure raises (exit status 1) with what the page showed.
"""

import json
import os
import sys
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

import console_axe

base, shots, metrics_token, tenant, tenant_token, other = sys.argv[1:7]
os.makedirs(shots, exist_ok=True)

options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
            "--window-size=1280,800", "--no-first-run", "--disable-extensions"]:
    options.add_argument(arg)
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                       {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False})
LONG = 30


def shot(name):
    png = driver.get_screenshot_as_png()
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1280, 800), (width, height)
    with open(os.path.join(shots, name + ".png"), "wb") as f:
        f.write(png)
    print("screenshot", name, flush=True)


def put_timer(key, delay_ms):
    """A timer of the tenant, over the API as any client (not through the page)."""
    req = urllib.request.Request(
        f"{base}/v1/timers/{tenant}/{key}", method="PUT",
        data=json.dumps({"delay_ms": delay_ms}).encode(),
        headers={"Authorization": "Bearer " + tenant_token})
    with urllib.request.urlopen(req) as r:
        assert r.status == 201, r.status


def until(what, f, timeout=LONG):
    """f() until it is truthy; on time out, the page's text in the error."""
    try:
        # The page redraws its tables: an element read as it goes is looked up again.
        ignored = (NoSuchElementException, StaleElementReferenceException)
        wait = WebDriverWait(driver, timeout, poll_frequency=0.2, ignored_exceptions=ignored)
        return wait.until(lambda _d: f())
    except Exception as e:
        body = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"never: {what}\n--- the page said:\n{body}") from e


def by_id(i):
    return driver.find_element(By.ID, i)


def visible_text(i):
    el = by_id(i)
    return el.text if el.is_displayed() else ""


def sign_in(token):
    driver.get(base + "/console")
    until("the sign-in form", lambda: by_id("login").is_displayed())
    by_id("token").send_keys(token)
    by_id("signin").click()
    until("signed in", lambda: by_id("nav").is_displayed())


def sign_out():
    by_id("signout").click()
    until("signed out", lambda: by_id("login").is_displayed())


def letter_keys():
    return [r.get_attribute("data-key")
            for r in driver.find_elements(By.CSS_SELECTOR, "#letters tbody tr")]


def list_tenant(name):
    driver.get(base + "/console#dead")
    until("the dead-letter page", lambda: by_id("dead").is_displayed())
    box = by_id("tenant")
    box.clear()
    box.send_keys(name)
    by_id("load").click()


def row(key):
    return driver.find_element(By.CSS_SELECTOR, f'#letters tbody tr[data-key="{key}"]')


def redriven_state(key):
    rows = driver.find_elements(By.CSS_SELECTOR, f'#redriven tbody tr[data-key="{key}"] .state')
    return rows[0].text if rows else ""


# No token in the page yet: the sign-in form, and nothing else.
driver.get(base + "/console")
until("the sign-in form", lambda: by_id("login").is_displayed())
assert not by_id("overview").is_displayed()
shot("sign-in")
console_axe.check(driver, "sign-in")

# The metrics token: the overview. Once it reads the last interval (two readings), a timer
# fires, and its lateness shows in the window against the bound.
sign_in(metrics_token)
until("the overview", lambda: by_id("overview").is_displayed())
until("a window of readings", lambda: by_id("window").text.startswith("Fires and lateness over the last"))
all_row = lambda: driver.find_element(By.CSS_SELECTOR, '#shards tbody tr[data-shard="all"]')
put_timer("fired-now", 300)


def all_cells():
    cells = [c.text for c in all_row().find_elements(By.TAG_NAME, "td")]
    return cells if len(cells) == 8 and cells[3] not in ("", "0") else None


cells = until("the fire counted on the overview", all_cells)
print("overview all shards:", cells, flush=True)
assert cells[4].startswith("≤") and cells[5].startswith("≤"), cells  # p50, p99 shown
shards = driver.find_elements(By.CSS_SELECTOR, "#shards tbody tr")
assert len(shards) >= 3, "a row per shard and one for all"
verdict = until("a verdict", lambda: "bound" in by_id("verdict").text and by_id("verdict").text)
print("verdict:", verdict, flush=True)
until("the chart's bound line", lambda: driver.find_elements(By.CSS_SELECTOR, "#chart line.bound"))
shot("overview")
console_axe.check(driver, "overview")

# The metrics token reads every tenant's dead letters, and acts on none: the API refuses it
# a re-drive.
list_tenant(tenant)
until("order-1 listed for the metrics token", lambda: "order-1" in letter_keys())
row("order-1").find_element(By.CSS_SELECTOR, "button.redrive").click()
refused = until("the re-drive refused", lambda: visible_text("dead-error"))
print("metrics token re-driving:", refused, flush=True)
assert "401" in refused, refused
assert redriven_state("order-1") == "", "nothing was re-driven"
sign_out()

# A tenant's token: no /metrics, its own dead letters with their attempts and last error.
sign_in(tenant_token)
until("the overview refused", lambda: "401" in visible_text("overview-error"))
list_tenant(tenant)
until("order-1 listed", lambda: "order-1" in letter_keys())
cols = [c.text for c in row("order-1").find_elements(By.TAG_NAME, "td")]
print("dead letter:", cols, flush=True)
assert cols[1] == "2" and cols[2] == "HTTP 503", cols
shot("dead-letters")
console_axe.check(driver, "dead letters")

# Re-drive order-1, the receiver answering 2xx now: delivered, and gone from the list.
row("order-1").find_element(By.CSS_SELECTOR, "button.redrive").click()
until("order-1 delivered", lambda: redriven_state("order-1") == "delivered")
until("order-1 gone from the list", lambda: "order-1" not in letter_keys())
shot("re-driven")

# Another tenant's dead letters: refused by the API, nothing listed.
list_tenant(other)
refused = until("the listing refused", lambda: visible_text("dead-error"))
print("another tenant's letters:", refused, flush=True)
assert "401" in refused, refused
assert letter_keys() == [], letter_keys()
shot("other-tenant-refused")

# Its own tenant: discard one, re-drive every listed one after a confirmation.
list_tenant(tenant)
until("order-2 and order-3 listed", lambda: {"order-2", "order-3"} <= set(letter_keys()))
row("order-3").find_element(By.CSS_SELECTOR, "button.discard").click()
until("order-3 discarded", lambda: "order-3" not in letter_keys())
by_id("redrive-all").click()
until("the confirmation", lambda: by_id("confirm").is_displayed())
assert "1 listed" in by_id("confirm-text").text, by_id("confirm-text").text
shot("confirm-redrive-all")
console_axe.check(driver, "dead letters, confirming")
by_id("confirm-yes").click()
until("order-2 delivered", lambda: redriven_state("order-2") == "delivered")
until("an empty list", lambda: letter_keys() == [])
shot("all-re-driven")

# The page ran whole under its Content-Security-Policy: nothing refused, no script error.
logs = driver.get_log("browser")
broken = [entry["message"] for entry in logs
          if "Content Security Policy" in entry["message"] or "Uncaught" in entry["message"]]
assert not broken, broken
print("browser log:", len(logs), "entries, none a CSP refusal or a script error", flush=True)
driver.quit()
print("console: every step passed", flush=True)
