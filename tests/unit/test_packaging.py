"""Every Python package of the tree ships in a normal (non-editable) install."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_folder_is_listed_in_pyproject():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = {name: ROOT / path for name, path in config["package-dir"].items()}
    found = set()
    for name, folder in dirs.items():
        for init in folder.rglob("__init__.py"):
            found.add(".".join([name, *init.parent.relative_to(folder).parts]))
    missing = found - listed
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {sorted(missing)}"
