"""``make bench`` (= ``python -m bench``): the speed and memory goals of robustnlu, each measured
as a ratio side by side in one process, so the machine's own speed cancels out.

All training here is JointBERT + ERM with the embedded encoder (all-MiniLM-L6-v2) on SNIPS,
configured by the real Hydra configs in ``conf/`` (model, objective, optimizer, trainer), with
batches of 32 from the SNIPS training split in the order the data module's
`ShuffledBatchSampler` draws them for ``seed``. Every training run starts from the same
initial weights (a deep copy of one freshly built `SLUModule`, state dict included) and is
seeded the same way; all runs see the same batches, so their final losses agree closely (they
are in the JSON as a sanity check).

The numbers
-----------
(a) **Lightning overhead** = examples/s of our Lightning loop ÷ examples/s of a minimal
    plain-PyTorch loop, on the same list of pre-collated batches (dynamic padding). Goal ≥ 0.95.

    - Lightning side: the real `SLUModule` under a ``pl.Trainer`` instantiated from
      ``conf/trainer`` (so the same precision, gradient clipping 1.0, ``log_every_n_steps``...)
      with no progress bar, no logger, no checkpointing and no validation
      (``limit_val_batches=0``), one epoch over a ``DataLoader(batches, batch_size=None)``;
      ``training_step`` keeps its ``self.log`` calls, they are part of what is measured.
    - Plain side: forward → ERM loss → backward → ``clip_grad_norm_(1.0)`` → optimizer step →
      scheduler step → ``zero_grad``, with the optimizer and linear schedule that
      ``SLUModule.configure_optimizers`` itself builds (same AdamW parameter groups); the
      bench checks that both sides got the same groups, the same number of schedule steps and
      the same clipping value.
    - Timing excludes warm-up: both loops read a clock at the *start* of step ``warmup`` and at
      the start of the last step, so the interval covers ``steps`` complete iterations with all
      per-step overhead (data fetching, hooks, logging, scheduler) and neither the
      set-up nor the epoch end. examples/s = examples in those steps ÷ that interval.
(b) **Dynamic vs fixed padding** = examples/s of the plain loop on batches padded to their own
    longest utterance (``Collator(pad_to=None)``, our default) ÷ examples/s of the plain loop
    on the *same* batches padded to 50 tokens (``Collator(pad_to=50)``, JointBERT's default
    ``max_seq_len``). Goal ≥ 1.8. The mean padded tokens per batch of each mode (and the real,
    non-pad tokens, identical in both) are printed alongside. The dynamic runs are the same
    runs as the plain side of (a).
(c) **Peak RSS of a SNIPS training run**: ``python -m robustnlu`` (the real CLI; full SNIPS
    read and tokenised, embedded encoder) in a subprocess with ``trainer.max_epochs=1
    ++trainer.limit_train_batches=N`` (60 by default) and 2 validation and test batches
    (``++``: ``conf/trainer`` has no such keys), no progress bar, in a temporary run directory;
    its peak resident set size (``VmHWM``) as the child reads it for itself at exit
    (`bench.child`; ``ru_maxrss`` would count this process's size at the spawn too). It
    includes the end-of-run validation, checkpointing and test.
    Goal < 3 GB (decimal, 3·10⁹ bytes).

The runs alternate (plain-dynamic, Lightning, plain-fixed, then again), ``repeats`` times each,
and the ratios are those of the medians. ``torch.set_num_threads`` is set once, to the default
thread count, so every side of every comparison uses the same number of threads.

Other processes: on a 2-core machine, another process busy on one core makes a 2-thread torch
step several times (not two times) slower, which would swamp any ratio. So each timed run also
records how many CPUs the rest of the machine kept busy meanwhile (``/proc/stat`` minus this
process's CPU time); before a run the bench waits briefly for a quiet machine, a run disturbed
by more than 0.25 CPU is run again (a few times, within a time budget) and only the last
attempt counts; if a counted run was still disturbed, the table says the ratios are unreliable.

Output: a table of ratios with goal and PASS/MISS on stdout; every number (per run timings,
settings, versions) in ``bench/results/latest.json``, written atomically. A MISS does not fail
the process; a crash does (exit status 1, with whatever was measured still written).

The GPU check
-------------
``make device-check`` (`bench.device_check`, on a lent GPU machine through the two device calls of
bench/DEVICE.md, joined by `bench.device_merge`) measures the GPU path with the same loops and
workload: throughput of the MiniLM and BERT-base architectures, MFU, memory, several runs per GPU,
the CLI run, the step's profile and ``torch.compile``; ``make device-wheels`` (`bench.device_wheels`)
prepares what it carries.
"""
