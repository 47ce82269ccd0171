"""Puts the collection on sys.path as ansible_collections.gpuplatform.rke2 (see docs/architecture.md)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLLECTIONS = os.path.join(ROOT, ".build", "collections")
_link = os.path.join(COLLECTIONS, "ansible_collections", "gpuplatform", "rke2")
if not os.path.exists(_link):
    os.makedirs(os.path.dirname(_link), exist_ok=True)
    os.symlink("../../../..", _link)
for path in (COLLECTIONS, ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)
