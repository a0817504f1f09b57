"""GPU specs are read per GPU (issue 30 item 1, start fast): a canonical name parses its own file only; an alias
reads the others' top-level keys (name, aliases), never their number tables; the registry's checks still hold."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servescope.errors import BadConfig, UnknownName
from servescope.specs import hardware

NUMBERS = """
[sm_count]
value = 100
source = "s"
[hbm]
value_gb = 80
source = "s"
[hbm_bw]
value_tb_per_s = 3
source = "s"
[l2]
value_mib = 50
source = "s"
[nvlink_bw]
value_gb_per_s = 450
source = "s"
[pcie_gen]
value = 5
source = "s"
[pcie_bw]
value_gb_per_s = 64
source = "s"
[p2p]
value = true
source = "s"
[nvlink_domain]
value = 8
source = "s"
[flops.bf16]
value_tflops = 1000
source = "s"
"""


def _gpu(name: str, aliases: str, numbers: str = NUMBERS) -> str:
    return (f'name = "{name}"\ndisplay_name = "X {name}"\nvendor = "nvidia"\ngeneration = "hopper"\narch = "A"\n'
            f'compute_capability = "sm_90"\ninterconnect = "nvlink4"\naliases = {aliases}\n{numbers}')


@pytest.fixture
def gpu_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A bundled-GPU folder of our own, the registry's caches emptied before and after."""
    monkeypatch.setattr(hardware, "_gpu_dir", lambda: tmp_path)
    for fn in (hardware._gpu_files, hardware._aliases, hardware._spec):
        fn.cache_clear()
    yield tmp_path
    for fn in (hardware._gpu_files, hardware._aliases, hardware._spec):
        fn.cache_clear()


def test_a_canonical_name_parses_its_own_file_only(gpu_dir: Path) -> None:
    (gpu_dir / "aa_sxm.toml").write_text(_gpu("aa_sxm", '["aa", "nvidia aa"]'))
    (gpu_dir / "bb.toml").write_text(_gpu("bb", "[]", numbers="[sm_count]\nthis is not TOML\n"))
    assert hardware.load_gpu("AA-SXM").sm_count == 100  # bb's broken number tables are never read
    assert hardware._aliases.cache_info().misses == 0
    assert hardware.load_gpu("nvidia aa").name == "aa_sxm"  # an alias: the top-level keys of every file
    with pytest.raises(BadConfig, match="bb.toml"):
        hardware.load_gpu("bb")  # its own file is parsed in full, and refused


def test_an_alias_naming_two_gpus_and_a_misnamed_file_are_refused(gpu_dir: Path) -> None:
    (gpu_dir / "aa.toml").write_text(_gpu("aa", '["shared"]'))
    (gpu_dir / "bb.toml").write_text(_gpu("bb", '["Shared"]'))
    with pytest.raises(BadConfig, match="alias 'Shared' names both aa and bb"):
        hardware.load_gpu("shared")
    hardware._aliases.cache_clear()
    (gpu_dir / "bb.toml").write_text(_gpu("cc", "[]"))
    with pytest.raises(BadConfig, match="bb.toml: name 'cc' differs from the file name"):
        hardware.resolve_gpu_name("something")
    with pytest.raises(BadConfig, match="bb.toml: name 'cc' differs from the file name"):
        hardware.load_gpu("bb")


def test_top_level_keys_cut_inside_a_value_fall_back_to_the_whole_file(gpu_dir: Path) -> None:
    """A multi-line aliases list with a line starting with `[` is not the start of a table: still read right."""
    (gpu_dir / "aa.toml").write_text(_gpu("aa", '[\n"first",\n  "second"]\nnested = [\n[1, 2],\n]'))
    assert hardware.resolve_gpu_name("second") == "aa"
    assert hardware.load_gpu("first").aliases == ("first", "second")
    with pytest.raises(BadConfig, match="'aliases' must be a list of strings"):
        (gpu_dir / "bb.toml").write_text(_gpu("bb", "[1]"))
        hardware._gpu_files.cache_clear()
        hardware._aliases.cache_clear()
        hardware.resolve_gpu_name("second")


def test_unknown_names_list_every_file_and_the_bundled_data_resolves_as_before() -> None:
    with pytest.raises(UnknownName, match="known: a100_sxm, b200_sxm"):
        hardware.resolve_gpu_name("no such gpu")
    every = hardware.list_gpus()
    assert every == sorted(every) and "h100_sxm" in every
    for name in every:  # each canonical name and each alias resolves to its own file
        spec = hardware.load_gpu(name)
        assert spec.name == name
        assert all(hardware.resolve_gpu_name(a) == name for a in spec.aliases)
