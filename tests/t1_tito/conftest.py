"""Shared fixtures of the TITO tests: the real Qwen3.5 tokenizer, the chat template, a fresh session."""

import pytest

from t1_tito import ChatTemplate, TitoSession, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer()


@pytest.fixture(scope="module")
def tpl():
    return ChatTemplate()


@pytest.fixture()
def session(tok, tpl):
    return TitoSession(tok, tpl)
