"""The wording helpers: number words, counts, lists, lowering a first letter, joining a message's parts."""

import pytest

from ifgym.core.wording import NUMBER_WORDS, and_list, count, lower_first, or_list, sentences, times


def test_number_words_name_zero_to_twenty_by_index():
    assert len(NUMBER_WORDS) == 21
    assert [NUMBER_WORDS[n] for n in (0, 3, 12, 20)] == ["zero", "three", "twelve", "twenty"]


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "one word"),  # singular unit
        (5, "five words"),  # the largest count written in words
        (6, "6 words"),  # larger counts in digits, as the phrasings always said them
        (40, "40 words"),
    ],
)
def test_count(n, text):
    assert count(n, ("word", "words")) == text


@pytest.mark.parametrize(
    ("text", "lowered"),
    [
        ("Hello there", "hello there"),
        ("A short note", "a short note"),  # a one-letter word is not an acronym
        ("JSON only", "JSON only"),  # an acronym keeps its capitals
        ("I'd also like that", "I'd also like that"),  # so does "I"
        ("I am here", "I am here"),
        ("It is late", "it is late"),  # a word that only starts with I is lowered
        ("", ""),
    ],
)
def test_lower_first(text, lowered):
    assert lower_first(text) == lowered


def test_lists_and_sentences():
    assert and_list(["a"]) == "a" and and_list(["a", "b", "c"]) == "a, b and c"
    assert or_list(["a", "b"]) == "a or b"
    assert sentences([" Hi.", "", "  ", "Write it. "]) == "Hi. Write it."  # blank parts dropped, parts stripped
    assert (times(1), times(2), times(3)) == ("once", "twice", "3 times")
