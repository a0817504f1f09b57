"""GPU names: an unknown one gets a "did you mean" from the names and aliases the specs know (issue 20)."""

from __future__ import annotations

import pytest

from servescope.errors import UnknownName
from servescope.specs.hardware import list_gpus, load_gpu


@pytest.mark.parametrize(("typo", "meant"), [("rtx6000", "rtx_pro_6000_server"), ("h10", "h100_sxm"),
                                             ("b20o", "b200_sxm")])
def test_a_near_miss_suggests_the_gpu(typo: str, meant: str) -> None:
    with pytest.raises(UnknownName, match=f"did you mean .*{meant}.*known: ") as err:
        load_gpu(typo)
    assert len(str(err.value).splitlines()) == 1


def test_nothing_near_lists_the_known_ones_only() -> None:
    with pytest.raises(UnknownName) as err:
        load_gpu("zzzzzz")
    assert "did you mean" not in str(err.value) and all(g in str(err.value) for g in list_gpus())
