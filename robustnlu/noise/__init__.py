"""Real-world noise (Krone et al., paper 002): slot-preserving noise transforms (one module per
noise type, `robustnlu.noise.base` for the interface and the alignment rules), training
augmentation (`robustnlu.noise.augment`), the released noisy test suite
(`robustnlu.noise.suite`) and the ``python -m robustnlu.noise`` CLI."""
