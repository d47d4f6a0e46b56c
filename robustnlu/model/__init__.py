"""Models: swappable encoders and the JointBERT heads.

- `encoders`: the encoder named by ``encoder=`` (embedded MiniLM, a Hugging Face model, the tiny
  random BERT) and its tokenizer (`build_encoder`, `load_tokenizer`);
- `jointbert`: `JointBERT` (intent and slot heads on the encoder), its output and the per-example
  `TaskLosses` every objective reads;
- `crf`: the linear-chain CRF slot head; `spec`: what an objective may know of the model (`ModelSpec`).

Nothing is imported here: an objective's module imports `jointbert` (torch) without loading
transformers, so a config check that reads the objectives' declarations stays fast.
"""
