import pytest

from t1._errors import EXIT_CHECK_FAILED, EXIT_INVALID_INPUT, reported


def test_messages_keep_bracketed_text(capsys):
    with pytest.raises(SystemExit) as info:
        with reported(False):
            raise ValueError("task.toml: field [metadata] difficulty is missing")
    assert info.value.code == EXIT_INVALID_INPUT
    assert "[metadata]" in capsys.readouterr().err


def test_other_failures_exit_1():
    with pytest.raises(SystemExit) as info:
        with reported(False):
            raise RuntimeError("boom")
    assert info.value.code == EXIT_CHECK_FAILED


@pytest.mark.parametrize(
    ("exc", "code"), [(ValueError, EXIT_INVALID_INPUT), (RuntimeError, EXIT_CHECK_FAILED)]
)
def test_debug_prints_the_traceback_and_keeps_the_exit_code(exc, code, capsys):
    with pytest.raises(SystemExit) as info:
        with reported(True):
            raise exc("boom")
    assert info.value.code == code
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and f"{exc.__name__}: boom" in err


@pytest.mark.parametrize("exc", ["typer.Exit(1)", "typer.Abort()"])
def test_typer_exits_pass_through_without_an_error_line(exc, capsys):
    import typer

    with pytest.raises((typer.Exit, typer.Abort)):
        with reported(False):
            raise eval(exc)
    assert capsys.readouterr().err == ""
