"""Prefect artifacts are published when they change: an unchanged queue or verdict costs
no API call and adds no version in the UI, and a publish that failed is tried again."""

from __future__ import annotations

from typing import Any

import pytest

from flows import artifacts


def test_an_artifact_is_published_again_only_when_it_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "_published", {})
    made: list[dict[str, Any]] = []

    def create(**fields: Any) -> None:
        made.append(fields)

    artifacts._publish_changed("c-queue", "v1", create, table=[1])
    artifacts._publish_changed("c-queue", "v1", create, table=[1])
    assert made == [{"key": "c-queue", "table": [1]}]
    artifacts._publish_changed("c-queue", "v2", create, table=[2])
    artifacts._publish_changed("c-gate-g", "v1", create, markdown="m")
    assert [m["key"] for m in made] == ["c-queue", "c-queue", "c-gate-g"]


def test_a_failed_publish_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "_published", {})
    calls = []

    def failing(**fields: Any) -> None:
        calls.append(fields)
        raise ConnectionError("server gone")

    with pytest.raises(ConnectionError):
        artifacts._publish_changed("c-queue", "v1", failing)
    made: list[str] = []
    artifacts._publish_changed("c-queue", "v1", lambda **f: made.append(f["key"]))
    assert made == ["c-queue"]


def test_another_server_gets_its_own_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(artifacts, "_published", {})
    made: list[str] = []
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4311/api")
    artifacts._publish_changed("c-queue", "v1", lambda **f: made.append("first"))
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4312/api")
    artifacts._publish_changed("c-queue", "v1", lambda **f: made.append("second"))
    assert made == ["first", "second"]
