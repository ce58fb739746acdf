"""The README's examples run as they are, against the test server (PUNCTUAL_URL)."""

import pathlib
import py_compile
import re

HERE = pathlib.Path(__file__).resolve().parents[1]


def test_readme_examples_run(open_server, tenants_server, capsys):
    blocks = re.findall(r"```python\n(.*?)```", (HERE / "README.md").read_text(), re.S)
    assert blocks, "README.md has no python block"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "created: True version:" in out, out
    assert "closing order-8813 {'order': 8813}" in out, out


def test_the_receiver_example_compiles():
    py_compile.compile(str(HERE / "examples" / "receiver.py"), doraise=True)
