"""The lab's Helm chart repository: the GPU Operator chart, packaged by the real helm
under the release's version, served over plain HTTP on 127.0.0.1.

Why: the real helm-controller installs a HelmChart with ``repo:`` and ``chart:`` by
running ``helm repo add`` / ``helm install <name>/<chart> --version V`` in its Job.
The lab has no internet, so it serves the chart itself; a HelmChart with
``repo: http://127.0.0.1:<port>``, ``chart: gpu-operator``, ``version: v26.3.2`` then
goes through the same repository path a site's mirror does. The chart source says
``version: v1.0.0-devel`` (NVIDIA stamps the version at release), so it is packaged
with ``--version``/``--app-version``.

``ChartRepo(...).build(version, app_version)`` packages and indexes; the lab starts
``python -m tests.lab.chart_repo --dir <charts_dir> --port <port>`` and waits for
``serves(url)``. The server serves ``index.yaml`` and the ``.tgz`` files of one
folder and nothing else.
"""

import argparse
import http.server
import os
import subprocess
import sys
import urllib.error
import urllib.request

import yaml


def repo_url(port):
    """The URL a HelmChart's ``repo`` names for the lab's repository on ``port``."""
    return "http://127.0.0.1:%d" % port


def serves(url, timeout=2):
    """Whether the repository at ``url`` answers GET /index.yaml with a Helm index."""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/index.yaml", timeout=timeout) as response:
            index = yaml.safe_load(response.read())
    except (urllib.error.URLError, OSError, yaml.YAMLError):
        return False
    return isinstance(index, dict) and "entries" in index


class ChartRepo(object):
    """A chart folder, packaged under release versions into ``<workdir>/charts`` and
    indexed with absolute URLs under ``url`` (what ``helm repo index --url`` writes)."""

    def __init__(self, chart_dir, helm, workdir, url):
        self.chart_dir = chart_dir
        self.helm = helm
        self.charts_dir = os.path.join(workdir, "charts")
        self.url = url

    def build(self, version, app_version):
        """Packages the chart as ``version`` (app version ``app_version``) and re-indexes
        the folder (every package in it, so several versions can be offered); returns
        the package's path."""
        os.makedirs(self.charts_dir, exist_ok=True)
        self._helm("package", "--version", version, "--app-version", app_version, self.chart_dir,
                   "-d", self.charts_dir)
        self._helm("repo", "index", self.charts_dir, "--url", self.url)
        with open(os.path.join(self.chart_dir, "Chart.yaml")) as handle:
            name = yaml.safe_load(handle)["name"]
        return os.path.join(self.charts_dir, "%s-%s.tgz" % (name, version))

    def _helm(self, *args):
        result = subprocess.run((self.helm,) + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                universal_newlines=True, check=False)
        if result.returncode != 0:
            raise RuntimeError("helm %s failed (rc %d): %s" % (
                " ".join(args[:2]), result.returncode, result.stdout.strip()))


class RepoHandler(http.server.SimpleHTTPRequestHandler):
    """GET/HEAD of ``/index.yaml`` and ``/<name>.tgz`` in the served folder; 404 for
    anything else (no listings, no subfolders)."""

    def send_head(self):
        name = self.path.split("?", 1)[0].lstrip("/")
        if "/" in name or not (name == "index.yaml" or name.endswith(".tgz")):
            self.send_error(404, "not a chart repository file")
            return None
        return super().send_head()

    def guess_type(self, path):
        return "application/x-yaml" if path.endswith(".yaml") else "application/gzip"

    def log_message(self, format, *args):
        print("[chart-repo] %s" % (format % args), file=sys.stderr, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description="LAB-ONLY Helm chart repository on 127.0.0.1")
    parser.add_argument("--dir", required=True, help="folder holding index.yaml and the chart packages")
    parser.add_argument("--port", required=True, type=int)
    args = parser.parse_args(argv)
    directory = os.path.abspath(args.dir)
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", args.port), lambda *a, **kw: RepoHandler(*a, directory=directory, **kw))
    print("[chart-repo] serving %s on %s" % (directory, repo_url(args.port)), file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
