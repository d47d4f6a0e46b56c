"""``python -m robustnlu.noise dataset=<name> noise=<type> out_dir=DIR [splits=[test]]``: write a
noised copy of a dataset in the jsonl format (conf/noise_dataset.yaml). The transform is
fitted on the clean training split and seeded by ``seed``; ``noise_stats.json`` records its
parameters and, per noised split, how much it changed. The four files are written as one step
(`robustnlu.io.atomic_write_files`: none is replaced unless every one is written); an
``out_dir`` where a file to write is one of the dataset's own files (e.g. the folder of its
train.jsonl) is refused before any work."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from robustnlu.cli import hydra_app, run_or_exit
from robustnlu.data.readers import load_corpus
from robustnlu.data.utterance import SPLITS
from robustnlu.io import atomic_write_files, check_outputs, json_text, jsonl_text, writing
from robustnlu.noise.augment import build_transform
from robustnlu.noise.base import noise_all


def write_noised_dataset(cfg: DictConfig) -> dict:
    corpus = load_corpus(cfg.dataset)
    out_dir = Path(cfg.out_dir)
    files = [*(out_dir / f"{split}.jsonl" for split in SPLITS), out_dir / "noise_stats.json"]
    check_outputs(files, corpus.files(), "out_dir")
    transform = build_transform(cfg.noise, cfg.seed).fit(corpus.train)
    stats, rows = {}, {}
    for split in SPLITS:  # every split is noised before any file is written
        utterances = corpus.split(split)
        if split in cfg.splits:
            utterances, split_stats = noise_all(transform, utterances)
            stats[split] = split_stats.to_dict()
        rows[split] = [{"uid": u.uid, "tokens": list(u.tokens), "tags": list(u.tags), "intent": u.intent,
                        **({"domain": u.domain} if u.domain else {})} for u in utterances]
    record = {"dataset": corpus.name, "noise": transform.config(), "seed": cfg.seed, "splits": stats}
    with writing("out_dir"):
        atomic_write_files({**{out_dir / f"{split}.jsonl": jsonl_text(rows[split]) for split in SPLITS},
                            out_dir / "noise_stats.json": json_text(record)})
    print(f"{corpus.name}: {transform.name} noise on {', '.join(stats)} → {out_dir}")
    for split, s in stats.items():
        print(f"  {split}: {s['utterances_changed']}/{s['utterances']} utterances, "
              f"{s['tokens_changed']}/{s['tokens']} tokens changed ({s['slot_tokens_changed']} inside slots)")
    return record


@hydra_app("noise_dataset")
def main(cfg: DictConfig) -> None:
    run_or_exit(write_noised_dataset, cfg)


if __name__ == "__main__":
    main()
