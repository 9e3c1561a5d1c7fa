"""The fault points: unknown names are refused; unarmed points do nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streams import faults


def test_an_unknown_point_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="STREAMS_FAULT"):
        faults._parse("no.such.point")


def test_a_point_is_parsed_with_its_pass_number() -> None:
    assert faults._parse("applier.after_commit:3") == ("applier.after_commit", 3)
    assert faults._parse("applier.after_commit") == ("applier.after_commit", 1)
    assert faults._parse("") is None


def test_an_armed_point_kills_the_process_on_its_nth_pass() -> None:
    code = (
        "from streams import faults\n"
        "faults.hit('applier.after_commit'); print('first', flush=True)\n"
        "faults.hit('applier.after_commit'); print('second', flush=True)\n"
    )
    env = {**os.environ, "STREAMS_FAULT": "applier.after_commit:2"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == -9
    assert done.stdout.split() == ["first"]
