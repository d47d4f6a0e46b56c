"""The SLU data layer: `Utterance`, `Corpus`, readers for each format, the Lightning data module."""

from robustnlu.data.bio import bio_problem
from robustnlu.data.utterance import Corpus, LabelVocab, Utterance

__all__ = ["Corpus", "LabelVocab", "Utterance", "bio_problem"]
