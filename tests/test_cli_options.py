"""Every documented command keeps its flags, defaults, choices and actions (``tests/fixtures/cli_options.json``,
written from the commands before the settings schema generated the flags); the only new options are the ones
issue 25 adds."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from cli_options import option_sets  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "cli_options.json"
# options added since the fixture was taken (issue 25: --print-config, distill --resume; issue 26: the progress
# lines, --no-export-hf, evaluate and predict --file)
ADDED = {"train": [["--print-config"], ["--progress-every-n-steps"], ["--export-hf", "--no-export-hf"]],
         "distill": [["--resume"]], "evaluate": [["--file"]], "predict": [["--file"]]}


def test_every_command_keeps_its_options():
    before = json.loads(FIXTURE.read_text())
    now = option_sets()
    assert set(now) == set(before)
    for command, options in before.items():
        current = {json.dumps(o, sort_keys=True) for o in now[command]}
        missing = [o for o in options if json.dumps(o, sort_keys=True) not in current]
        assert not missing, f"{command}: options changed or gone: {missing}"
        added = [o["flags"] for o in now[command] if json.dumps(o, sort_keys=True) not in
                 {json.dumps(p, sort_keys=True) for p in options}]
        assert added == ADDED.get(command, []) or sorted(added) == sorted(ADDED.get(command, [])), \
            f"{command}: unexpected new options {added}"
