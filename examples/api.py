"""The Python API, notebook style: train two GLUE tasks on small slices, load the export, predict raw text.

    python examples/api.py --data-dir ../shared/data                    # the packaged MiniLM, about a minute on CPU
    python examples/api.py --encoder path/to/tiny-bert --output-dir /tmp/api-demo   # what the test runs

Each cell below is what one would type in a notebook; the command-line equivalents are in the comments.
"""

import argparse
import tempfile
from pathlib import Path

import mtdnn

ROOT = Path(__file__).resolve().parents[1]

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--data-dir", default=None, help="data root (default: $MTDNN_DATA_DIR, else ../shared/data)")
parser.add_argument("--encoder", default="packaged-minilm")
parser.add_argument("--limit-train-examples", type=int, default=64)
parser.add_argument("--output-dir", default=None, help="run directory (default: a temporary one)")
args = parser.parse_args()
output_dir = args.output_dir or tempfile.mkdtemp(prefix="mtdnn-api-")

# %% 1. One typed configuration: every setting of the run (python -m mtdnn.train task_defs/glue.yaml --tasks ...).
config = mtdnn.TrainConfig(
    task_defs=str(ROOT / "task_defs" / "glue.yaml"),
    tasks=["rte", "cola"],              # a sentence-pair task and a single-sentence task, one shared encoder
    data_dir=args.data_dir,
    encoder=args.encoder,
    limit_train_examples=args.limit_train_examples,  # real data, small slices
    max_epochs=1,
    batch_size=16,
    max_length=64,
    lr=1e-4,
    output_dir=output_dir,
    accelerator="cpu",
    devices=1,
)

# %% 2. Train, select on dev, export: the same code path as the command. The run directory's config.yaml is the
# config above, resolved; `python -m mtdnn.train --config <run>/config.yaml` reruns it.
run = mtdnn.fit(config)
print("best dev average:", round(run.best["average"], 4), {t: s for t, s in run.best["tasks"].items()})
print("export:", run.export)

# %% 3. Load the export (it stands alone: encoder, tokenizer, heads, task definitions) and predict raw text.
model = mtdnn.load(run.export)
for p in model.predict([("A man is playing a guitar on stage.", "A person plays music."),
                        ("The shop is closed on Sundays.", "The shop opens every day.")], task="rte"):
    print("rte:", p["prediction"], {label: round(q, 3) for label, q in p["probabilities"].items()})
for p in model.predict(["The book was read by the student.", "The book read student the by."], task="cola"):
    print("cola:", p["prediction"], round(p["probability"], 3))

# %% 4. Score a labelled split with training's metrics (python -m mtdnn.evaluate <run> --tasks rte).
print("rte dev:", model.evaluate("rte", "dev")["tasks"]["rte"])
