"""Property tests of TITO stitching on the real Qwen3.5 vocabulary (T1 §4.1): drift 0 whatever the turns.

Random turn sequences with random non-canonical sampled splits (a text cut at random places and each piece
encoded alone: same bytes, other ids), through a TITO session (every boundary strict) and through a harness
that re-renders the conversation with the stock pruning template (every boundary repaired, none split); and
random id-level boundaries against a brute-force search of the normalized case.
"""

import unicodedata

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from t1_spec import TitoSpec
from t1_tito import ChatTemplate, TitoSession, Turn, load_tokenizer, stitch

TOK = load_tokenizer()
SPEC = TitoSpec()
BOUNDS = {"normalize_max_s": SPEC.normalize_max_s, "normalize_max_u": SPEC.normalize_max_u}
META = {"task_id": "t", "family": "f", "trial_id": "trial-p", "reward": 0.5}
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Letters, digits, shell punctuation, spaces, accents and CJK: texts whose BPE splits vary.
ALPHABET = st.sampled_from(list("abcdefghijklmnopqrstuvwxyz0123456789 _-./|&;:=\"'{}[]()éüß漢字€"))
WORD = st.text(ALPHABET, min_size=1, max_size=40)
MARKERS = ("Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot")


@st.composite
def sampled_answer(draw):
    """(text, ids): the text starts with a letter; ids = the encodings of random pieces of it, joined."""
    text = unicodedata.normalize("NFC", draw(st.sampled_from("abcdefgh")) + draw(WORD))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True) if i < j]
    ids = [t for piece in pieces for t in TOK.encode(piece)]
    assume(TOK.decode_bytes(ids) == text.encode())
    return text, ids


def as_turn(prompt, output):
    return Turn(
        prompt_ids=np.asarray(prompt, dtype=np.int64),
        output_ids=np.asarray(output, dtype=np.int64),
        output_logprobs=np.full(len(output), -0.5),
        policy_version=1,
        finish_reason="stop",
    )


def loss_region(samples):
    return [int(t) for s in samples for t in s.token_ids[s.loss_mask == 1]]


@SETTINGS
@given(answers=st.lists(sampled_answer(), min_size=1, max_size=6), observations=st.lists(WORD, min_size=6))
def test_tito_session_turns_are_all_strict_with_drift_0(answers, observations):
    session = TitoSession(TOK, ChatTemplate())
    prompt = session.start([{"role": "user", "content": "Do the task."}])
    turns = []
    for (_, ids), obs in zip(answers, observations, strict=False):
        sampled = ids + [TOK.im_end_id]
        turns.append(as_turn(prompt, sampled))
        prompt = session.next_prompt(prompt, sampled, [{"role": "user", "content": obs}])
    result = stitch(turns, repair="retokenized", tokenizer=TOK, **BOUNDS, **META)
    assert [c.kind for c in result.boundaries] == ["strict"] * (len(turns) - 1)
    (sample,) = result.samples
    last = turns[-1]
    assert sample.token_ids.tolist() == last.prompt_ids.tolist() + last.output_ids.tolist()
    assert loss_region(result.samples) == [t for turn in turns for t in turn.output_ids.tolist()]
    assert result.audit.drifted_loss_tokens == 0 and result.audit.affected_loss_tokens == 0


def differing_core(sampled, copy):
    head = 0
    while head < min(len(sampled), len(copy)) and sampled[head] == copy[head]:
        head += 1
    tail = 0
    while tail < min(len(sampled), len(copy)) - head and sampled[-1 - tail] == copy[-1 - tail]:
        tail += 1
    return len(sampled) - head - tail


@SETTINGS
@given(answers=st.lists(sampled_answer(), min_size=2, max_size=6), observations=st.lists(WORD, min_size=6))
def test_rerendered_pruned_history_is_repaired_never_split_with_drift_0(answers, observations):
    template = ChatTemplate(name="qwen3_5_stock")
    messages = [{"role": "user", "content": "Do the task."}]
    turns, canon = [], []
    for k, ((text, ids), obs) in enumerate(zip(answers, observations, strict=False)):
        # A first word no other text holds: an answer whose head repeats the prompt's tail (an earlier answer
        # within 96 ids) lets a larger s match by coincidence, which the normalized case, tried first, takes.
        marker = MARKERS[k] + " "
        text, ids = marker + text, TOK.encode(marker) + ids
        render = template.render(messages, add_generation_prompt=True, escape=TOK.escape_content)
        turns.append(as_turn(TOK.encode_chat(render), ids + [TOK.im_end_id]))
        canon.append(TOK.encode(text) + [TOK.im_end_id])
        messages += [{"role": "assistant", "content": TOK.decode(ids)}, {"role": "user", "content": obs}]
    result = stitch(turns, repair="retokenized", tokenizer=TOK, **BOUNDS, **META)
    audit = result.audit
    assert audit.splits == 0 and audit.chunks == 1 and audit.drifted_loss_tokens == 0
    sampled = [t.output_ids.tolist() for t in turns]
    assert loss_region(result.samples) == [t for ids in sampled for t in ids]
    # Independently: p_(i+1) = drop_4(p_i) || canonical(a_i) || rest; the stream keeps a_i, then rest.
    expected, retokenized = turns[0].prompt_ids.tolist() + sampled[0], 0
    for i, (prev, nxt) in enumerate(zip(turns, turns[1:], strict=False)):
        head = len(prev.prompt_ids) - 4
        assert nxt.prompt_ids.tolist()[head : head + len(canon[i])] == canon[i]
        expected += nxt.prompt_ids.tolist()[head + len(canon[i]) :] + sampled[i + 1]
        case = result.boundaries[i]
        if sampled[i] == canon[i]:
            assert (case.kind, case.s, case.u) == ("normalized", 4, 0)
        else:  # a non-canonical split: its bytes reappear re-encoded, never a drop
            assert (case.kind, case.s, case.copy_start) == ("retokenized", 4, head)
            retokenized += differing_core(sampled[i], canon[i])
    assert result.samples[0].token_ids.tolist() == expected
    assert audit.retokenized_context_tokens == retokenized
    assert audit.affected_loss_tokens == sum(len(ids) for ids in sampled[1:])


def reappears(tail, following):
    target = TOK.decode_bytes(tail)
    return any(TOK.decode_bytes(following[:j]) == target for j in range(1, len(following) + 1))


def closed_at(nxt, start):
    """Position of the first <|im_end|> at or after ``start`` with no <|im_start|> before it, or None."""
    for j in range(start, len(nxt)):
        if nxt[j] in (TOK.im_end_id, TOK.im_start_id):
            return j if nxt[j] == TOK.im_end_id else None
    return None


def brute_normalized(p, a, nxt):
    """Least (s + u, s) over the bounds, with the context start; keeps an id of p and of a; skips tails that
    reappear re-encoded, and tails whose replacement in ``nxt`` no <|im_end|> closes."""
    best = None
    for s in range(min(SPEC.normalize_max_s, len(p) - 1) + 1):
        for u in range(SPEC.normalize_max_u + 1):
            if (a and u >= len(a)) or (not a and u):
                continue
            kept = p[: len(p) - s] + a[: len(a) - u]
            if nxt[: len(kept)] != kept or (u and reappears(a[len(a) - u :], nxt[len(kept) :])):
                continue
            c = len(kept)
            if u:
                close = closed_at(nxt, c)
                if close is None:
                    continue
                c = close + 1 if a[-1] == TOK.im_end_id else close
            if best is None or (s + u, s) < (best[0] + best[1], best[0]):
                best = (s, u, c)
    return best


IDS = st.lists(st.integers(0, 300), min_size=1, max_size=30)
CONTROL = st.sampled_from([TOK.im_end_id, TOK.im_start_id])


@SETTINGS
@given(
    p=IDS,
    a=IDS,
    rest=st.lists(st.one_of(st.integers(0, 300), CONTROL), min_size=1, max_size=30),
    s=st.integers(0, 40),
    u=st.integers(0, 24),
    noise=st.lists(st.integers(0, 300)),
    closes=st.booleans(),
    sampled_close=st.booleans(),
)
def test_random_boundaries_match_the_brute_force_normalized_search(
    p, a, rest, s, u, noise, closes, sampled_close
):
    # The harness keeps drop_s(p) || drop_u(a), may put `noise` in place of the dropped answer tail, and
    # closes the turn (or not) before the rest; the sampled a may end with its own <|im_end|>.
    a = a + [TOK.im_end_id] if sampled_close else a
    s, u = min(s, len(p) - 1), min(u, len(a) - 1)
    nxt = p[: len(p) - s] + a[: len(a) - u] + noise + [TOK.im_end_id] * closes + rest
    result = stitch([as_turn(p, a), as_turn(nxt, [7])], repair="normalized", tokenizer=TOK, **BOUNDS, **META)
    (case,) = result.boundaries
    strict = nxt[: len(p) + len(a)] == p + a
    expected = None if strict else brute_normalized(p, a, nxt)
    if strict:
        assert case.kind == "strict"
    elif expected is None:
        assert case.kind == "split" and len(result.samples) == 2
    else:
        assert (case.kind, case.s, case.u, case.context_start) == ("normalized", *expected)
        # the sampled ids, then context: nothing the harness rendered in place of the dropped tail
        assert result.samples[0].token_ids.tolist() == p + a + nxt[expected[2] :] + [7]
        if case.u:
            assert expected[2] >= nxt.index(TOK.im_end_id, len(p) - case.s + len(a) - case.u)
    assert result.audit.drifted_loss_tokens == 0
    assert loss_region(result.samples) == a + [7]
