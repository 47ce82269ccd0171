# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    # The connection options every Kubernetes-facing module of this collection shares.
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file.
      - Defaults to the E(K8S_AUTH_KUBECONFIG) environment variable, then to E(KUBECONFIG), then to
        C(~/.kube/config), unless O(host) is given.
    type: path
  context:
    description:
      - The kubeconfig context to use; defaults to E(K8S_AUTH_CONTEXT), then the kubeconfig's current context.
    type: str
  host:
    description:
      - The API server URL, used instead of a kubeconfig. Defaults to E(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - A bearer token for O(host). Defaults to E(K8S_AUTH_API_KEY).
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate. Defaults to E(K8S_AUTH_VERIFY_SSL), then true.
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - CA bundle to verify the API server with. Defaults to E(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
requirements:
  - kubernetes >= 30.0.0 (the official Python client)
notes:
  - Connection options follow kubernetes.core's names and environment variables, so the same
    inventory variables serve both collections.
"""
