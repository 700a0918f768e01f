"""The table of torch's CUDA builds (tudui/cli/builds.json): the choice it makes, that it knows the torch these
tests run on, and that docs/install.md, docs/install.zh.md and lesson 00 show it as it is."""
from __future__ import annotations

import re
import shlex

import nbformat
import pytest
import torch

import stamp_builds
from test_doctor import ADVICE_CASES, commands
from tudui.cli import builds, doctor

PASCAL, TURING, AMPERE, BLACKWELL = (6, 1), (7, 5), (8, 6), (12, 0)


@pytest.mark.parametrize("driver, caps, torch_version, variant", [
    ((13, 0), (PASCAL,), "2.14.1", "cu126"),     # GTX 1060 on R580: the last torch with kernels for it
    ((11, 4), (PASCAL,), "2.7.1", "cu118"),      # MX150 on 470: the last torch with CUDA 11 builds
    ((13, 0), (TURING,), "2.15.0", "cu130"),     # MX450 / GTX 1650 on R580: today's torch
    ((12, 4), (TURING,), "2.14.1", "cu126"),     # minor version compatibility: a 12.x build on a 12.0+ driver
    ((13, 3), (AMPERE,), "2.15.0", "cu132"),
    ((12, 8), (BLACKWELL,), "2.11.0", "cu128"),  # RTX 5070 on 572: the last cu128 torch has its kernels
    ((13, 0), (BLACKWELL,), "2.15.0", "cu130"),
    ((13, 0), (), "2.15.0", "cu130"),            # no compute capability reported: decided by the driver alone
    (None, (AMPERE,), "2.15.0", "cu130"),        # unreadable header: what asks least of the driver
])
def test_choose(driver, caps, torch_version, variant):
    build = builds.choose(driver, caps)
    assert (build.torch, build.variant) == (torch_version, variant)


def test_nothing_fits_a_driver_older_than_every_build():
    assert builds.choose((10, 2), (PASCAL,)) is None and builds.choose((12, 8), ((3, 5),)) is None


def test_python_3_10_gets_the_newest_torch_with_wheels_for_it():
    assert builds.choose((13, 0), (TURING,), python=(3, 10)).torch == "2.14.1"
    assert builds.choose((13, 0), (TURING,), python=(3, 15)) is None


def test_the_table_knows_the_torch_these_tests_run_on():
    assert builds.release_key(torch.__version__) <= builds.release_key(builds.newest()), (
        f"torch {torch.__version__} is newer than every release in tudui/cli/builds.json ({builds.newest()}): add it "
        f"(its CUDA builds, their kernels, its Python versions, the date checked), then run tools/stamp_builds.py")


@pytest.mark.skipif(not torch.version.cuda, reason="a CPU-only torch lists no kernels")
def test_the_installed_builds_kernels_are_the_tables():
    variant = "cu" + torch.version.cuda.replace(".", "")
    compiled = torch.cuda.get_arch_list() or torch._C._cuda_getArchFlags().split()  # before 2.8: [] without a GPU
    assert builds.kernels_of(torch.__version__, builds.cuda_of(variant)) == tuple(compiled)


def test_install_commands_are_pinned_so_that_no_other_index_can_win():
    build = builds.choose((13, 0), (PASCAL,))
    assert build.install() == ("python -m pip install torch==2.14.1 torchvision==0.29.1 "
                               "--index-url https://download.pytorch.org/whl/cu126")
    aliyun = shlex.split(build.install("aliyun"))  # PyPI's mirror is an index too: the +cu126 label decides
    assert "torch==2.14.1+cu126" in aliyun and "torchvision==0.29.1+cu126" in aliyun


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("build, smi, system, machine, visible", ADVICE_CASES)
def test_every_install_command_the_doctor_prints_is_pinned(build, smi, system, machine, visible, lang):
    for command in commands(doctor.advise(build, smi, system, machine, visible, lang)):
        words = shlex.split(command)
        if "install" in words and "uninstall" not in words:
            assert [w for w in words if w.startswith("torch")] and all(
                re.fullmatch(r"torch(vision)?==[\d.]+(\+cu\d+)?", w) for w in words if w.startswith("torch")), command


def test_the_install_docs_and_lesson_00_show_the_table_as_it_is():
    for path, lang in stamp_builds.DOCS.items():
        text = path.read_text(encoding="utf-8")
        assert stamp_builds.table(doctor.texts(lang)) in text, f"{path.name}: run tools/stamp_builds.py"
    for path, lang in stamp_builds.LESSONS.items():
        cells = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
        assert stamp_builds.table(doctor.texts(lang)) in cells, f"{path.name} ({lang}): run tools/stamp_builds.py"


def test_the_readme_names_the_newest_torch_as_tested():
    for path in (stamp_builds.ROOT / "README.md", stamp_builds.ROOT / "README.zh.md"):
        assert f"torch {builds.newest()}" in path.read_text(encoding="utf-8")


def test_no_sentence_says_2_15_is_planned():
    texts = [p.read_text(encoding="utf-8") for p in stamp_builds.DOCS] + [
        c.source for p in stamp_builds.LESSONS for c in nbformat.read(p, as_version=4).cells]
    texts += [str(doctor.texts("en")), str(doctor.texts("zh"))]
    assert not [t for t in texts if re.search(r"2\.15 (is )?planned|planned without|按计划，torch 2\.15", t)]
