"""Recorded agent sessions (arms.workloads.sessions): turns, think times and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arms.probes.agent_load_params import AgentLoadParams
from arms.workloads.sessions import SessionsError, read_sessions

SESSION = {
    "id": "s1",
    "start_s": 2.0,
    "messages": [
        {"role": "system", "content": "You are a coding agent.", "t": 0},
        {"role": "user", "content": "Fix the failing test.", "t": 0},
        {"role": "assistant", "content": "Reading the test file now.", "t": 1.0},
        {"role": "tool", "content": "def test(): assert 1 == 2", "t": 3.5},
        {"role": "assistant", "content": "The assertion is wrong; fixing it.", "t": 4.0},
    ],
}


def test_each_assistant_message_closes_a_turn_with_its_history_and_think_time(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
        + "\n\n"
        + json.dumps(SESSION)
        + "\n"
    )
    first, second = read_sessions(path)
    assert (first.id, first.start_s, len(first.turns)) == ("line1", 0.0, 1)
    assert second.id == "s1" and second.start_s == 2.0
    one, two = second.turns
    assert [m["role"] for m in one.messages] == ["system", "user"] and one.reply_words == 5 and one.think_s == 0.0
    assert [m["role"] for m in two.messages] == ["system", "user", "assistant", "tool"] and two.reply_words == 6
    assert two.think_s == pytest.approx(2.5)  # from the reply at 1.0 to the tool's output at 3.5
    assert two.messages[2]["content"] == "Reading the test file now."  # the recorded reply, in the history


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{oops", "s.jsonl:1: not JSON"),
        (json.dumps({"id": 1}), "s.jsonl:1: expected an object with messages"),
        (json.dumps({"messages": [{"role": "bot", "content": "x"}]}), "messages[0]: expected role"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}]}), "no assistant message"),
        (
            json.dumps({"messages": [{"role": "assistant", "content": "x"}]}),
            "messages[0]: an assistant message must follow",
        ),
        (json.dumps({"start_s": -1, "messages": []}), "start_s: expected seconds >= 0"),
    ],
)
def test_a_file_that_is_not_sessions_is_refused_naming_the_line(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(SessionsError) as caught:
        read_sessions(path)
    assert expected in str(caught.value)


def test_agent_load_takes_sessions_instead_of_its_synthetic_shape(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(SESSION) + "\n")
    params = AgentLoadParams(sessions=str(path), history="server", max_tokens=5)
    assert AgentLoadParams.model_validate(params.model_dump()).history == "server"  # the arm flow's round trip
    assert params.request_tokens() >= 5 + len("You are a coding agent. Fix the failing test.".split())
    with pytest.raises(ValueError, match="turns: not for recorded sessions"):
        AgentLoadParams(sessions=str(path), turns=4)
    with pytest.raises(ValueError, match="apply to recorded sessions"):
        AgentLoadParams(history="server")
