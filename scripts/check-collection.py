#!/usr/bin/env python
"""After `ansible-galaxy collection build` and `install`: the tarball ships no test, lab or
cache file, and `ansible-doc` renders every module and filter of the installed copy.

    check-collection.py DIST_DIR INSTALL_DIR
"""

import glob
import os
import subprocess
import sys
import tarfile

FORBIDDEN_PREFIXES = ("tests/", "bench/", "molecule/", ".build/", ".venv/", ".lab/", "artifacts/", ".ci/", ".git/")
FORBIDDEN_PARTS = ("__pycache__", ".pytest_cache")


def main(dist_dir, install_dir):
    tarballs = glob.glob(os.path.join(dist_dir, "gpuplatform-rke2-*.tar.gz"))
    if len(tarballs) != 1:
        sys.exit("expected one collection tarball in %s, found %s" % (dist_dir, tarballs))
    with tarfile.open(tarballs[0]) as tar:
        names = tar.getnames()
    bad = [n for n in names if n.startswith(FORBIDDEN_PREFIXES) or any(p in n for p in FORBIDDEN_PARTS)]
    if bad:
        sys.exit("the tarball ships files it must not: %s" % ", ".join(sorted(bad)[:20]))
    for required in ("plugins/module_utils/operand_model.py", "roles/gpu_operator/tasks/main.yml", "meta/runtime.yml"):
        if required not in names:
            sys.exit("the tarball lacks %s" % required)
    root = os.path.join(install_dir, "ansible_collections", "gpuplatform", "rke2")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=install_dir)
    env.pop("PYTHONPATH", None)
    ansible_doc = os.path.join(os.path.dirname(sys.executable), "ansible-doc")
    plugins = [("module", os.path.splitext(os.path.basename(p))[0])
               for p in glob.glob(os.path.join(root, "plugins", "modules", "*.py"))]
    # Filters are documented in sidecar YAML files, one per filter name.
    plugins += [("filter", os.path.splitext(os.path.basename(p))[0])
                for p in glob.glob(os.path.join(root, "plugins", "filter", "*.yml"))]
    for kind, name in sorted(plugins):
        fqcn = "gpuplatform.rke2." + name
        proc = subprocess.run([ansible_doc, "-t", kind, fqcn], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, check=False)
        if proc.returncode != 0 or fqcn not in proc.stdout:
            sys.exit("ansible-doc -t %s %s failed from the installed collection:\n%s" % (kind, fqcn, proc.stderr))
    checked = len(plugins)
    print("collection tarball: %d files, none from tests/lab/caches; ansible-doc rendered %d modules and filters "
          "from the installed copy" % (len(names), checked))


if __name__ == "__main__":
    main(*sys.argv[1:3])
