# The verification report's browser test (tests/unit/test_verify_report_browser.py) renders the HTML
# report in Debian's chromium, driven by playwright (pinned in requirements.txt) without playwright's own
# browser download. `make unit` depends on `browser`, which installs the package when chromium is missing.
# Without recommends: those pull in systemd, avahi and CUPS; a font is named so that the page has text.
BROWSER_PACKAGES := chromium fonts-dejavu-core

.PHONY: browser
browser: ## install Debian's chromium for the report's browser test when it is missing (apt-get, about 125 MB)
	@if command -v chromium >/dev/null 2>&1; then \
	  echo "browser: $$(command -v chromium) ($$(chromium --version 2>/dev/null | head -n 1))"; \
	else \
	  mkdir -p $(ROOT)/.build; as_root=; [ "$$(id -u)" = 0 ] || as_root=sudo; \
	  echo "browser: chromium is missing; installing Debian's: $${as_root:+$$as_root }apt-get update &&" \
	    "$${as_root:+$$as_root }apt-get install -y --no-install-recommends $(BROWSER_PACKAGES)"; \
	  $$as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null && \
	  $$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	    $(BROWSER_PACKAGES) >$(ROOT)/.build/browser-install.log 2>&1 || \
	    { tail -n 20 $(ROOT)/.build/browser-install.log; echo "browser: apt-get install failed (log above)"; exit 1; }; \
	  echo "browser: installed $$(chromium --version 2>/dev/null | head -n 1)"; \
	fi
