"""Tracing's switch: the OpenTelemetry SDK's own environment variables, checked at startup.

``OTEL_TRACES_EXPORTER`` turns tracing on: ``otlp`` (OTLP over HTTP/protobuf to
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_ENDPOINT``, the SDK's
default ``http://localhost:4318``), ``console`` (spans as JSON on stdout), both
comma-separated, or ``none`` (the default here: no SDK provider is installed at all).
``OTEL_SDK_DISABLED=true`` turns it off whatever the exporter says. ``OTEL_SERVICE_NAME``
names the service (default ``reminders-stream``); ``OTEL_TRACES_SAMPLER`` /
``OTEL_TRACES_SAMPLER_ARG`` pick the SDK's sampler. A bad value of any of them is a
configuration error naming the variable (``load_settings`` stops startup with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

EXPORTERS = ("otlp", "console", "none")
SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)
# The one OTLP transport this project ships (opentelemetry-exporter-otlp-proto-http).
PROTOCOL = "http/protobuf"
DEFAULT_SERVICE = "reminders-stream"
_BOOLS = {"true": True, "false": False, "": False}


@dataclass(frozen=True)
class TracingConfig:
    """What the environment asks for: which exporters (empty: tracing off), the service."""

    exporters: tuple[str, ...]
    service_name: str

    @property
    def enabled(self) -> bool:
        return bool(self.exporters)


class TracingConfigError(ValueError):
    """A bad OTEL_* value: the message names the variable."""


def _get(env: Mapping[str, str], name: str) -> str:
    return env.get(name, "").strip()


def problems(env: Mapping[str, str]) -> list[str]:
    """Every bad OTEL_* value of ``env``, each naming its variable (empty when all are fine)."""
    out: list[str] = []
    disabled = _get(env, "OTEL_SDK_DISABLED").lower()
    if disabled not in _BOOLS:
        out.append(f"setting OTEL_SDK_DISABLED: must be true or false, got {disabled!r}")
    raw = _get(env, "OTEL_TRACES_EXPORTER")
    names = [n.strip().lower() for n in raw.split(",")] if raw else []
    for name in names:
        if name not in EXPORTERS:
            out.append(
                f"setting OTEL_TRACES_EXPORTER: {name!r} is not one of {', '.join(EXPORTERS)}"
            )
    if "none" in names and len(names) > 1:
        out.append("setting OTEL_TRACES_EXPORTER: none cannot be combined with an exporter")
    for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        protocol = _get(env, var)
        if protocol and protocol != PROTOCOL:
            out.append(f"setting {var}: only {PROTOCOL} is supported, got {protocol!r}")
    for var in ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        endpoint = _get(env, var)
        if endpoint:
            try:
                parts = urlsplit(endpoint)
                port_ok = parts.port is None or parts.port > 0
            except ValueError:
                parts, port_ok = None, False
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                out.append(f"setting {var}: must be an http(s)://host[:port] URL")
            elif not port_ok:
                out.append(f"setting {var}: bad port")
    sampler = _get(env, "OTEL_TRACES_SAMPLER").lower()
    if sampler and sampler not in SAMPLERS:
        out.append(f"setting OTEL_TRACES_SAMPLER: {sampler!r} is not one of {', '.join(SAMPLERS)}")
    arg = _get(env, "OTEL_TRACES_SAMPLER_ARG")
    if arg:
        try:
            ratio = float(arg)
        except ValueError:
            ratio = -1.0
        if not 0.0 <= ratio <= 1.0:
            out.append("setting OTEL_TRACES_SAMPLER_ARG: must be a number from 0 to 1")
    return out


def from_env(env: Mapping[str, str]) -> TracingConfig:
    """The tracing ``env`` asks for; raises TracingConfigError naming the first bad variable."""
    bad = problems(env)
    if bad:
        raise TracingConfigError("; ".join(bad))
    service = _get(env, "OTEL_SERVICE_NAME") or DEFAULT_SERVICE
    if _BOOLS[_get(env, "OTEL_SDK_DISABLED").lower()]:
        return TracingConfig((), service)
    raw = _get(env, "OTEL_TRACES_EXPORTER")
    names = tuple(n.strip().lower() for n in raw.split(",")) if raw else ()
    return TracingConfig(tuple(n for n in names if n != "none"), service)
