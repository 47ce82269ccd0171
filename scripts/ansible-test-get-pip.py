"""Stand-in for the get-pip.py bootstrap script that ansible-test downloads from a CI
file host this machine cannot reach (only package registries are reachable here).

ansible-test runs it inside each fresh sanity virtualenv with pip-install arguments
plus get-pip's own --no-setuptools/--no-wheel switches. It bootstraps the pip that
Python bundles (ensurepip), then lets that pip install the requested pip version from
PyPI, so the result is the same pip version ansible-test asked for.
"""

import ensurepip
import os
import runpy
import ssl
import sys

ensurepip.bootstrap(upgrade=True)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
# ansible-test runs this with PATH, HOME and LC_ALL only; the bundled pip then misses the
# site's CA settings, so name the system bundle explicitly.
for bundle in (ssl.get_default_verify_paths().cafile, "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"):
    if bundle and os.path.exists(bundle):
        args = ["--cert", bundle] + args
        break
sys.argv = ["pip", "install"] + args
runpy.run_module("pip", run_name="__main__", alter_sys=True)
