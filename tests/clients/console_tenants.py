"""Drives the console's Tenants page and a tenant's page in Debian's chromium, as an operator
would: signed in by keyboard alone with the metrics token, every tenant is listed with its
figures from /metrics, and a tenant's timers (paged, by prefix), schedules with their next
occurrences, queue and dead letters read; signed in with a tenant's token, that tenant alone,
and another tenant's page refused by the API. axe-core checks each page (console_axe.py). Run
by tests/console.rs, which starts punctual and a webhook receiver, makes 120 pending timers
cart-001..cart-120, a dead letter fail-1, a queued message and a schedule nightly for TENANT
and a timer for OTHER, and passes:

    console_tenants.py BASE_URL SCREENSHOT_DIR METRICS_TOKEN TENANT TENANT_TOKEN OTHER
"""

import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
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


def until(what, f, timeout=LONG):
    try:
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


def rows(table, attr):
    return [r.get_attribute(attr)
            for r in driver.find_elements(By.CSS_SELECTOR, f"#{table} tbody tr")]


def tenant_cells(name):
    row = driver.find_element(By.CSS_SELECTOR, f'#tenant-table tbody tr[data-tenant="{name}"]')
    return [c.text for c in row.find_elements(By.TAG_NAME, "td")]


def click(what, css):
    """Clicks `css`, looked up again should the page redraw it under the click (the Tenants
    table is redrawn every 2 s)."""
    until(what, lambda: driver.find_element(By.CSS_SELECTOR, css).click() or True)


def sign_in_by_keyboard(token, own=""):
    """The token, Tab to the tenant field, Enter: no pointer."""
    driver.get(base + "/console")
    until("the sign-in form", lambda: by_id("login").is_displayed())
    box = by_id("token")
    until("the token field focused", lambda: driver.switch_to.active_element == box)
    box.send_keys(token, Keys.TAB)
    assert driver.switch_to.active_element.get_attribute("id") == "own-tenant"
    driver.switch_to.active_element.send_keys(own, Keys.ENTER)
    until("signed in", lambda: by_id("nav").is_displayed())


def open_tenants():
    by_id("nav-tenants").click()
    until("the Tenants page", lambda: by_id("tenants").is_displayed())


# ---- the metrics token: every tenant ------------------------------------------------------
sign_in_by_keyboard(metrics_token)
open_tenants()
until("both tenants listed", lambda: {tenant, other} <= set(rows("tenant-table", "data-tenant")))
until("a window of readings", lambda: "over the last" in by_id("tenants-window").text)
cells = until("shop's deliveries counted", lambda: (c := tenant_cells(tenant)) and "%" in c[4] and c)
print("tenants, shop:", cells, flush=True)
assert "of 1000" in cells[2], cells  # quota use
assert "(2 of 3)" in cells[4], cells  # success: paid-1 and paid-2 of three attempts
assert cells[5].startswith("≤") and cells[6].startswith("≤"), cells  # lateness p50, p99
assert cells[7] == "1", cells  # fail-1, a dead letter
assert "queued" in cells[8], cells
assert "failed: 5xx 1" in cells[9], cells
until("other's quota use", lambda: "of 1000" in tenant_cells(other)[2])
assert driver.find_elements(By.CSS_SELECTOR, "#tenant-table svg.bar[role=img][aria-label]")
shot("tenants")
console_axe.check(driver, "tenants")

# A tenant's page: queue, timers paged and by prefix, schedules with next occurrences.
click("the tenant's link", f'#tenant-table tr[data-tenant="{tenant}"] a')
until("the tenant's page", lambda: by_id("tenant-page").is_displayed())
assert by_id("tenant-title").text == f"Tenant {tenant}", by_id("tenant-title").text
page1 = until("a page of 50 timers", lambda: len(k := rows("timers", "data-key")) == 50 and k)
assert page1[0] == "cart-001" and page1[-1] == "cart-050", page1
until("nightly's next occurrences",
      lambda: len(driver.find_element(By.CSS_SELECTOR, '#schedules tr[data-key="nightly"] .next')
                  .text.split(", ")) == 5)
nxt = until("nightly's row", lambda: driver.find_element(
    By.CSS_SELECTOR, '#schedules tr[data-key="nightly"] .next').text)
print("nightly next:", nxt, flush=True)
assert "T02:30:00" in nxt, nxt
queue = until("the queue", lambda: visible_text("queue"))
print("queue:", queue.replace("\n", " | "), flush=True)
shot("tenant")
console_axe.check(driver, "a tenant")

by_id("timers-more").click()
until("page 2", lambda: rows("timers", "data-key")[:1] == ["cart-051"])
by_id("timers-more").click()
until("page 3", lambda: rows("timers", "data-key")[:1] == ["cart-101"])
# The last page: cart-101..cart-120, and queued-1, a message in the queue until received.
assert rows("timers", "data-key")[-2:] == ["cart-120", "queued-1"], rows("timers", "data-key")
assert not by_id("timers-more").is_displayed(), "the last page has no next"
by_id("timers-first").click()
until("page 1 again", lambda: rows("timers", "data-key")[:1] == ["cart-001"])
box = by_id("prefix")
box.send_keys("cart-11", Keys.ENTER)
until("the prefix's timers", lambda: rows("timers", "data-key") == [f"cart-11{d}" for d in range(10)])

# Its dead letters, read (not acted on) with the metrics token.
by_id("tenant-dead").click()
until("the dead-letter page", lambda: by_id("dead").is_displayed())
until("fail-1 listed", lambda: rows("letters", "data-key") == ["fail-1"])
assert by_id("tenant").get_attribute("value") == tenant
by_id("signout").click()
until("signed out", lambda: by_id("login").is_displayed())

# ---- a tenant's token: its own tenant only ------------------------------------------------
sign_in_by_keyboard(tenant_token, tenant)
open_tenants()
until("its own tenant only", lambda: rows("tenant-table", "data-tenant") == [tenant])
assert other not in by_id("tenants").text
shot("tenants-own")
console_axe.check(driver, "tenants, a tenant's token")
click("the tenant's link", f'#tenant-table tr[data-tenant="{tenant}"] a')
until("its timers", lambda: len(rows("timers", "data-key")) == 50)

# Another tenant's page: the API refuses the token; nothing of it is shown.
driver.get(base + f"/console#tenant/{other}")
until("the other tenant's page", lambda: by_id("tenant-title").text == f"Tenant {other}")
refused = until("the reads refused", lambda: visible_text("tenant-error"))
print("another tenant's page:", refused, flush=True)
assert "401" in refused, refused
assert rows("timers", "data-key") == [] and rows("schedules", "data-key") == []
shot("tenant-refused")
console_axe.check(driver, "a tenant, refused")

logs = driver.get_log("browser")
broken = [entry["message"] for entry in logs
          if "Content Security Policy" in entry["message"] or "Uncaught" in entry["message"]]
assert not broken, broken
driver.quit()
print("console tenants: every step passed", flush=True)
