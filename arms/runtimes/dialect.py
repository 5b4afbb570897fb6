"""The request dialect: how a runtime wants to be asked.

Runtimes name sampling fields their own way (llama.cpp's `repeat_penalty`), refuse
fields others take (transformers serve answers `ignore_eos` with HTTP 422) and some
answer only to a model name of their own. A probe sends one request shape; the target's
`Dialect` turns it into what this runtime accepts, so the probes never branch on a name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Dialect:
    # vendor names of sampling fields (request field -> the runtime's name)
    sampling_names: Mapping[str, str] = field(default_factory=dict)
    # request fields beyond OpenAI's that this runtime may refuse: never sent to it, so
    # its replies end where the model ends them
    refused_fields: frozenset[str] = frozenset()
    # the `model` every request names, when the runtime has a name of its own for what it
    # loaded (mlx-lm: "default_model"; any other name it tries to load, and answers 404);
    # None: the campaign's served id
    request_model: str | None = None

    def sampling(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Sampling as request fields: None dropped, `refused_fields` dropped, fields
        renamed by `sampling_names`."""
        out = {k: v for k, v in params.items() if v is not None and k not in self.refused_fields}
        for field_name, vendor in self.sampling_names.items():
            if field_name in out:
                out[vendor] = out.pop(field_name)
        return out
