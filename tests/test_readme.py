"""The command lines and Python examples of the README and docs/ run as written, in order.

Command lines run in a fresh folder, with ``../shared/datasets`` pointing at the data folder,
through ``gbpn.cli.main``: first the ``gbpn`` lines of the README's usage sections (SECTIONS),
then every ``gbpn`` line of docs/usage.md, each after the lines above it. Only the cost is
capped, by options appended to a line (argparse keeps the last value): 2 epochs and 1 trial for
training, 1 label sample and a short burn-in for the MRF sampler, one grid for
``identifiability``, no 2-D layout for ``convergence``. A ``--config`` line gets no cap: it
repeats a recorded (capped) run, and refuses other training options. ``gbpn benchmark`` lines
(minutes to hours each), the install / pytest lines and ``torchrun`` lines are not run here.

The README's ``python`` blocks under "### Library" run as one script, and so do those of
docs/library.md, with their training loops cut to 2 iterations.
"""
import re
import shlex
from pathlib import Path

import pytest
import torch

from gbpn.cli import main

pytestmark = pytest.mark.slow  # every command of the README and docs/usage.md, trainings included

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
USAGE = ROOT / "docs" / "usage.md"
LIBRARY = ROOT / "docs" / "library.md"
SECTIONS = ("### Command line", "### Reading a trained model", "### Comparisons", "### Your own graph", "### Library")
CAPS = {
    "train": ["--epochs", "2", "--trials", "1", "--hidden", "16"],
    "sampling": ["--epochs", "1", "--trials", "1"],
    "identifiability": ["--epochs", "1", "--kinds", "ising+"],
    "convergence": ["--no-layout"],
    "--fanouts": ["--epochs", "1", "--trials", "1", "--fanouts", "2", "0"],
    "sample-mrf": ["--samples", "1", "--burn-in", "5", "--thin", "1"],
}


def _headings(lines):
    """(line number, level) of every Markdown heading outside fenced code."""
    fenced = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{1,6}) ", line)):
            yield i, len(m.group(1))


def _section(text: str, head: str) -> str:
    """The text from the heading that starts with ``head`` to the next heading of its level or above."""
    lines = text.splitlines(keepends=True)
    heads = list(_headings(lines))
    found = [(i, lvl) for i, lvl in heads if lines[i].startswith(head)]
    assert found, f"no section {head!r}"
    start, level = found[0]
    end = next((i for i, lvl in heads if i > start and lvl <= level), len(lines))
    return "".join(lines[start:end])


def _blocks(lang: str, path: Path, sections=None):
    """Fenced ``lang`` blocks of ``path`` (of its ``sections`` only, if given), in order."""
    text = path.read_text()
    parts = [_section(text, head) for head in sections] if sections else [text]
    return [b for part in parts for b in re.findall(rf"^```{lang}\n(.*?)^```", part, flags=re.S | re.M)]


def _commands(path: Path, sections=None):
    for block in _blocks("bash", path, sections):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("gbpn ") and not line.startswith("gbpn benchmark"):
                yield line


def _capped(argv):
    if "--config" in argv:
        return argv
    extra = [cap for key, cap in CAPS.items() if key in argv]
    return argv + [a for cap in extra for a in cap]


def test_readme_and_usage_lines_run_as_written_in_order(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    readme, usage = list(_commands(README, SECTIONS)), list(_commands(USAGE))
    assert any(c.startswith("gbpn predict --checkpoint runs/cora/model.pt") for c in readme)
    assert usage, "docs/usage.md has no gbpn command lines"
    for source, line in [("README", c) for c in readme] + [("docs/usage.md", c) for c in usage]:
        argv = shlex.split(line.replace("../shared/datasets", data_dir))[1:]
        code = main(_capped(argv))
        err = capsys.readouterr().err
        assert code == 0, f"{source} line failed: {line}\n{err}"
    assert (tmp_path / "runs" / "cora" / "predictions.csv").is_file()  # where `gbpn plot runs/cora` reads it
    assert (tmp_path / "runs" / "cora" / "coupling.png").is_file()
    assert (tmp_path / "runs" / "my-mrf-gbpn-seed0" / "predictions.csv").is_file()


def test_benchmark_lines_parse_and_name_their_data():
    """The ``gbpn benchmark`` lines are not run (minutes to hours each), but each one parses, and names
    its data folder unless its data sets are generated (synth-*) or downloaded by OGB: a grid stops at
    its first absent data set."""
    from gbpn.cli import build_parser
    from gbpn.experiments.benchmark import PRESETS

    lines = [line for path in (README, USAGE) for block in _blocks("bash", path)
             for line in (x.split("  #")[0].strip() for x in block.replace("\\\n", " ").splitlines())
             if line.startswith("gbpn benchmark")]
    assert len(lines) >= 5
    for line in lines:
        args = build_parser().parse_args(shlex.split(line)[1:])
        datasets = PRESETS[args.preset]["datasets"] if args.preset else args.datasets
        own = all(d.startswith(("synth-", "ogbn-")) for d in datasets)
        assert args.data_dir or own, f"{line}: give --data-dir"


def _script(path: Path, data_dir: str, sections=None) -> str:
    code = "\n".join(_blocks("python", path, sections))
    assert code, f"{path.name} has no python examples"
    code = code.replace("../shared/datasets", data_dir)
    code = re.sub(r"in range\(\d+\):", "in range(2):", code)  # cost caps only
    return code.replace("fullgraph=True)", 'fullgraph=True, backend="aot_eager")')  # no C++ build


def test_readme_library_example_runs(data_dir):
    scope: dict = {}
    exec(compile(_script(README, data_dir, ("### Library",)), "README.md", "exec"), scope)
    assert scope["log_p"].shape == (2708, 7)
    assert scope["model"].H.shape == (7, 7)


def test_library_page_examples_run(data_dir):
    scope: dict = {}
    exec(compile(_script(LIBRARY, data_dir), "docs/library.md", "exec"), scope)
    assert scope["log_p"].shape == (2708, 7)
    torch.testing.assert_close(scope["again"], scope["beliefs"].detach(), atol=1e-4, rtol=1e-4)


def test_user_docs_name_no_commit_hashes():
    """A commit hash (7-40 hex digits, letters and digits) means nothing to a user: the docs name versions or
    say what changed instead."""
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{p.name}: {h}" for p in pages for h in re.findall(r"\b[0-9a-f]{7,40}\b", p.read_text())
             if re.search(r"[a-f]", h) and re.search(r"[0-9]", h)]
    assert not found, found


HEAVY = re.compile(r"\bgbpn (train|benchmark)\b|-m gbpn train\b|\bpytest\b|\bgbpn analyze (sampling|identifiability)\b")
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:[–-]\d+(?:\.\d+)?)?\s*(?:s|min|h)\b|\bhours\b")


def _heavy_blocks(text: str):
    """Per fenced bash block of ``text``: its heavy lines (commands that train, or run the tests), each with the
    durations its own comment states, and the durations of the prose after the block (to the next block or
    heading)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("```bash"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            commands = "\n".join(lines[i + 1:end]).replace("\\\n", " ").splitlines()
            heavy = [(c, DURATION.findall(c.partition("  #")[2])) for c in commands
                     if HEAVY.search(c.partition("  #")[0]) and "--table-only" not in c]
            after = []
            for line in lines[end + 1:]:
                if line.startswith(("```", "#")):
                    break
                after.append(line)
            if heavy:
                yield heavy, DURATION.findall(" ".join(after))
            i = end
        i += 1


def test_every_heavy_readme_line_says_how_long_it_takes():
    """Every README command that trains (or runs the tests) carries a duration: in its own comment, or in the prose
    right after its block, which holds at least one duration per heavy line without its own."""
    text = README.read_text()
    blocks = list(_heavy_blocks(text))
    assert len(blocks) >= 8  # the install line, the tests, Cora, Chameleon, the grids, torchrun, the result tables
    missing = []
    for heavy, after in blocks:
        bare = [c for c, own in heavy if not own]
        if len(after) < len(bare):
            missing += bare
    assert not missing, "README lines that train without saying how long they take:\n" + "\n".join(missing)
