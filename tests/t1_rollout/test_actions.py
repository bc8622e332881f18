import pytest

from t1_rollout.actions import MAX_COMMAND_DURATION_S, ActionParseError, parse_action, truncate_output


def test_parses_terminus_json_with_surrounding_text():
    text = (
        'Sure.\n{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n", "duration": 0.5}], '
        '"task_complete": false}\nthanks'
    )
    action = parse_action(text)
    assert action.commands[0].keystrokes == "ls\n"
    assert action.commands[0].duration_s == 0.5
    assert action.task_complete is False


def test_braces_inside_strings_do_not_end_the_object():
    action = parse_action('{"commands": [{"keystrokes": "echo \\"}\\" > f\\n"}], "task_complete": true}')
    assert action.commands[0].keystrokes == 'echo "}" > f\n'
    assert action.task_complete is True


def test_duration_is_capped_at_terminus_limit():
    action = parse_action('{"commands": [{"keystrokes": "sleep 1000\\n", "duration": 999}]}')
    assert action.commands[0].duration_s == MAX_COMMAND_DURATION_S


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("no json here", "no JSON object"),
        ('{"commands": [', "not closed"),
        ('{"commands": "ls"}', "'commands' must be a list"),
        ('{"commands": [{"keys": "ls"}]}', "commands[0]"),
        ('{"commands": [{"keystrokes": "ls", "duration": "long"}]}', "commands[0].duration"),
        ('{"task_complete": "yes"}', "task_complete"),
        ("{'single': 'quotes'}", "invalid JSON"),
    ],
)
def test_bad_answers_name_the_problem(text, fragment):
    with pytest.raises(ActionParseError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_action(text)


def test_truncation_keeps_head_and_tail():
    text = "H" * 5000 + "M" * 10000 + "T" * 5000
    out = truncate_output(text, 2000)
    assert out.startswith("H" * 1000)
    assert out.endswith("T" * 1000)
    assert "18000 interior bytes omitted" in out
    assert truncate_output("short", 2000) == "short"
