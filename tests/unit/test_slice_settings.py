"""Each slice's settings class: found through SLICES, read from the same environment and the
core Settings' keyword arguments, validated at startup with the core's message format."""

from __future__ import annotations

import ast
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from streams.settings import ConfigError, Settings, all_fields, load_settings
from streams.slices import names, settings_classes
from streams.slices.automation.config import AutomationConfig
from streams.slices.automation.settings import AutomationSettings
from streams.slices.calendar.settings import CalendarSettings
from streams.slices.profile.run import ExpiryConfig
from streams.slices.profile.settings import DocumentExpirySettings

ROOT = Path(__file__).resolve().parents[2]
URL = "postgresql://x@127.0.0.1:1/x"


def test_every_slice_declares_its_settings_class() -> None:
    assert names() == ("calendar", "automation", "profile")
    assert settings_classes() == [CalendarSettings, AutomationSettings, DocumentExpirySettings]


def test_no_setting_belongs_to_two_classes() -> None:
    classes: list[type[BaseSettings]] = [Settings, *settings_classes()]
    names = [name for cls in classes for name in cls.model_fields]
    assert len(names) == len(set(names)) == len(all_fields())


def test_settings_modules_import_only_pydantic_and_the_domain() -> None:
    for name in names():
        tree = ast.parse((ROOT / "streams" / "slices" / name / "settings.py").read_text())
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        allowed = ("__future__", "typing", "pydantic", "pydantic_settings", "streams.domain")
        assert all(str(m).startswith(allowed) for m in imported), (name, imported)


def test_the_core_settings_module_imports_no_slice_and_no_faust() -> None:
    code = "import sys, streams.settings; print(sorted(m for m in sys.modules if m.startswith(('faust', 'streams.slices'))))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_keyword_arguments_reach_the_slices_and_each_is_built_once() -> None:
    s = Settings(
        database_url=URL, automation_batch_size=5, calendar_dispatch_poison_backoff_seconds=7
    )
    assert s.database_url == URL
    assert s.of(AutomationSettings).automation_batch_size == 5
    assert s.of(AutomationSettings) is s.of(AutomationSettings)
    assert s.of(CalendarSettings).calendar_dispatch_poison_backoff_seconds == 7
    assert AutomationConfig.from_settings(s).batch_size == 5
    assert Settings().of(AutomationSettings).automation_batch_size == 200


def test_the_environment_reaches_the_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOMATION_LEASE_SECONDS", "300")
    monkeypatch.setenv("TIMER_DOCUMENT_EXPIRY_THRESHOLDS_DAYS", "[1, 7]")
    s = load_settings()
    assert AutomationConfig.from_settings(s).lease == timedelta(seconds=300)
    assert ExpiryConfig.from_settings(s).thresholds == (7, 1)
    # A keyword argument wins over the environment, as for the core's settings.
    assert (
        Settings(automation_lease_seconds=60).of(AutomationSettings).automation_lease_seconds == 60
    )


def test_a_bad_slice_keyword_argument_fails_where_it_is_given() -> None:
    with pytest.raises(ValueError, match="automation_batch_size"):
        Settings(automation_batch_size=0)
    with pytest.raises(ValueError, match="timer_document_expiry_thresholds_days"):
        Settings(timer_document_expiry_thresholds_days="30,-1")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AUTOMATION_BATCH_SIZE", "0", "Input should be greater than or equal to 1"),
        (
            "CALENDAR_DISPATCH_POISON_BACKOFF_SECONDS",
            "0",
            "Input should be greater than or equal to 1",
        ),
        ("TIMER_DOCUMENT_EXPIRY_FANOUT", "both", "Input should be 'kafka' or 'inline'"),
        (
            "DOCUMENT_EXPIRY_MAX_DOCUMENTS_PER_EVENT",
            "1801",
            "Input should be less than or equal to 1800",
        ),
    ],
)
def test_a_bad_slice_setting_stops_startup_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert str(exc.value) == f"invalid configuration: setting {name}: {message}"


def test_startup_names_the_cores_and_the_slices_bad_settings_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WEB_PORT", "0")
    monkeypatch.setenv("AUTOMATION_REPORT_WINDOW_DAYS", "63")
    with pytest.raises(ConfigError) as exc:
        load_settings()
    assert str(exc.value) == (
        "invalid configuration: setting WEB_PORT: Input should be greater than or equal to 1; "
        "setting AUTOMATION_REPORT_WINDOW_DAYS: Input should be less than or equal to 62"
    )


def test_model_copy_applies_to_the_core_and_the_slices() -> None:
    s = Settings(database_url=URL, automation_batch_size=5)
    assert s.of(AutomationSettings).automation_batch_size == 5
    c = s.model_copy(
        update={
            "web_port": 7000,
            "automation_batch_size": 9,
            "document_expiry_claim_chunk_documents": 20,
        }
    )
    assert (c.web_port, c.database_url) == (7000, URL)
    assert c.of(AutomationSettings).automation_batch_size == 9
    assert c.of(DocumentExpirySettings).document_expiry_claim_chunk_documents == 20
    assert (s.web_port, s.of(AutomationSettings).automation_batch_size) == (6066, 5)
