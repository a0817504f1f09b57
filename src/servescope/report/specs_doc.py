"""The `servescope.specs/1` (bundled names) and `servescope.spec/1` (one GPU or model spec) documents.
Presentation only: fields are copied from the frozen spec dataclass as they are (SI units, named in the field);
`sources` maps a field or quantity to where its number comes from; `citations` resolves every source key, word and
GitHub issue those sources cite (servescope.specs.sources) to its full citation."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from servescope.specs.hardware import GpuSpec
from servescope.specs.models import ModelSpec
from servescope.specs.sources import citations

LIST_SCHEMA = "servescope.specs/1"
SPEC_SCHEMA = "servescope.spec/1"


def specs_list_document(gpus: Sequence[str], models: Sequence[str]) -> dict[str, Any]:
    """The bundled GPU and model names."""
    return {"schema": LIST_SCHEMA, "gpus": list(gpus), "models": list(models)}


def spec_document(spec: GpuSpec | ModelSpec) -> dict[str, Any]:
    """Every field of one spec (nested dataclasses as objects), and its sources when the spec has them."""
    fields = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "sources"}
    fields = {k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else v
              for k, v in fields.items()}
    sources = dict(spec.sources) if isinstance(spec, GpuSpec) else {"config": spec.source}
    return {"schema": SPEC_SCHEMA, "kind": "gpu" if isinstance(spec, GpuSpec) else "model", "name": spec.name,
            "fields": fields, "sources": sources,
            "citations": [{"key": c.key, "kind": c.kind, "text": c.text} for c in citations(sources.values())]}
