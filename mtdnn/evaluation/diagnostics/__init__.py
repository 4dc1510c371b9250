"""Diagnostics: does a model reason, or does it use cues of its data set?

- :mod:`.hans`: HANS (McCoy et al. 2019), accuracy per syntactic heuristic and gold label; its files are read by
  :mod:`.hans_file`.
- :mod:`.arct`: adversarial ARCT (Niven and Kao 2019), original against claim-negated rows.
- :mod:`.cues`: cue statistics of a data set (Niven and Kao 2019 section 3; Gururangan et al. 2018).
- :mod:`.partial_input`: partial-input baselines (hypothesis-only, warrants-only) trained by the normal trainer.
- :mod:`.report`: one Markdown page with every table and plot that applies to a run's tasks.

``python -m mtdnn.diagnose`` (:mod:`mtdnn.cli.diagnose`) is the command line over these functions.
"""
