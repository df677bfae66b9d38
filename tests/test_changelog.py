"""The version is written in one place, and the changelog knows it (#38)."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import aiosb

ROOT = Path(__file__).parent.parent


def test_the_version_is_written_once_and_the_package_takes_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert version("aiosb") == aiosb.__version__


def test_the_changelog_has_an_entry_for_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert versions[0] == "Unreleased"
    assert aiosb.__version__ in versions
    for name in versions:  # every heading has its link at the foot
        assert re.search(rf"^\[{re.escape(name)}\]: ", text, re.MULTILINE), name
