"""TITO's four boundary cases (T1 §4.1): strict, normalized, retokenized, split; forced splits; the audit."""

import numpy as np
import pytest

from t1_spec import TitoSpec
from t1_tito import DriftAudit, RoutingMismatchError, Turn, routing_start_len, stitch

L, K = 2, 3
META = {"task_id": "t", "family": "f", "trial_id": "trial-9"}
BOUNDS = {"normalize_max_s": TitoSpec().normalize_max_s, "normalize_max_u": TitoSpec().normalize_max_u}
# Ids 0..93 of the Qwen3.5 vocabulary are the single printable ASCII characters '!'..'~', one byte each, so
# distinct ids below 94 never decode to the same bytes: the normalized case's re-encoding check never fires.
THINK = [60, 61, 62, 63]  # stands for the 4 ids of the generation prompt's empty '<think>\n\n</think>\n\n'


def rows(start: int, end: int, offset: int = 0) -> np.ndarray:
    """Routing rows for positions [start, end): every expert id of row j is j + offset."""
    return (np.arange(start, end, dtype=np.int32)[:, None, None] + offset) * np.ones((1, L, K), np.int32)


def turn(prompt, output, *, routed=False, start=0, offset=0, starts_chunk=False) -> Turn:
    prompt, output = np.asarray(prompt, dtype=np.int64), np.asarray(output, dtype=np.int64)
    end = prompt.size + output.size - 1
    return Turn(
        prompt_ids=prompt,
        output_ids=output,
        output_logprobs=np.array([-0.1 * (i + 1) for i in range(output.size)]),
        routed_experts=rows(start, end, offset) if routed else None,
        routed_experts_start_len=start,
        policy_version=1,
        finish_reason="stop",
        starts_chunk=starts_chunk,
    )


def run(turns, repair="retokenized", tok=None, **bounds):
    return stitch(turns, reward=0.5, repair=repair, tokenizer=tok, **(bounds or BOUNDS), **META)


def test_pruned_empty_think_block_is_normalized_with_s_4(tok):
    # p_2 = drop_4(p_1) || a_1 || obs: the template left the generation prompt's empty think block out.
    p1, a1 = [1, 2, 3, *THINK], [10, 11, 12]
    obs, a2 = [40, 41], [13, 14]
    p2 = [1, 2, 3, *a1, *obs]
    result = run([turn(p1, a1), turn(p2, a2)], tok=tok)
    (case,) = result.boundaries
    assert (case.kind, case.s, case.u, case.context_start) == ("normalized", 4, 0, 6)
    (s,) = result.samples
    assert s.token_ids.tolist() == p1 + a1 + obs + a2  # the sampled a_1 after the think block it followed
    assert s.loss_mask.tolist() == [0] * 7 + [1] * 3 + [0, 0] + [1, 1]
    audit = result.audit
    assert audit.case_counts == {
        "strict": 0,
        "normalized": 1,
        "retokenized": 0,
        "split": 0,
        "forced_split": 0,
    }
    assert audit.dropped_context_tokens == 4 and audit.affected_loss_tokens == 2
    assert audit.drifted_loss_tokens == 0 and audit.retokenized_context_tokens == 0
    assert audit.total_tokens == len(p1 + a1 + obs + a2)


def test_normalized_answer_tail_drop(tok):
    # The harness stripped the answer's last two ids (say trailing whitespace) before its close: u = 2.
    end = tok.im_end_id
    p1, a1 = [1, 2], [10, 11, 12, 13, end]
    p2 = [1, 2, 10, 11, 12, end, 40, 41]
    result = run([turn(p1, a1), turn(p2, [14])], tok=tok)
    assert [(c.kind, c.s, c.u) for c in result.boundaries] == [("normalized", 0, 2)]
    assert result.samples[0].token_ids.tolist() == [1, 2, 10, 11, 12, 13, end, 40, 41, 14]


def brute_force(p, a, nxt, max_s, max_u):
    """Every (s, u) in the bounds, by list slicing, ranked by (s + u, s); keeps one id of p and of a."""
    found = []
    for s in range(max_s + 1):
        for u in range(max_u + 1):
            if s >= len(p) or (a and u >= len(a)) or (not a and u):
                continue
            kept = p[: len(p) - s] + a[: len(a) - u]
            if nxt[: len(kept)] == kept:
                found.append((s + u, s, u))
    return min(found)[1:] if found else None


def test_normalized_takes_the_least_s_plus_u_then_the_least_s(tok):
    # Candidates: (s=1, u=2) and (s=3, u=0) both cost 3; (s=2, u=...) does not fit. Smallest s wins the tie.
    p1, a1 = [1, 2, 3, 4, 5], [3, 4, 5]
    p2 = [1, 2, 3, 4, 3, tok.im_end_id, 70, 71]  # the harness's close follows the kept answer id
    assert brute_force(p1, a1, p2, 96, 16) == (1, 2)
    result = run([turn(p1, a1), turn(p2, [9])], tok=tok)
    assert [(c.s, c.u) for c in result.boundaries] == [(1, 2)]
    assert result.samples[0].token_ids.tolist() == p1 + a1 + [tok.im_end_id, 70, 71, 9]


@pytest.mark.parametrize(
    ("s", "u", "kind"), [(96, 0, "normalized"), (97, 0, "split"), (0, 16, "normalized"), (0, 17, "split")]
)
def test_normalized_bounds_are_96_and_16(tok, s, u, kind):
    p1 = [1] + [50] * s  # s trailing prompt ids the next prompt leaves out
    a1 = [2] + [51] * u  # u trailing answer ids likewise, then the harness's turn close
    p2 = [1, 2, tok.im_end_id, 70]
    result = run([turn(p1, a1), turn(p2, [3])], tok=tok)
    assert result.boundaries[0].kind == kind
    assert result.audit.splits == (kind == "split")


def test_a_normalizable_boundary_splits_under_strict():
    p1, a1 = [1, 2, *THINK], [10, 11]
    p2 = [1, 2, 10, 11, 40]
    result = stitch([turn(p1, a1), turn(p2, [12])], reward=0.5, **META)
    assert result.boundaries[0].kind == "split" and result.chunks_split == 1
    assert [s.token_ids.tolist() for s in result.samples] == [p1 + a1, p2 + [12]]


def noncanonical(tok):
    """'cat notes.txt | grep -n todo' sampled as 'cat ' + 'notes...' (a non-canonical split) + <|im_end|>."""
    text = "cat notes.txt | grep -n todo"
    sampled = tok.encode("cat ") + tok.encode(text[4:]) + [tok.im_end_id]
    canonical = tok.encode(text) + [tok.im_end_id]
    assert sampled != canonical and tok.decode_bytes(sampled) == tok.decode_bytes(canonical)
    return sampled, canonical


def test_retokenized_copy_never_enters_the_stream(tok):
    sampled, canonical = noncanonical(tok)
    # Independently: they differ only in 'cat' + ' ' + 'notes' against 'cat' + ' notes': 2 ids against 1.
    assert sampled[0] == canonical[0] and sampled[3:] == canonical[2:] and len(sampled) == len(canonical) + 1
    p1 = tok.encode_chat("<|im_start|>user\nList the todos.<|im_end|>\n<|im_start|>assistant\n")
    obs = tok.encode_chat("\n<|im_start|>user\n3 todos<|im_end|>\n<|im_start|>assistant\n")
    p2 = p1 + canonical + obs
    a2 = tok.encode("echo ok") + [tok.im_end_id]
    result = run([turn(p1, sampled), turn(p2, a2)], tok=tok)
    (case,) = result.boundaries
    assert (case.kind, case.copy_start, case.context_start) == (
        "retokenized",
        len(p1),
        len(p1) + len(canonical),
    )
    (s,) = result.samples
    assert s.token_ids.tolist() == p1 + sampled + obs + a2
    assert s.loss_mask.tolist() == [0] * len(p1) + [1] * len(sampled) + [0] * len(obs) + [1] * len(a2)
    audit = result.audit
    assert audit.retokenized_boundaries == 1 and audit.retokenized_context_tokens == 2
    assert audit.drifted_loss_tokens == 0 and audit.affected_loss_tokens == len(a2)
    assert audit.retokenized_context_fraction == pytest.approx(2 / s.num_tokens)
    # Under "normalized" the same boundary is not a drop (the tail reappears re-encoded) and splits.
    normalized = run([turn(p1, sampled), turn(p2, a2)], repair="normalized", tok=tok)
    assert normalized.boundaries[0].kind == "split"


def test_reserialized_tool_call_whitespace_near_the_end_is_normalized_else_split(tok):
    # The third harness behaviour: a tool call comes back re-serialized with other whitespace. Within the
    # last 16 ids of a_i that is a drop of the answer tail; further back no case applies, since the bytes
    # differ too.
    p1 = [1, 2]
    short = tok.encode('{"a": 1}') + [tok.im_end_id]
    short_back = tok.encode('{"a":1}') + [tok.im_end_id]
    assert short[:3] == short_back[:3] and short[3] != short_back[3]
    result = run([turn(p1, short), turn(p1 + short_back + [40], [5])], tok=tok)
    assert [(c.kind, c.s, c.u) for c in result.boundaries] == [("normalized", 0, len(short) - 3)]
    # The harness's version of the tail (up to its <|im_end|>) replaced the sampled tail: it never enters.
    assert result.samples[0].token_ids.tolist() == p1 + short + [40, 5]
    args = "cd /srv/app && git log --oneline | head -n 40 | tee /tmp/log.txt && wc -l /tmp/log.txt"
    long = tok.encode('{"a": 1, "keystrokes": "' + args + '"}') + [tok.im_end_id]
    long_back = tok.encode('{"a":1, "keystrokes": "' + args + '"}') + [tok.im_end_id]
    assert len(long) - 3 > 16
    result = run([turn(p1, long), turn(p1 + long_back + [40], [5])], tok=tok)
    assert result.boundaries[0].kind == "split" and result.audit.splits == 1


def chat(tok, text):
    return tok.encode_chat(text)


def test_a_reserialized_answer_never_enters_the_stream_after_a_normalized_repair(tok):
    # A harness re-renders the sampled tool call with other whitespace; the sampled call, then context: no
    # duplicated re-serialized tail and no second <|im_end|> (T1 §4.1: what replaced a_i never enters).
    p1 = chat(tok, "<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n")
    sampled = tok.encode('<tool_call>{"name": "bash", "arguments": {"cmd": "ls"}}</tool_call>') + [
        tok.im_end_id
    ]
    harness = tok.encode('<tool_call>{"name": "bash", "arguments": {"cmd":"ls"}}</tool_call>') + [
        tok.im_end_id
    ]
    assert tok.decode_bytes(sampled) != tok.decode_bytes(harness)  # not a re-tokenization: other bytes
    obs = chat(tok, "\n<|im_start|>user\na.txt b.txt<|im_end|>\n<|im_start|>assistant\n")
    a2 = tok.encode("done") + [tok.im_end_id]
    for repair in ("normalized", "retokenized"):
        result = run([turn(p1, sampled), turn(p1 + harness + obs, a2)], repair=repair, tok=tok)
        (case,) = result.boundaries
        assert case.kind == "normalized" and 0 < case.u <= 16
        (s,) = result.samples
        assert s.token_ids.tolist() == p1 + sampled + obs + a2
        expected_mask = [0] * len(p1) + [1] * len(sampled) + [0] * len(obs) + [1] * len(a2)
        assert s.loss_mask.tolist() == expected_mask
        assert s.token_ids.tolist().count(tok.im_end_id) == 4  # user, sampled call, observation, a_2
        assert not s.rollout_logprobs[s.loss_mask == 0].any()
        assert result.audit.drifted_loss_tokens == 0 and result.audit.dropped_context_tokens == case.u


def test_routing_through_a_reserialized_answer_skips_the_harness_copy(tok):
    end = tok.im_end_id
    p1, a1 = [1, 2, 3], [10, 11, 12, end]  # T_1: 7 ids, rows for positions [0, 6)
    p2, a2 = [1, 2, 3, 10, 20, 21, end, 40, 41], [13]  # the harness re-rendered 11 12 as 20 21; c = 7
    (s,) = run([turn(p1, a1, routed=True), turn(p2, a2, routed=True, start=0, offset=100)], tok=tok).samples
    assert s.token_ids.tolist() == p1 + a1 + [40, 41, 13]
    assert s.routing.shape == (9, L, K)
    first = s.routing[:, 0, 0]
    # stream positions 6..8 (the sampled <|im_end|>, 40, 41) take turn 2's rows at its positions 6..8: the
    # harness's <|im_end|> (c - 1 = 6) on; rows of the harness's copy (positions 4, 5) are never used
    assert first.tolist() == [0, 1, 2, 3, 4, 5, 106, 107, 108]


def test_a_stripped_answer_tail_is_closed_once(tok):
    # Trailing whitespace stripped by the harness: the template's close follows the kept ids. A sampled
    # <|im_end|> stands for the harness's; a sample without one gets the harness's close as context glue.
    p1 = chat(tok, "<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n")
    obs = chat(tok, "\n<|im_start|>user\nok<|im_end|>\n<|im_start|>assistant\n")
    body = tok.encode("echo hi")
    for stop in (tok.im_end_id, tok.endoftext_id):
        sampled = body + tok.encode("\n\n") + [stop]
        p2 = p1 + body + [tok.im_end_id] + obs
        result = run([turn(p1, sampled), turn(p2, [7])], tok=tok)
        assert result.boundaries[0].kind == "normalized"
        glue = [] if stop == tok.im_end_id else [tok.im_end_id]
        assert result.samples[0].token_ids.tolist() == p1 + sampled + glue + obs + [7]


def test_a_dropped_answer_tail_without_a_turn_close_is_not_a_drop(tok):
    # With no <|im_end|> closing the harness's answer before the next message, the ids after the kept prefix
    # cannot be told apart from a replacement of the dropped tail: the boundary splits instead.
    p1, a1 = [1, 2], [10, 11, 12, 13]
    p2 = [1, 2, 10, 11, 40, 41]
    result = run([turn(p1, a1), turn(p2, [14])], tok=tok)
    assert [c.kind for c in result.boundaries] == ["split"]
    p2 = [1, 2, 10, 11, 40, tok.im_start_id, tok.im_end_id, 41]  # a close only after the next message opens
    assert [c.kind for c in run([turn(p1, a1), turn(p2, [14])], tok=tok).boundaries] == ["split"]


def test_starts_chunk_forces_a_split_counted_apart(tok):
    p1, a1 = [1, 2], [3]
    summary_prompt = [1, 2, 3, 4]  # a strict prefix, yet the harness replaced the history: a new chunk
    result = run([turn(p1, a1, starts_chunk=True), turn(summary_prompt, [5], starts_chunk=True)], tok=tok)
    assert [c.kind for c in result.boundaries] == ["forced_split"]
    assert result.audit.forced_splits == 1 and result.audit.splits == 0 and result.chunks_split == 1
    assert [s.token_ids.tolist() for s in result.samples] == [[1, 2, 3], [1, 2, 3, 4, 5]]
    assert [s.loss_mask.tolist() for s in result.samples] == [[0, 0, 1], [0, 0, 0, 0, 1]]


def test_routing_through_a_normalized_boundary_from_a_full_record(tok):
    p1, a1 = [1, 2, 3, *THINK], [10, 11]  # T_1: 9 ids, rows for positions [0, 8)
    p2, a2 = [1, 2, 3, 10, 11, 40, 41], [12]  # c = 5; stream = T_1 + [40, 41] + [12]: 12 ids
    p3, a3 = p2 + a2 + [42], [13]  # strict after the repair, in turn 3's own positions
    turns = [
        turn(p1, a1, routed=True),
        turn(p2, a2, routed=True, start=0, offset=100),  # full record of turn 2's own sequence
        turn(p3, a3, routed=True, start=len(p2 + a2) - 1, offset=200),
    ]
    (s,) = run(turns, tok=tok).samples
    assert s.num_tokens == 9 + 3 + 2 and s.routing.shape == (13, L, K)
    first = s.routing[:, 0, 0]
    assert first[:8].tolist() == list(range(8))  # turn 1's own rows
    # Stream positions 8..10 come from turn 2's positions 4..6 (c - 1 = 4 on), written j + 100.
    assert first[8:11].tolist() == [104, 105, 106]
    # Stream positions 11..12 come from turn 3's positions 7..8.
    assert first[11:].tolist() == [207, 208]


def test_routing_after_a_repair_must_reach_back_to_c_minus_1(tok):
    p1, a1 = [1, 2, 3, *THINK], [10, 11]
    p2 = [1, 2, 3, 10, 11, 40, 41, 42, 43]
    # The harness asked for rows from len(T_1) - 1 = 8, as for a strict boundary; position 4 is needed.
    turns = [turn(p1, a1, routed=True), turn(p2, [12], routed=True, start=8)]
    with pytest.raises(RoutingMismatchError, match=r"needs the rows of this turn from position 4"):
        run(turns, tok=tok)
    assert routing_start_len(p1, a1, p2) == 0  # what the harness should have asked for
    assert routing_start_len(p1, a1, p1 + a1 + [5]) == len(p1 + a1) - 1


def test_strict_trajectories_keep_their_figures(tok):
    # The strict path is unchanged by the repair modes: same stream, same audit counts.
    p1, a1 = [1, 2], [3, 4]
    p2, a2 = [1, 2, 3, 4, 5], [6]
    turns = [turn(p1, a1), turn(p2, a2)]
    strict, repaired = stitch(turns, reward=0.5, **META), run(turns, tok=tok)
    assert (
        strict.samples[0].token_ids.tolist() == repaired.samples[0].token_ids.tolist() == [1, 2, 3, 4, 5, 6]
    )
    assert strict.audit == repaired.audit
    assert strict.audit.strict_boundaries == 1 and strict.audit.affected_loss_tokens == 0


def test_audit_totals_sum_every_count(tok):
    a = run([turn([1, 2, *THINK], [10]), turn([1, 2, 10, 40], [11])], tok=tok).audit
    b = run([turn([1], [2]), turn([7], [8])], tok=tok).audit
    total = DriftAudit.total([a, b])
    assert total.normalized_boundaries == 1 and total.splits == 1 and total.dropped_context_tokens == 4
    assert total.total_tokens == a.total_tokens + b.total_tokens == 9 + 4


def test_prompts_in_one_buffer_stitch_like_separate_arrays():
    from t1_tito import PromptBuffer

    buffer = PromptBuffer([1, 2, 3], capacity=8)  # small: the third prompt forces a grow (a new array)
    p1 = buffer.view()
    p2 = buffer.extend([10, 11], [40])
    p3 = buffer.extend([12], [41, 42, 43])
    assert np.shares_memory(p1, p2) and not np.shares_memory(p2, p3)
    turns = [turn(p1, [10, 11]), turn(p2, [12]), turn(p3, [13])]
    copies = [turn(np.array(t.prompt_ids), t.output_ids) for t in turns]
    got, want = stitch(turns, reward=0.5, **META), stitch(copies, reward=0.5, **META)
    assert got.samples[0].token_ids.tolist() == want.samples[0].token_ids.tolist() == p3.tolist() + [13]
    assert [c.kind for c in got.boundaries] == ["strict", "strict"]
    # A sampled id that differs is still caught when the prompt part is shared memory.
    assert stitch([turn(p1, [10, 99]), turn(p2, [12])], reward=0.5, **META).boundaries[0].kind == "split"
