"""The Qwen3.5 tokenizer wrapper: real vocabulary, special ids, no network."""

import pytest

from t1_tito import QWEN3_5_PADDED_VOCAB_SIZE, load_tokenizer


def test_real_qwen3_5_vocabulary_size(tok):
    # 248,077 tokenizer ids; the model pads its embedding to 248,320 (paper README).
    assert tok.vocab_size == 248_077
    assert tok.padded_vocab_size == QWEN3_5_PADDED_VOCAB_SIZE == 248_320


def test_special_tokens_are_single_ids(tok):
    # Qwen3.5's special tokens start at 248,044 with <|endoftext|>, <|im_start|>, <|im_end|>.
    assert (tok.endoftext_id, tok.im_start_id, tok.im_end_id) == (248_044, 248_045, 248_046)
    assert tok.eos_ids == (tok.im_end_id, tok.endoftext_id)
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>", allow_special=True)
    assert ids[0] == tok.im_start_id and ids[-1] == tok.im_end_id
    assert len(tok.encode("<tool_call>", allow_special=True)) == 1
    assert len(tok.encode("</think>", allow_special=True)) == 1


def test_encode_decode_round_trip(tok):
    text = 'cd /srv && git bisect start\n{"keystrokes": "ls -la\\n", "duration": 0.1} ünïcödé 中文'
    assert tok.decode(tok.encode(text)) == text


def test_decode_with_offsets_gives_each_token_start(tok):
    ids = tok.encode("hello world<|im_end|>", allow_special=True)
    text, offsets = tok.decode_with_offsets(ids)
    assert text == "hello world<|im_end|>"
    assert len(offsets) == len(ids)
    assert [text[o : o + 1] for o in offsets][-1] == "<"  # the special token starts at its '<'
    assert offsets == sorted(offsets) and offsets[0] == 0


def test_loaded_once_per_process(tok):
    assert load_tokenizer() is tok


def test_unknown_tokenizer_name():
    with pytest.raises(ValueError, match="unknown tokenizer"):
        load_tokenizer("llama")
