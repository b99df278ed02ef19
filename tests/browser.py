"""Headless chromium for the tests of pages that must work offline (`view.html`, the interactive
views): find the browser, run it with the network cut, and record what a page tried to load.

`offline_loads` copies a page with a probe script first in its `<head>`: it records every
Content-Security-Policy violation of a load (a URL the page's policy blocked) and every
resource the page requested, fetched or not (the Resource Timing entries), and writes them
into the DOM after the page settled, which `--dump-dom` returns. Chromium runs with every
host name mapped to nothing, so even a load the policy allowed could not reach the network.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
SKIP_REASON = ("no headless chromium on PATH (Debian: apt-get install chromium; .ci/run "
               "installs it when run as root), so the page's script is not run here")

PROBE = """<script>
(function () {
  var seen = [];
  document.addEventListener("securitypolicyviolation", function (e) {
    // loads only: not "eval", "wasm-eval" or "inline", which the policy refuses but which
    // fetch nothing (CircuitsVis's bundled TensorFlow.js tries WebAssembly, then falls back)
    if (e.blockedURI.indexOf(":") > 0) {
      seen.push("blocked " + e.blockedURI + " (" + e.violatedDirective + ")");
    }
  });
  window.addEventListener("load", function () {
    setTimeout(function () {
      performance.getEntriesByType("resource").forEach(function (r) {
        if (r.name.indexOf("data:") !== 0) { seen.push("requested " + r.name); }
      });
      var out = document.createElement("pre");
      out.id = "cel-loads";
      out.textContent = JSON.stringify(seen);
      document.body.appendChild(out);
    }, 1500);
  });
})();
</script>"""


def chromium() -> str | None:
    """The chromium executable (`$WORKBENCH_CHROMIUM` first), or None."""
    found = os.environ.get("WORKBENCH_CHROMIUM")
    for name in CHROMIUM_NAMES:
        found = found or shutil.which(name)
    return found


def headless(exe: str, tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess:
    """Run chromium headless on `url`, offline in effect (no background networking, no sync,
    no component updates, every host name resolving to nothing; a page's own policy may
    forbid every load besides)."""
    args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--host-resolver-rules=MAP * ~NOTFOUND",
            f"--user-data-dir={tmp_path / 'chromium-profile'}", *extra, url]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return proc


def offline_loads(exe: str, tmp_path: Path, page: Path) -> tuple[list[str], str]:
    """`(loads, dom)`: what `page` tried to load from anywhere but `data:` URIs (blocked by its
    policy, or fetched), and its DOM once its scripts ran (virtual time, so timers fire)."""
    text = page.read_text(encoding="utf-8")
    probed = tmp_path / f"probed-{page.name}"
    head = re.search(r"<head[^>]*>", text)
    assert head is not None, f"{page} has no <head>"
    probed.write_text(text[:head.end()] + PROBE + text[head.end():], encoding="utf-8")
    dom = headless(exe, tmp_path, probed.as_uri(), "--virtual-time-budget=10000",
                   "--dump-dom").stdout
    found = re.search(r"<pre id=\"cel-loads\">(.*?)</pre>", dom, re.S)
    assert found is not None, "the probe did not report (the page's scripts did not run)"
    raw = found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace(
        "&lt;", "<").replace("&gt;", ">")
    return json.loads(raw), dom
