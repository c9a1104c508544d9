"""The documentation says only what exists: every relative link of README.md, docs/*.md and the bench indexes
resolves (the file or folder, and a #heading in a Markdown file), every repository path the pages show in
inline code exists, and every command their code blocks show is one the project accepts: each `voicechat` /
`./scripts/app.sh` / `python3 -m ...` subcommand and flag (through the real parsers' `--help`, no model
loaded), each script path, each scripts/gpu_run.sh mode and each build_windows.ps1 parameter.

The checker itself is checked on a page with a broken link, a broken anchor and a made-up flag."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
import unicodedata
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "bench" / "results" / "README.md",
                ROOT / "bench" / "probes" / "README.md"])  # fmt: skip
# The tracked top-level entries: an inline-code path that starts with one of these must exist.
REPO_ROOTS = {"app", "engine", "tests", "scripts", "packaging", "bench", "docs", "assets", ".ci", ".github",
              "installer.iss", "pyproject.toml"}  # fmt: skip
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console", "powershell", "ps1", "bat", "cmd"}
FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def split_page(text: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The page's prose lines (code blocks left out) and its fenced code blocks as (language, text)."""
    prose: list[str] = []
    blocks: list[tuple[str, str]] = []
    fence: str | None = None
    language, body = "", []
    for line in text.splitlines():
        match = FENCE.match(line)
        if fence is None and match:
            fence, language, body = match.group(2), match.group(3).lower(), []
        elif fence is not None and line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
            blocks.append((language, "\n".join(body)))
            fence = None
        elif fence is not None:
            body.append(line)
        else:
            prose.append(line)
    return prose, blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters of any script kept), spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").strip().lower()
    text = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    found = set()
    for line in prose:
        match = HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """Every relative link of `page` that does not resolve inside the repository, with the reason."""
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    broken = []
    for line in prose:
        for target in LINK.findall(INLINE_CODE.sub("", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path_part, _, anchor = target.partition("#")
            resolved = (page.parent / path_part).resolve() if path_part else page
            if root.resolve() not in (resolved, *resolved.parents):
                broken.append(f"{target}: outside the repository")
            elif not resolved.exists():
                broken.append(f"{target}: no such file or folder")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(root.resolve())}")
    return broken


def missing_paths(page: Path, root: Path = ROOT) -> list[str]:
    """Repository paths shown in inline code (`engine/paths.py`, `packaging\\build_windows.ps1`) that do not exist."""
    prose, _ = split_page(page.read_text(encoding="utf-8"))
    missing = []
    for line in prose:
        for _, code in INLINE_CODE.findall(line):
            path = code.strip().replace("\\", "/")
            if " " in path or "<" in path or path.split("/")[0] not in REPO_ROOTS:
                continue
            if not (any(root.glob(path.rstrip("/"))) if "*" in path else (root / path).exists()):
                missing.append(code)
    return missing


# --- commands ------------------------------------------------------------------------------------------------

def app_parser() -> argparse.ArgumentParser:
    from app.cli import build_parser

    return build_parser()


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def help_text(run) -> str:
    """What `--help` prints (it must exit 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        run()
    assert exit_info.value.code in (0, None), out.getvalue()
    return out.getvalue()


def flags(tokens: list[str]) -> list[str]:
    """The long options a command line (or a usage synopsis with [..] and |) names, without their values."""
    return [t.split("=")[0] for token in tokens for t in re.split(r"[\[\]|]", token) if t.startswith("--")]


def is_synopsis(tokens: list[str]) -> bool:
    return any(c in token for token in tokens for c in "[]|<>") or any(t.isupper() and len(t) > 1 for t in tokens[:1])


def check_app_command(argv: list[str]) -> list[str]:
    """A `voicechat` command line: its subcommand exists, `--help` of it works, and every flag it names is one
    that parser accepts; a literal line (no [..] synopsis) must also parse as a whole."""
    parser = app_parser()
    commands = subparsers(parser)
    sub = next((t for t in argv if not t.startswith("-")), None)
    problems = []
    if sub is not None and sub not in commands:
        return [f"voicechat has no subcommand {sub!r}"]
    target = commands[sub] if sub else parser
    text = help_text(lambda: app_parser().parse_args([sub, "--help"] if sub else ["--help"]))
    known = set(target._option_string_actions) | (set() if sub else set(parser._option_string_actions))
    problems += [f"voicechat {sub or ''} has no option {flag}" for flag in flags(argv) if flag not in known]
    problems += [f"`voicechat {sub} --help` does not list {flag}" for flag in flags(argv) if flag in known and flag not in text]
    if not problems and not is_synopsis(argv):
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                args, rest = parser.parse_known_args(argv)
        except SystemExit:
            return [f"`voicechat {' '.join(argv)}` does not parse"]
        if rest:
            problems.append(f"`voicechat {' '.join(argv)}`: not accepted: {rest}")
        if sub == "bench" and args.modes:
            from engine.bench.run import MODES

            problems += [f"no benchmark mode {m!r}" for m in args.modes.split(",") if m.strip() not in MODES]
    return problems


def check_module_command(module: str, argv: list[str]) -> list[str]:
    """`python3 -m MODULE ...` of this project: the module exists and its `main(["--help"])` lists every flag named
    (other tools, such as pip, are not this project's to check)."""
    if module.split(".")[0] not in ("app", "engine"):
        return []
    if module == "app":
        return check_app_command(argv)
    try:
        imported = importlib.import_module(module)
    except ImportError as error:
        return [f"no module {module}: {error}"]
    text = help_text(lambda: imported.main(["--help"]))
    return [f"`python3 -m {module}` has no option {flag}" for flag in flags(argv) if flag not in text]


def gpu_run_modes() -> set[str]:
    return set(re.findall(r'"\$mode" = (\w+)', (ROOT / "scripts" / "gpu_run.sh").read_text()))


def ps1_parameters(script: Path) -> set[str]:
    block = re.search(r"^param\((.*?)^\)", script.read_text(encoding="utf-8"), re.S | re.M)
    return set(re.findall(r"\[(?:string|switch|int)\]\$(\w+)", block.group(1))) if block else set()


def check_command_line(line: str) -> list[str]:
    """One line of a shell code block."""
    line = re.sub(r"(^|\s)#.*$", "", line).strip()  # a trailing comment
    if not line:
        return []
    try:
        tokens = shlex.split(line, posix=True)
    except ValueError:
        tokens = line.split()
    while tokens and re.match(r"^[A-Z_]+=", tokens[0]):  # OUT=... PYTHONPATH=... before the command
        tokens = tokens[1:]
    if not tokens:
        return []
    problems = []
    command, argv = tokens[0], tokens[1:]
    for token in tokens:  # every script path the line names
        path = token.replace("\\", "/").removeprefix("./")
        if re.fullmatch(r"[\w.-]+(/[\w.-]+)+\.(sh|py|ps1)", path) and path.split("/")[0] in REPO_ROOTS:
            if not (ROOT / path).is_file():
                problems.append(f"no script {token}")
    if command == "voicechat" or command.removeprefix("./") == "scripts/app.sh":
        problems += check_app_command(argv)
    elif re.fullmatch(r"(\S*/)?python3?(\.\d+)?", command) and argv[:1] == ["-m"] and len(argv) > 1:
        problems += check_module_command(argv[1], argv[2:])
    elif command.removeprefix("./") == "scripts/gpu_run.sh" and argv and argv[0] not in gpu_run_modes():
        problems.append(f"scripts/gpu_run.sh has no mode {argv[0]!r} (it has {sorted(gpu_run_modes())})")
    elif command == "powershell" and "-File" in argv:
        script = ROOT / argv[argv.index("-File") + 1].replace("\\", "/")
        if script.is_file():
            known = ps1_parameters(script)
            problems += [f"{script.name} has no parameter {t}" for t in argv[argv.index("-File") + 2 :]
                         if t.startswith("-") and t[1:] not in known]  # fmt: skip
    return problems


def wrong_commands(page: Path) -> list[str]:
    _, blocks = split_page(page.read_text(encoding="utf-8"))
    problems = []
    for language, body in blocks:
        if language in SHELL_BLOCKS:
            for line in body.splitlines():
                problems += [f"{line.strip()}: {problem}" for problem in check_command_line(line)]
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_in_inline_code_exists(page: Path) -> None:
    assert missing_paths(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_in_a_code_block_exists(page: Path) -> None:
    assert wrong_commands(page) == []


def test_the_readme_shows_the_two_developer_commands_and_stays_short() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    _, blocks = split_page(text)
    shown = [line.split("#")[0].strip() for _, body in blocks for line in body.splitlines()]
    assert "./scripts/test.sh" in shown and "./scripts/app.sh --demo" in shown
    assert len(text.splitlines()) <= 250


def test_the_checker_finds_a_broken_link_anchor_path_and_flag(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# There\n\n## A section\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "# Page\n\n[ok](there.md#a-section) [ok too](#page) [gone](missing.md) [bad anchor](there.md#no-section)\n"
        "[away](../../outside.md) `docs/there.md` `docs/nowhere.md` [web](https://example.com)\n\n"
        "```bash\n./scripts/app.sh bench --turbo\nvoicechat reply in.wav out.wav --greedy\nvoicechat nosuch\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page, root=tmp_path) == [
        "missing.md: no such file or folder",
        "there.md#no-section: no heading #no-section in docs/there.md",
        "../../outside.md: outside the repository",
    ]
    assert missing_paths(page, root=tmp_path) == ["docs/nowhere.md"]
    assert wrong_commands(page) == [
        "./scripts/app.sh bench --turbo: voicechat bench has no option --turbo",
        "voicechat nosuch: voicechat has no subcommand 'nosuch'",
    ]


def test_headings_become_githubs_anchors() -> None:
    assert slug("Decisions, and the runs that showed them") == "decisions-and-the-runs-that-showed-them"
    assert slug("精度: 標準 (bf16) と省メモリ・高速 (int8)") == "精度-標準-bf16-と省メモリ高速-int8"
    assert slug("`voicechat bench` options") == "voicechat-bench-options"
