"""The README and docs/ name only code that exists: every back-ticked `module.name`, `Class.attribute` and `file.py`
they mention, and every relative link, resolves in this checkout — so prose cannot drift from the code again."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from ttlearn.cli import app
from ttlearn.envs.base import ENVS
from ttlearn.llm.base import LLMS
from ttlearn.memory.base import MEMORIES
from ttlearn.players.base import PLAYERS
from ttlearn.train.base import TRAINERS

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "ttlearn"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

ENTRY_POINT_GROUPS = {registry.group for registry in (ENVS, MEMORIES, LLMS, PLAYERS, TRAINERS)}
"""Names of entry-point groups (`ttlearn.memories`), which look like modules and are not."""
OTHER_PROJECTS = {
    "TextWorldExpressEnv.step",  # textworld-express (docs/household.md)
    "memory.k_retrieve",  # MemRL's released configs (docs/memrl.md)
    "rl_config.sim_threshold",
    "rl_config.tau",
    "rl_config.topk",
    "mysql.user",  # MariaDB's table of accounts (docs/db_bench.md)
    "main.py",  # the file HumanEval's harness writes (docs/code.md)
}
"""Names of other projects' code that the docs quote, which share the look of ttlearn's."""

DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
PY_FILE = re.compile(r"^[\w./-]+\.py$")
NOT_CODE = {"json", "jsonl", "yaml", "md", "gz", "sqlite", "txt", "html", "toml", "safetensors", "pt", "gguf", "sh"} | {
    "cpp"
}
"""Last parts of a dotted span that make it a data file's name, not a code reference."""
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def module_name(path: Path) -> str:
    parts = ("ttlearn", *path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in SRC.rglob("*.py")}


def instance_attributes(path: Path) -> dict[str, set[str]]:
    """Class name → the attributes its methods assign on `self` (which the class object does not hold)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            names = found.setdefault(node.name, set())
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name) and inner.value.id == "self":
                    names.add(inner.attr)
    return found


CLASSES: dict[str, list[str]] = {}
ASSIGNED: dict[tuple[str, str], set[str]] = {}
for _name, _path in MODULES.items():
    for _class, _attributes in instance_attributes(_path).items():
        CLASSES.setdefault(_class, []).append(_name)
        ASSIGNED[(_name, _class)] = _attributes


def has_attribute(obj: object, name: str) -> bool:
    """`obj.name` exists: on the object or its class, as a field (pydantic, dataclass), or as an attribute a class
    of its MRO assigns on `self`."""
    fields = {**(getattr(obj, "model_fields", None) or {}), **(getattr(obj, "__dataclass_fields__", None) or {})}
    if hasattr(obj, name) or name in fields:
        return True
    return isinstance(obj, type) and any(
        name in ASSIGNED.get((klass.__module__, klass.__name__), set()) for klass in obj.__mro__
    )


def resolves(module: str, attributes: list[str]) -> bool:
    """`module` imports and each attribute (or submodule) of the chain exists."""
    try:
        obj: object = importlib.import_module(module)
    except ImportError:
        return False
    for depth, attribute in enumerate(attributes):
        inner = ".".join([module, *attributes[: depth + 1]])
        if inner in MODULES:
            obj = importlib.import_module(inner)
        elif has_attribute(obj, attribute):
            obj = getattr(obj, attribute, None)
        else:
            return False
    return True


def dotted_exists(name: str) -> bool | None:
    """Whether a back-ticked `a.b.c` names code of this package (a module path from `ttlearn` or from one of its
    modules, `module.name`, `Class.attribute`); None for another installed package's name."""
    parts = name.split(".")
    if name in ENTRY_POINT_GROUPS or name in OTHER_PROJECTS:
        return None
    if parts[0] == "ttlearn":
        prefixes = [".".join(parts[:k]) for k in range(len(parts), 0, -1)]
        return any(resolves(prefix, parts[prefix.count(".") + 1 :]) for prefix in prefixes if prefix in MODULES)
    modules = [m for m in MODULES if m.rsplit(".", 1)[-1] == parts[0]]
    if modules:
        return any(resolves(m, parts[1:]) for m in modules)
    if parts[0] in CLASSES:
        return any(resolves(m, parts) for m in CLASSES[parts[0]])
    return None if importlib.util.find_spec(parts[0]) is not None else False


def file_exists(name: str) -> bool:
    """A back-ticked `path/to/file.py`: from the repository or the package (`envs/base.py`), or a bare file name found
    anywhere in the repository (`first_run.py`, of benchmarks/). A path whose folder this repository does not have
    is another project's (`verl/trainer/ppo/core_gigpo.py`, LaMer's)."""
    if name in OTHER_PROJECTS:
        return True
    bases = (ROOT, SRC, SRC.parent)
    if "/" in name:
        folders = [base / Path(name).parent for base in bases if (base / Path(name).parent).is_dir()]
        return not folders or any((folder / Path(name).name).is_file() for folder in folders)
    return any(p.is_file() for p in ROOT.glob(f"**/{name}") if ".git" not in p.parts)


def stale_references(text: str) -> list[str]:
    """The back-ticked code references of a markdown text (outside fenced blocks) that name nothing in this
    checkout."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    stale = []
    for span in dict.fromkeys(m.group(1).strip() for m in re.finditer(r"`([^`\n]+)`", prose)):
        if PY_FILE.match(span):
            if not file_exists(span):
                stale.append(span)
        elif DOTTED.match(span) and span.rsplit(".", 1)[1] not in NOT_CODE and dotted_exists(span) is False:
            stale.append(span)
    return stale


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_reference_of_the_docs_exists(doc: Path) -> None:
    assert stale_references(doc.read_text()) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_of_the_docs_exists(doc: Path) -> None:
    targets = [t for t in LINK.findall(doc.read_text()) if "://" not in t and not t.startswith("mailto:")]
    assert [t for t in targets if not (doc.parent / t).exists()] == []


def test_a_stale_name_is_caught() -> None:
    """The check itself: names of code that is gone fail, names of code that exists and other projects' pass."""
    gone = "`runs.py`, `rollout/units.py` keep `rollout.units.unit_seeds`; `trials.instance_facts`; `RunDir.record_all`"
    stale = ["runs.py", "rollout/units.py", "rollout.units.unit_seeds", "trials.instance_facts", "RunDir.record_all"]
    assert stale_references(gone) == stale
    here = (
        "`runs/layout.py`, `rollout.unit.unit_seeds`, `ttlearn.run`, `RunDir.record_played`, `RunConfig.units`, "
        "`HFPolicy.device`, `first_run.py`, `numpy.mean`, `run.json`, `ttlearn.memories`, `verl/trainer/ppo/x.py`"
        "\n```\n`not.checked`\n```"
    )
    assert stale_references(here) == []


def test_ci_runs_exactly_the_readmes_second_command() -> None:
    """`.ci/run` is the README's second command, word for word: what a user runs is what CI ran."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("# 2. install the test extras") :].split("```", 1)[0]
    second = [line for line in block.splitlines() if line and not line.startswith("#")]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[-len(second) :] == second


def readme_commands(text: str) -> list[list[str]]:
    """The `ttlearn …` commands of a markdown text's ```bash blocks, each as its words after `ttlearn` (environment
    assignments before it, continuations and trailing comments dropped; `&&` and `;` separate commands)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            for segment in re.split(r"&&|;", "" if line.startswith("#") else line.split(" #", 1)[0]):
                words = shlex.split(segment)
                while words and re.match(r"^[A-Z_]+=", words[0]):
                    words = words[1:]
                if words[:1] == ["ttlearn"]:
                    commands.append(words[1:])
    return commands


def parse_command(command: typer.core.TyperCommand | TyperGroup, args: list[str], parent=None) -> None:
    """Parse `args` as the CLI would, down to the subcommand, without running it: an unknown command or option, or a
    value of the wrong type, raises the CLI's usage error."""
    context = command.make_context(command.name or "ttlearn", list(args), parent=parent)
    if isinstance(command, TyperGroup):
        _, sub, rest = command.resolve_command(context, [*context._protected_args, *context.args])
        parse_command(sub, rest, context)


def test_every_command_of_the_readme_parses() -> None:
    """A newcomer copies the README's commands: each names a command and options the CLI has."""
    commands = readme_commands((ROOT / "README.md").read_text())
    assert len(commands) >= 6 and ["data", "prepare", "sql"] in commands
    root = typer.main.get_command(app)
    for words in commands:
        parse_command(root, words)
    with pytest.raises(Exception, match="No such option: --no-such-option"):
        parse_command(root, ["run", "sql", "--no-such-option"])
    with pytest.raises(Exception, match="No such command 'no-such-command'"):
        parse_command(root, ["data", "no-such-command"])
