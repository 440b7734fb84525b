"""scripts/ab_servers.sh's checks of its builds, which run before any server starts (a GPU machine
takes minutes to start the first): each refusal exits 2 with the reason and writes nothing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ab(tmp_path: Path, *specs: str) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "out"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "ab_servers.sh"), str(out), *specs],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert not out.exists() or not any(out.iterdir())
    return done


def _tree_without(tmp_path: Path, missing: str | None = None) -> Path:
    """A build's folders (linked, not copied), without `missing` if given: what session 66 handed a
    copy that lacked web/."""
    tree = tmp_path / "tree"
    (tree / "scripts").mkdir(parents=True)
    for name in ("engine", "server", "client", "bench", "integrations", "web"):
        if name != missing:
            (tree / name).symlink_to(ROOT / name)
    shutil.copy(ROOT / "scripts" / "bench_gpu.sh", tree / "scripts")
    return tree


@pytest.mark.parametrize("missing", ["web", "engine"])
def test_a_tree_that_cannot_serve_is_refused_first(tmp_path: Path, missing: str) -> None:
    tree = _tree_without(tmp_path, missing)
    done = _ab(tmp_path, "head=.", f"copy={tree}")
    assert done.returncode == 2
    assert (
        done.stderr
        == f"ab_servers: copy's tree '{tree}' has no {missing} (a checkout or `git worktree` of a build)\n"
    )
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        (
            ["head=.", "head=.:configs/cpu.yaml"],
            "'head=.:configs/cpu.yaml' is not TAG=TREE[:PROFILE] with a tag of its own",
        ),
        (["head"], "'head' is not TAG=TREE[:PROFILE] with a tag of its own"),
        (["=."], "'=.' is not TAG=TREE[:PROFILE] with a tag of its own"),
        (["head=.:configs/nope.yaml"], "head's profile 'configs/nope.yaml' is not a file (from '.')"),
        (["head=.:/nope/gpu.yaml"], "head's profile '/nope/gpu.yaml' is not a file (from '.')"),
    ],
)
def test_specs_and_profiles_are_checked(tmp_path: Path, specs: list[str], message: str) -> None:
    done = _ab(tmp_path, *specs)
    assert (done.returncode, done.stderr) == (2, f"ab_servers: {message}\n")


def test_a_relative_profile_is_read_from_its_tree(tmp_path: Path) -> None:
    # configs/cpu.yaml exists here but not in the tree, where the server would read it.
    tree = _tree_without(tmp_path)
    done = _ab(tmp_path, f"copy={tree}:configs/cpu.yaml")
    assert (done.returncode, done.stderr) == (
        2,
        f"ab_servers: copy's profile 'configs/cpu.yaml' is not a file (from '{tree}')\n",
    )
