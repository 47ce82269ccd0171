# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Site filters: the Kubernetes node names of inventory hosts. Documentation in the
sidecar file k8s_node_names.yml."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def k8s_node_names(hosts, hostvars):
    """Each host's ``k8s_node_name``, or its inventory name when it has none."""
    return [hostvars[h].get("k8s_node_name") or h for h in hosts]


class FilterModule(object):
    def filters(self):
        return {"k8s_node_names": k8s_node_names}
