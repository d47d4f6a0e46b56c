"""Models: swappable encoders and the JointBERT heads."""

from robustnlu.model.encoders import build_encoder, load_tokenizer
from robustnlu.model.jointbert import JointBERT, JointBERTOutput, TaskLosses

__all__ = ["JointBERT", "JointBERTOutput", "TaskLosses", "build_encoder", "load_tokenizer"]
