"""Expert turns for SFT: reference solutions as harness actions, conversations as TITO samples."""

from __future__ import annotations

import pytest

from t1_rollout.actions import parse_action
from t1_rollout.expert import expert_texts, samples_from_messages, solution_keystrokes
from t1_rollout.harness import COMPLETE_CONFIRM, initial_messages
from t1_tito import ChatTemplate, TitoSession, load_tokenizer

SOLVE = "#!/bin/bash\nset -euo pipefail\ncd /app\nsort a.txt > b.txt\n"


def test_reference_solution_is_one_action_then_the_confirmation():
    first, second = (parse_action(t) for t in expert_texts(SOLVE))
    assert [c.keystrokes for c in first.commands] == ["cd /app\nsort a.txt > b.txt\n"]
    assert first.task_complete and second.task_complete and not second.commands
    assert "set -e" not in solution_keystrokes(SOLVE) and "#!" not in solution_keystrokes(SOLVE)
    with pytest.raises(ValueError, match="no command"):
        solution_keystrokes("#!/bin/bash\nset -e\n")


def test_loss_mask_covers_exactly_the_assistant_turns():
    tito = TitoSession(load_tokenizer("qwen3.5"), ChatTemplate())
    texts = expert_texts(SOLVE)
    messages = [
        *initial_messages("Sort a.txt into b.txt.", "root@box:/# "),
        {"role": "assistant", "content": texts[0]},
        {"role": "user", "content": COMPLETE_CONFIRM},
        {"role": "assistant", "content": texts[1]},
    ]
    (sample,) = samples_from_messages(tito, messages, task_id="t", trial_id="t#0")
    sample.validate()
    ids, mask = sample.token_ids, sample.loss_mask.astype(bool)
    tok = tito.tokenizer
    expected = [*tok.encode(texts[0]), tok.im_end_id, *tok.encode(texts[1]), tok.im_end_id]
    assert ids[mask].tolist() == expected
    # the prompt is the harness's own first prompt, bit for bit
    first = tito.start(messages[:2])
    assert ids[: len(first)].tolist() == first and not mask[: len(first)].any()
    with pytest.raises(ValueError, match="no assistant message"):
        samples_from_messages(tito, messages[:2], task_id="t", trial_id="x")
