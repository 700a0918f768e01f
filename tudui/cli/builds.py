"""Which torch to install for a GPU and a driver: the choice, and the table of PyTorch's CUDA builds in builds.json,
the one place for these facts (releases, their builds and kernels, the indexes, the date checked): the doctor's
advice and the tables in README.md and lesson 00 (written by tools/stamp_builds.py) all come from it."""
import json
import re
from dataclasses import dataclass
from importlib import resources

TABLE = json.loads(resources.files(__package__).joinpath("builds.json").read_text(encoding="utf-8"))
INDEXES = TABLE["indexes"]  # PyTorch's, NJU's mirror of it, Aliyun's flat folders and the PyPI mirror they need


@dataclass(frozen=True)
class Build:
    """One CUDA build of one torch release: ``torch==2.14.1`` from the ``cu126`` index."""
    torch: str
    torchvision: str
    python: str   # the Python versions it has wheels for, "3.10-3.14"
    variant: str  # "cu126"
    archs: tuple  # the GPU architectures it has kernels for (sm_XY)

    cuda = property(lambda self: cuda_of(self.variant))  # (major, minor)

    def runs_on(self, python: tuple) -> bool:
        """Whether it has wheels for Python ``python`` (major, minor)."""
        low, high = (tuple(int(n) for n in end.split(".")) for end in self.python.split("-"))
        return low <= tuple(python)[:2] <= high

    def install(self, where: str = "official") -> str:
        """The pip command that installs exactly this build, from PyPI's index, NJU's mirror or Aliyun's."""
        label = f"+{self.variant}" if where == "aliyun" else ""
        pip = f"python -m pip install torch=={self.torch}{label} torchvision=={self.torchvision}{label}"
        if where == "aliyun":
            return f"{pip} -f {INDEXES['aliyun']}{self.variant}/ -i {INDEXES['tuna']}"
        return f"{pip} --index-url {INDEXES['nju' if where == 'nju' else 'official']}{self.variant}"


def cuda_of(variant: str) -> tuple:
    """``"cu126"`` -> ``(12, 6)``."""
    return int(variant[2:-1]), int(variant[-1])


def release_key(version: str) -> tuple:
    """``"2.14.1+cu126"`` -> ``(2, 14, 1)``: the release, without its build label."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def releases() -> list:
    """Every release of the table, newest first, as its list of :class:`Build`."""
    rows = sorted(TABLE["releases"], key=lambda r: release_key(r["torch"]), reverse=True)
    return [[Build(r["torch"], r["torchvision"], r["python"], v, tuple(TABLE["kernels"][k]))
             for v, k in r["builds"].items()] for r in rows]


def newest() -> str:
    """The newest torch release the table knows."""
    return releases()[0][0].torch


def has_kernels(arch_list, cap: tuple) -> bool:
    """Whether a build with ``arch_list`` runs on compute capability ``cap``: binary code ``sm_XY`` runs on X.Y and
    newer GPUs of the same major version; PTX (``compute_XY``) is compiled for any X.Y or newer GPU when first used."""
    code = 10 * cap[0] + cap[1]
    archs = [(kind, int(num)) for kind, _, num in (arch.partition("_") for arch in arch_list) if num.isdigit()]
    return any(num <= code and (kind == "compute" or num // 10 == cap[0]) for kind, num in archs)


def choose(driver_cuda: tuple | None, caps: tuple = (), python: tuple | None = None) -> Build | None:
    """The build to install: the newest release with kernels for every GPU in ``caps`` that the driver runs. Of a
    release, the newest build the driver supports; else its oldest build of the driver's major version, which the driver
    runs too (NVIDIA's minor version compatibility, a 12.x build on a 12.0+ driver). Unknown driver (an unreadable
    nvidia-smi header): the newest release's build that asks least of the driver. ``python``: only releases with wheels
    for that Python (major, minor). None: nothing fits."""
    for builds in releases():
        fits = sorted((b for b in builds if all(has_kernels(b.archs, c) for c in caps)
                       and (python is None or b.runs_on(python))), key=lambda b: b.cuda)
        if fits and driver_cuda is None:
            return fits[0]
        native = [b for b in fits if driver_cuda and b.cuda <= driver_cuda]
        minor = [b for b in fits if driver_cuda and b.cuda[0] == driver_cuda[0]]
        if native or minor:
            return native[-1] if native else minor[0]
    return None


def kernels_of(version: str, cuda: tuple | None) -> tuple:
    """The architectures torch ``version`` built for CUDA ``cuda`` has kernels for, from the table; () if unknown."""
    known = [b for builds in releases() for b in builds if b.cuda == cuda]
    same = [b for b in known if release_key(b.torch)[:2] == release_key(version)[:2]]
    return next((b.archs for b in same or known), ())


def mps_macos(version: str) -> str:
    """The oldest macOS on which this torch's MPS runs."""
    return [macos for since, macos in TABLE["mps_macos"] if release_key(version) >= release_key(since)][-1]

