"""The documentation: the site builds strictly (no broken link or anchor), the README stays short
and its relative links point to files that exist."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 16_000
LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "tutorials" / "relaax" / "index.html").exists()


def test_readme_is_short():
    assert (ROOT / "README.md").stat().st_size < README_MAX_BYTES


def test_readme_relative_links_exist():
    text = (ROOT / "README.md").read_text()
    targets = [t for t in LINK.findall(text) if "://" not in t and not t.startswith("#")]
    assert targets, "the README links to the documentation"
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, f"README.md links to missing files: {missing}"

