#!/usr/bin/env bash
# Install Debian's chromium for the browser check of tests/results/test_view.py, only where no chromium
# is on PATH and only when running as root with apt-get (a CI container). Never fails: without
# a browser that test is skipped with its reason, so this script always exits 0.
for name in chromium chromium-browser google-chrome; do
    if command -v "$name" >/dev/null 2>&1; then
        echo "install_browser: $name is on PATH; nothing to install"
        exit 0
    fi
done
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: no chromium, and not root with apt-get; the browser check will skip"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; then
    echo "install_browser: installed Debian's chromium"
else
    echo "install_browser: apt-get could not install chromium; the browser check will skip"
fi
exit 0
