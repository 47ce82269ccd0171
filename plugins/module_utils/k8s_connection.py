# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuplatform.rke2 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The connection options every Kubernetes-facing module shares, and the one place
that turns them into an official ``kubernetes`` client. No module shells out to
kubectl."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - reported by the module
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = exc

CONNECTION_ARG_SPEC = dict(
    kubeconfig=dict(type="path"),
    context=dict(type="str"),
    host=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    validate_certs=dict(type="bool", aliases=["verify_ssl"]),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"]),
)

_ENV = {
    "kubeconfig": "K8S_AUTH_KUBECONFIG",
    "context": "K8S_AUTH_CONTEXT",
    "host": "K8S_AUTH_HOST",
    "api_key": "K8S_AUTH_API_KEY",
    "validate_certs": "K8S_AUTH_VERIFY_SSL",
    "ca_cert": "K8S_AUTH_SSL_CA_CERT",
}


def connection_arg_spec():
    """A fresh copy of the shared options, to merge into a module's argument_spec."""
    return dict((k, dict(v)) for k, v in CONNECTION_ARG_SPEC.items())


def _as_bool(value):
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def connection_settings(params, environ=None):
    """The effective connection settings: module params, then K8S_AUTH_* variables,
    then KUBECONFIG. Pure: takes the environment as a mapping."""
    environ = os.environ if environ is None else environ
    settings = {}
    for key, env_name in _ENV.items():
        value = params.get(key)
        if value is None:
            value = environ.get(env_name)
        settings[key] = value
    if settings["kubeconfig"] is None and not settings["host"]:
        settings["kubeconfig"] = environ.get("KUBECONFIG") or None
    if settings["validate_certs"] is not None:
        settings["validate_certs"] = _as_bool(settings["validate_certs"])
    return settings


def api_client(params, environ=None):
    """An ``ApiClient`` for the settings in ``params``; raises ValueError with a clear
    message when the settings cannot make one."""
    if not HAS_KUBERNETES:
        raise ValueError("the kubernetes Python client is required: %s" % KUBERNETES_IMPORT_ERROR)
    settings = connection_settings(params, environ)
    configuration = k8s_client.Configuration()
    if settings["host"]:
        configuration.host = settings["host"]
        if settings["api_key"]:
            configuration.api_key = {"authorization": "Bearer " + settings["api_key"]}
    else:
        kubeconfig = settings["kubeconfig"]
        if kubeconfig:
            kubeconfig = os.path.expanduser(kubeconfig)
            if not os.path.exists(kubeconfig):
                raise ValueError("kubeconfig %s does not exist" % kubeconfig)
        try:
            k8s_config.load_kube_config(config_file=kubeconfig, context=settings["context"],
                                        client_configuration=configuration)
        except Exception as exc:  # the client raises several types here
            raise ValueError("cannot load kubeconfig %s (context %s): %s"
                             % (kubeconfig or "~/.kube/config", settings["context"] or "current", exc))
        if settings["api_key"]:
            configuration.api_key = {"authorization": "Bearer " + settings["api_key"]}
    if settings["ca_cert"]:
        configuration.ssl_ca_cert = settings["ca_cert"]
    if settings["validate_certs"] is not None:
        configuration.verify_ssl = settings["validate_certs"]
    # urllib3 would retry a failed request up to 3 times, each with the full timeouts,
    # behind the caller's back: a hung API server then costs 4 read timeouts a request,
    # past any deadline. The waits retry on their own, with backoff, inside their deadline.
    configuration.retries = False
    # TCP keep-alive as client-go dials (30 s idle): the kernel notices a peer that is gone.
    configuration.keep_alive = True
    return k8s_client.ApiClient(configuration)
