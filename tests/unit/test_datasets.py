"""ShareGPT-style datasets (arms.workloads.datasets) and the load probe's dataset workload."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arms.probes.load_params import LoadParams
from arms.probes.load_workload import Workload
from arms.workloads.datasets import DatasetError, read_dataset

SHAREGPT = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "Name three rivers."},
            {"from": "gpt", "value": "Nile, Amazon and Yangtze."},
        ],
    },
    {"id": "b", "conversations": [{"from": "gpt", "value": "a reply with no question"}]},
    {
        "id": "c",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "Why is the sky blue?"},
            {"from": "gpt", "value": " ".join(["word"] * 100)},
            {"from": "human", "value": "more"},
        ],
    },
    {"id": "d", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]},
]


def test_records_give_prompts_and_reply_lengths_and_the_unusable_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT))
    data = read_dataset(path)
    assert data.skipped == 1 and len(data.prompts) == 3
    assert data.prompts[0].as_messages() == [{"role": "user", "content": "Name three rivers."}]
    assert data.prompts[0].output_words == 4
    assert [m["role"] for m in data.prompts[1].as_messages()] == ["system", "user"] and data.prompts[
        1
    ].output_words == 100
    jsonl = tmp_path / "sg.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in SHAREGPT) + "\n")
    assert read_dataset(jsonl) == data


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[{"id": 1}]', "record 0: expected conversations"),
        ('{"conversations": [{"from": "robot", "value": "x"}]}', "line 1: turn 0: speaker 'robot'"),
        ('{"conversations": [1]}', "line 1: turn 0: expected an object"),
        ('{"conversations": [{"from": "human", "value": "q"}]}\n{oops', "sg.jsonl:2: not JSON"),
        ('{"conversations": [{"from": "gpt", "value": "a"}]}', "no usable prompt (1 record(s)"),
    ],
)
def test_a_file_that_is_not_a_dataset_is_refused_naming_the_record(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "sg.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError) as caught:
        read_dataset(path)
    assert expected in str(caught.value)


def test_the_load_probe_sends_the_records_in_turn_with_their_reply_lengths(tmp_path: Path) -> None:
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT))
    params = LoadParams(profile="constant", rate=2, requests=4, dataset=str(path), max_tokens=50)
    assert params.workload == "dataset"
    again = LoadParams.model_validate(params.model_dump())  # the arm flow's round trip keeps it valid
    assert again.workload == "dataset"
    work = Workload(params, "s", "sh")
    sent = [work.prepare(i) for i in range(4)]
    assert [label["max_tokens"] for _, label in sent] == [4, 50, 2, 4]  # capped by max_tokens; at least 2
    assert sent[3][0] == sent[0][0]  # the records in turn
    with pytest.raises(ValueError, match="not for a dataset"):
        LoadParams(profile="constant", rate=2, dataset=str(path), prompt_tokens=10)
    with pytest.raises(ValueError, match="record 0: expected conversations"):
        bad = tmp_path / "bad.json"
        bad.write_text('[{"id": 1}]')
        LoadParams(profile="constant", rate=2, dataset=str(bad))
