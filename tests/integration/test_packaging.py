"""A real wheel, built from this checkout: it ships the examples (and `campaign examples`
writes one out from the installed package), the LICENSE its metadata names, every package
and template, and the dependencies the code imports -- no more, no fewer."""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.paths import ROOT

PACKAGES = ("campaign", "arms", "gates", "flows", "reports")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the checkout: setuptools writes build/ and *.egg-info beside
    the sources it builds, and the checkout is not the place for them."""
    out = tmp_path_factory.mktemp("wheel")
    source = out / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            ".campaign",
            "screenshots",
            "site",
            ".pytest_cache",
            "*.db*",
        ),
    )
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=out,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    (path,) = out.glob("llm_campaign-*.whl")
    return path


def test_the_wheel_holds_examples_license_packages_and_templates(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for example in sorted((ROOT / "examples").glob("*.toml")):
        inside = f"campaign/examples/{example.name}"
        assert inside in names, inside
        assert zipfile.ZipFile(wheel).read(inside) == example.read_bytes()
    assert any(n.endswith("LICENSE") and ".dist-info/" in n for n in names)
    for package in PACKAGES:
        for source in (ROOT / package).rglob("*.py"):
            inside = source.relative_to(ROOT).as_posix()
            assert inside in names, f"{inside} is missing: add its package to [tool.setuptools] packages"
    for template in (ROOT / "reports" / "templates").glob("*.html"):
        assert f"reports/templates/{template.name}" in names
    for data in (ROOT / "campaign").rglob("*.mako"):  # alembic's template for new migrations
        assert data.relative_to(ROOT).as_posix() in names


def test_the_wheel_metadata(wheel: Path) -> None:
    archive = zipfile.ZipFile(wheel)
    (meta_name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    meta = email.message_from_bytes(archive.read(meta_name))
    requires = {r.split(";")[0].replace(" ", "") for r in meta.get_all("Requires-Dist") or []}
    assert "prefect<4,>=3.4.10" in requires or "prefect>=3.4.10,<4" in requires
    assert {r for r in requires if r.startswith(("psutil", "prometheus-client"))} == {
        "psutil>=5.9",
        "prometheus-client>=0.20",
    }
    assert not any(r.startswith("httpx-aiohttp") for r in requires)
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert "Apache-2.0" in (meta.get("License") or meta.get("License-Expression") or "")


def test_campaign_examples_writes_one_from_the_installed_package(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(target)}  # the installed copy, not this checkout
    work = tmp_path / "work"
    work.mkdir()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "cli", *args], env=env, cwd=work, capture_output=True, text=True, timeout=120
        )

    where = subprocess.run(
        [sys.executable, "-c", "import campaign; print(campaign.__file__)"],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
    )
    assert where.stdout.strip().startswith(str(target))
    listing = cli("examples")
    assert listing.returncode == 0, listing.stderr
    for name in ("demo", "slots-vs-cache", "qwen38", "llamacpp-slots"):
        assert name in listing.stdout
    written = cli("examples", "demo", "--out", "mine")
    assert written.returncode == 0, written.stderr
    assert (work / "mine" / "demo.toml").read_bytes() == (ROOT / "examples" / "demo.toml").read_bytes()
    again = cli("examples", "demo", "--out", "mine")
    assert again.returncode == 2 and "exists" in again.stderr  # never overwritten by surprise
