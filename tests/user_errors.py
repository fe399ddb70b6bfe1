"""The command line's answer to a user error, as the tests read it."""
from dlbench.harness.cli import main


def error_of(capsys, argv: list[str]) -> str:
    """Runs the CLI, expects a user error (exit 2), returns its one message."""
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("dlbench: error: "), captured.err
    return captured.err.removeprefix("dlbench: error: ").strip()
