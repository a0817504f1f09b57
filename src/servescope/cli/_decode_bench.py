"""`validate`'s decode-only inputs: the CSV's mode=decode_only rows and `--decode-bench` files (`vllm bench latency
--output-json`, `sglang.bench_one_batch` JSONL) with the deployment they ran, which those files do not record.
Thin: validation.decode_only and validation.decode_bench read and price."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from servescope.cli._app import F
from servescope.specs.engines import DEFAULT_ENGINE, ENGINES

if TYPE_CHECKING:
    from servescope.validation.decode_only import DecodeValidation


def decode_bench_options(fn: F) -> F:
    options = [
        click.option("--decode-bench", "decode_bench", multiple=True, type=click.Path(path_type=Path),
                     metavar="FILE", help="A `vllm bench latency --output-json` result or `sglang.bench_one_batch` "
                                          "JSON lines: decode-only rows of the deployment below (repeatable)."),
        click.option("--model", "model_name", default=None, help="With --decode-bench: the model that ran."),
        click.option("--gpu", default=None, help="With --decode-bench: the GPU."),
        click.option("--tp", default=1, show_default=True, help="With --decode-bench: tensor parallel degree."),
        click.option("--ep", default=1, show_default=True, help="With --decode-bench: expert parallel degree."),
        click.option("--pp", default=1, show_default=True, help="With --decode-bench: pipeline parallel degree."),
        click.option("--dp", default=1, show_default=True, help="With --decode-bench: attention-DP degree."),
        click.option("--backend", default=DEFAULT_ENGINE, show_default=True,
                     type=click.Choice(list(ENGINES), case_sensitive=False),
                     help="With --decode-bench: the engine."),
        click.option("--engine-version", default="", metavar="VERSION", help="With --decode-bench: its release."),
        click.option("--quant", default="native", show_default=True, help="With --decode-bench: weights' scheme."),
        click.option("--moe-quant", default=None, help="With --decode-bench: routed experts' scheme."),
        click.option("--kv-quant", default=None, help="With --decode-bench: KV-cache scheme."),
        click.option("--batch-size", type=click.IntRange(min=1), default=None,
                     help="A vLLM latency file's --batch-size (the file does not record it)."),
        click.option("--input-len", type=click.IntRange(min=1), default=None, help="Its --input-len."),
        click.option("--output-len", type=click.IntRange(min=1), default=None, help="Its --output-len."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def decode_slice(csv: Path | None, kw: dict[str, Any]) -> DecodeValidation | None:
    """The decode-only slice of the CSV and of every --decode-bench file; None when there is none."""
    from servescope.errors import MeasurementError
    from servescope.validation.decode_bench import Lengths, read_decode_bench
    from servescope.validation.decode_only import (
        DecodeValidation,
        Deployment,
        merge,
        price,
        read_decode_csv,
    )

    rows = read_decode_csv(csv) if csv is not None else []
    skipped: list[tuple[str, str]] = []
    if kw["decode_bench"]:
        if not kw["model_name"] or not kw["gpu"]:
            raise MeasurementError("--decode-bench: give --model and --gpu (and the layout, engine and quantization "
                                   "it ran with): benchmark files do not record the deployment")
        dep = Deployment(kw["model_name"], kw["gpu"], kw["backend"].lower(), kw["engine_version"] or "", kw["tp"],
                         kw["ep"], kw["pp"], kw["dp"], kw["quant"], kw["moe_quant"], kw["kv_quant"])
        given = [kw[k] for k in ("batch_size", "input_len", "output_len")]
        lengths = Lengths(*given) if all(given) else None
        for path in kw["decode_bench"]:
            got, skip = read_decode_bench(path, dep, lengths)
            rows += got
            skipped += skip
    if not rows and not skipped:
        return None
    return merge([price(rows), DecodeValidation([], skipped)])
